-- The running steps, for the engine's full sweep pass that finds a running
-- step whose River job was finalized or is missing (issue 46: nothing
-- else would ever run such a step). Only running steps are in it, so the
-- pass reads as many rows as steps are running, not the whole table.
CREATE INDEX IF NOT EXISTS engine_step_running ON engine_step (id) WHERE state = 'running';
