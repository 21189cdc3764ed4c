ALTER TABLE engine_run RESET (fillfactor);
ALTER TABLE engine_step RESET (fillfactor);
