DROP INDEX IF EXISTS component_blocking_idx;
ALTER TABLE component
    DROP COLUMN IF EXISTS operation_phase,
    DROP COLUMN IF EXISTS operation_reason,
    DROP COLUMN IF EXISTS blocked_operations;
