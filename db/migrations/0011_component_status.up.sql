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
