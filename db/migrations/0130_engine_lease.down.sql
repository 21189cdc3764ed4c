ALTER TABLE engine_step
    DROP COLUMN IF EXISTS process_id,
    DROP COLUMN IF EXISTS exec_token,
    DROP COLUMN IF EXISTS claimed_at;
DROP TABLE IF EXISTS engine_process;
