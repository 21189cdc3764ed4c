-- Retention (docs/operations.md#sizing-and-retention): the leader's prune
-- job deletes finished history in small batches, oldest first.

-- The finished tasks in end order, for pruning; the active ones have
-- task_active_rack.
CREATE INDEX task_finished_at ON task (finished_at)
    WHERE status IN ('completed', 'failed', 'terminated');

-- The unfinished tasks newest first (ListTasks active_only without a rack):
-- with a year of history, the newest-first walk of task_created_at_id
-- would pass every finished task to find the few active ones.
CREATE INDEX task_active_created ON task (created_at DESC, id DESC)
    WHERE status IN ('waiting', 'pending', 'running');

-- Finished operation runs in end order.
CREATE INDEX operation_run_finished_at ON operation_run (finished_at)
    WHERE status IN ('completed', 'completed_with_failures', 'cancelled', 'failed');

-- Events by the last time their source reported them.
CREATE INDEX event_last_observed ON event (last_observed_at);

-- What each pruning rule has done: rows deleted since the table was made,
-- the last cycle, and the creation time of the oldest row it kept (NULL:
-- none left).
CREATE TABLE prune_stat (
    name        text        PRIMARY KEY,
    rows_pruned bigint      NOT NULL DEFAULT 0,
    last_run_at timestamptz NOT NULL DEFAULT now(),
    oldest_kept timestamptz
);
