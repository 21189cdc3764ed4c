-- Operation runs (docs/rollouts.md): the queries of operations/rollout.

-- name: OperationRunInsert :one
INSERT INTO operation_run (name, description, selector, options, operation_template, operation_type, operation_code, total_phases, created_by, status)
VALUES (@name, @description, @selector, @options, @operation_template, @operation_type, @operation_code, @total_phases, @created_by, @status)
RETURNING *;

-- name: OperationRunTargetInsert :copyfrom
INSERT INTO operation_run_target (operation_run_id, rack_id, sequence_index, phase_index, components_by_type)
VALUES (@operation_run_id, @rack_id, @sequence_index, @phase_index, @components_by_type);

-- name: OperationRunGetByID :one
SELECT * FROM operation_run WHERE id = @id;

-- name: OperationRunExist :many
SELECT id FROM operation_run WHERE id = ANY(@ids::uuid[]);

-- name: OperationRunLock :one
-- Every transition of a run holds this row lock: replicas, child-task ends,
-- wake-ups and operator controls serialise on it.
SELECT * FROM operation_run WHERE id = @id FOR UPDATE;

-- name: OperationRunTryLock :many
-- The run's row lock if no one holds it (no rows otherwise).
SELECT id FROM operation_run WHERE id = @id FOR UPDATE SKIP LOCKED;

-- name: OperationRunUpdate :exec
UPDATE operation_run SET status = @status, status_reason = @status_reason, status_message = @status_message,
    current_phase_index = @current_phase_index, wake_at = sqlc.narg(wake_at),
    started_at = sqlc.narg(started_at), finished_at = sqlc.narg(finished_at), updated_at = now()
WHERE id = @id;

-- name: OperationRunList :many
SELECT * FROM operation_run
WHERE (cardinality(@name_patterns::text[]) = 0
       OR (CASE WHEN @name_any::bool THEN name LIKE ANY (@name_patterns::text[]) ELSE name LIKE ALL (@name_patterns::text[]) END))
  -- States and kinds are "status|reason" and "type|code" LIKE patterns
  -- ('%' for a field left open); entries are OR-ed.
  AND (cardinality(@states::text[]) = 0 OR (status || '|' || status_reason) LIKE ANY(@states::text[]))
  AND (cardinality(@kinds::text[]) = 0 OR (operation_type || '|' || operation_code) LIKE ANY(@kinds::text[]))
ORDER BY created_at DESC, id DESC
LIMIT @row_limit OFFSET @row_offset;

-- name: OperationRunCount :one
SELECT count(*)::int FROM operation_run
WHERE (cardinality(@name_patterns::text[]) = 0
       OR (CASE WHEN @name_any::bool THEN name LIKE ANY (@name_patterns::text[]) ELSE name LIKE ALL (@name_patterns::text[]) END))
  -- States and kinds are "status|reason" and "type|code" LIKE patterns
  -- ('%' for a field left open); entries are OR-ed.
  AND (cardinality(@states::text[]) = 0 OR (status || '|' || status_reason) LIKE ANY(@states::text[]))
  AND (cardinality(@kinds::text[]) = 0 OR (operation_type || '|' || operation_code) LIKE ANY(@kinds::text[]));

-- name: OperationRunActiveIDs :many
-- Runs a sweep ticks: pending or running, least recently touched first.
SELECT id FROM operation_run WHERE status IN ('pending', 'running') ORDER BY updated_at LIMIT @row_limit;

-- name: OperationRunTargetsOfPhaseForUpdate :many
-- A phase's targets with their child task's status, locked.
SELECT sqlc.embed(t), coalesce(k.status, '')::text AS task_status, coalesce(k.message, '')::text AS task_message
FROM operation_run_target t LEFT JOIN task k ON k.id = t.task_id
WHERE t.operation_run_id = @operation_run_id AND t.phase_index = @phase_index
ORDER BY t.sequence_index
FOR UPDATE OF t;

-- name: OperationRunTargetPhaseCounts :many
-- Per phase and status: targets, and unacknowledged failures.
SELECT phase_index, status, count(*)::int AS n, count(*) FILTER (WHERE NOT acknowledged)::int AS unacknowledged
FROM operation_run_target WHERE operation_run_id = @operation_run_id
GROUP BY phase_index, status;

-- name: OperationRunTargetUpdate :exec
UPDATE operation_run_target SET status = @status, message = @message, task_id = sqlc.narg(task_id),
    retry_after = sqlc.narg(retry_after), retry_state = @retry_state, updated_at = now()
WHERE id = @id;

-- name: OperationRunTargetSkipOpen :execrows
UPDATE operation_run_target SET status = 'skipped', message = @message, retry_after = NULL, updated_at = now()
WHERE operation_run_id = @operation_run_id AND status IN ('pending', 'claimed', 'blocked');

-- name: OperationRunTargetAcknowledge :execrows
UPDATE operation_run_target SET acknowledged = true, updated_at = now()
WHERE operation_run_id = @operation_run_id AND status = 'failed' AND NOT acknowledged;

-- name: OperationRunTargetRestartBlocked :execrows
-- Restarts the retry-timeout clock of blocked targets (on resume).
UPDATE operation_run_target
SET retry_state = jsonb_set(retry_state, '{blocked_since}', to_jsonb(now())), retry_after = least(retry_after, now()), updated_at = now()
WHERE operation_run_id = @operation_run_id AND status = 'blocked';

