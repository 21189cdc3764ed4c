-- The River job that times a run out (engine.run_timeout), so the
-- transaction that ends the run cancels it instead of leaving it scheduled
-- for hours (docs/observability.md). NULL for runs without a timeout and
-- for runs started before this column existed.
ALTER TABLE engine_run ADD COLUMN timeout_job_id bigint;
