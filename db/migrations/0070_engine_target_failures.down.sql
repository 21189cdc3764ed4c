DROP INDEX engine_step_failed_targets_idx;
ALTER TABLE engine_step DROP COLUMN failed_targets;
