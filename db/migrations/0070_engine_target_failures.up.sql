-- Per-target outcomes: the targets of a step that failed for good while the
-- rest of their batch succeeded (target → error). Steps of one chain (the
-- actions of one rule step) skip the targets an earlier step of the chain
-- failed; the partial index finds those few rows without touching the rest.
ALTER TABLE engine_step ADD COLUMN failed_targets jsonb NOT NULL DEFAULT '{}';
CREATE INDEX engine_step_failed_targets_idx ON engine_step (run_id) WHERE failed_targets <> '{}';
