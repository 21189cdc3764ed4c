-- Flow's operability view of a component (ComponentOperationStatus): its
-- phase, why, and which operation types Flow refuses while it lasts. The
-- readiness gate of disruptive operations (spec/execution.md §8.7) waits
-- while a targeted component blocks the task's operation type. Inventory
-- sync with NICo Core is what will keep it current; until then it keeps
-- its resting value (unknown, nothing blocked) unless set explicitly.
ALTER TABLE component
    ADD COLUMN operation_phase    text   NOT NULL DEFAULT 'unknown'
        CHECK (operation_phase IN ('unknown', 'initializing', 'ready', 'in_use', 'error', 'deleting')),
    ADD COLUMN operation_reason   text   NOT NULL DEFAULT '',
    ADD COLUMN blocked_operations text[] NOT NULL DEFAULT '{}';

-- The readiness gate asks which components block an operation on every
-- disruptive call; only the few that block anything are indexed.
CREATE INDEX component_blocking_idx ON component (rack_id) WHERE cardinality(blocked_operations) > 0;