-- name: OperationRunTargetRunByTask :many
SELECT operation_run_id FROM operation_run_target WHERE task_id = @task_id;

-- name: OperationRunBlockedOnTaskRack :many
-- The task's rack, and the runs with a target blocked on it.
SELECT k.rack_id, t.operation_run_id
FROM task k JOIN operation_run_target t ON t.rack_id = k.rack_id AND t.status = 'blocked'
WHERE k.id = @task_id;

-- name: OperationRunTargetRunByTasks :many
-- The runs with a target carried out by one of the tasks, in ID order.
SELECT DISTINCT operation_run_id FROM operation_run_target WHERE task_id = ANY(@task_ids::uuid[])
ORDER BY operation_run_id;

-- name: OperationRunBlockedOnTaskRacks :many
-- The tasks' racks, and the runs with a target blocked on one of them.
SELECT DISTINCT t.operation_run_id, k.rack_id
FROM task k JOIN operation_run_target t ON t.rack_id = k.rack_id AND t.status = 'blocked'
WHERE k.id = ANY(@task_ids::uuid[])
ORDER BY t.operation_run_id, k.rack_id;

-- name: OperationRunTargetRetryRack :exec
-- The run's target blocked on the rack retries now (the rack's task just
-- ended). Call with the run locked.
UPDATE operation_run_target SET retry_after = now(), updated_at = now()
WHERE operation_run_id = @operation_run_id AND rack_id = @rack_id AND status = 'blocked';

-- name: OperationRunTargetComponents :many
-- Materialized targets of runs (for exclusions).
SELECT rack_id, components_by_type FROM operation_run_target WHERE operation_run_id = ANY(@ids::uuid[]);

-- name: OperationRunTargetList :many
SELECT sqlc.embed(t), r.external_id AS rack_external_id
FROM operation_run_target t LEFT JOIN rack r ON r.id = t.rack_id
WHERE t.operation_run_id = @operation_run_id
  AND t.phase_index BETWEEN @min_phase::int AND @max_phase::int
  AND (@status::text = '' OR t.status = @status::text)
ORDER BY t.phase_index, t.sequence_index
LIMIT @row_limit OFFSET @row_offset;

-- name: OperationRunTargetCount :one
SELECT count(*)::int FROM operation_run_target t
WHERE t.operation_run_id = @operation_run_id
  AND t.phase_index BETWEEN @min_phase::int AND @max_phase::int
  AND (@status::text = '' OR t.status = @status::text);

-- name: OperationRunPruneBatch :one
-- Deletes up to row_limit finished runs that ended before @before, oldest
-- first, with their targets; says how many runs and targets went.
WITH doomed AS (
    SELECT r.id FROM operation_run r
    WHERE r.status IN ('completed', 'completed_with_failures', 'cancelled', 'failed') AND r.finished_at < @before::timestamptz
    ORDER BY r.finished_at
    LIMIT @row_limit
    FOR UPDATE SKIP LOCKED
), targets AS (
    SELECT count(*) AS n FROM operation_run_target WHERE operation_run_id IN (SELECT id FROM doomed)
), gone AS (
    DELETE FROM operation_run WHERE id IN (SELECT id FROM doomed) RETURNING 1
)
SELECT (SELECT count(*) FROM gone)::bigint AS runs, (SELECT n FROM targets)::bigint AS targets;

-- name: OperationRunPinnedTasks :many
-- The tasks of the targets of runs not finished: pruning keeps them.
SELECT DISTINCT t.task_id::uuid AS task_id FROM operation_run_target t
JOIN operation_run r ON r.id = t.operation_run_id
WHERE r.status IN ('pending', 'running', 'paused') AND t.task_id IS NOT NULL;

-- name: OperationRunOldestCreated :one
SELECT created_at FROM operation_run ORDER BY created_at LIMIT 1;

-- name: OperationRunCountByStatus :many
SELECT status, count(*)::bigint AS n FROM operation_run GROUP BY status;

-- name: OperationRunActiveTargetCountByStatus :many
SELECT t.status, count(*)::bigint AS n FROM operation_run_target t
JOIN operation_run r ON r.id = t.operation_run_id
WHERE r.status IN ('pending', 'running', 'paused')
GROUP BY t.status;

-- name: OperationRunActivePhases :many
SELECT id, name, current_phase_index FROM operation_run
WHERE status IN ('pending', 'running', 'paused') ORDER BY created_at LIMIT 100;

-- name: OperationRunOverlapping :many
-- The unfinished runs (awaiting approval, pending, running or paused) with
-- targets on any of rack_ids, each with those of its racks, by name (the
-- rack ID when unnamed or purged), oldest run first.
SELECT r.id, r.name, r.status,
    array_agg(coalesce(nullif(k.name, ''), t.rack_id::text) ORDER BY t.rack_id)::text[] AS racks
FROM operation_run r
JOIN operation_run_target t ON t.operation_run_id = r.id
LEFT JOIN rack k ON k.id = t.rack_id
WHERE r.status IN ('pending_approval', 'pending', 'running', 'paused') AND t.rack_id = ANY(@rack_ids::uuid[])
GROUP BY r.id, r.name, r.status, r.created_at
ORDER BY r.created_at, r.id;

-- name: OperationRunTargetsAll :many
-- Every target of a run, in sequence order.
SELECT * FROM operation_run_target WHERE operation_run_id = @operation_run_id ORDER BY sequence_index;
