DROP INDEX IF EXISTS engine_step_running;
