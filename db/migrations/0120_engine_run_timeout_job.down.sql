ALTER TABLE engine_run DROP COLUMN timeout_job_id;
