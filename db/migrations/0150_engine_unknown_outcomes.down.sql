ALTER TABLE engine_step DROP COLUMN unknown_outcomes;
