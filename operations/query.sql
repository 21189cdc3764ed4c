-- name: RuleInsert :one
INSERT INTO operation_rule (name, description, operation_type, operation_code, rule_definition, is_default)
VALUES (@name, @description, @operation_type, @operation_code, @rule_definition, @is_default)
RETURNING *;

-- name: RuleGetByID :one
SELECT * FROM operation_rule WHERE id = @id;

-- name: RuleGetByIDForUpdate :one
SELECT * FROM operation_rule WHERE id = @id FOR UPDATE;

-- name: RuleGetDefault :one
SELECT * FROM operation_rule
WHERE operation_type = @operation_type AND operation_code = @operation_code AND is_default;

-- name: RuleUpdate :one
UPDATE operation_rule SET
    name            = coalesce(sqlc.narg(name), name),
    description     = coalesce(sqlc.narg(description), description),
    rule_definition = coalesce(sqlc.narg(rule_definition), rule_definition),
    updated_at      = now()
WHERE id = @id
RETURNING *;

-- name: RuleDelete :execrows
DELETE FROM operation_rule WHERE id = @id;

-- name: RuleList :many
SELECT * FROM operation_rule
WHERE (sqlc.narg(operation_type)::text IS NULL OR operation_type = sqlc.narg(operation_type)::text)
  AND (sqlc.narg(is_default)::boolean IS NULL OR is_default = sqlc.narg(is_default)::boolean)
ORDER BY created_at DESC, id DESC
OFFSET @row_offset LIMIT @row_limit;

-- name: RuleCount :one
SELECT count(*)::int FROM operation_rule
WHERE (sqlc.narg(operation_type)::text IS NULL OR operation_type = sqlc.narg(operation_type)::text)
  AND (sqlc.narg(is_default)::boolean IS NULL OR is_default = sqlc.narg(is_default)::boolean);

-- name: RuleClearDefault :exec
UPDATE operation_rule SET is_default = false, updated_at = now()
WHERE operation_type = @operation_type AND operation_code = @operation_code AND is_default AND id <> @id;

-- name: RuleSetDefault :exec
UPDATE operation_rule SET is_default = true, updated_at = now() WHERE id = @id AND NOT is_default;

-- name: RuleDefaultLock :exec
-- Serialises writers of the default flag for one (type, code).
SELECT pg_advisory_xact_lock(hashtextextended('flow.operation_rule.default:' || @operation_type::text || '.' || @operation_code::text, 0));

-- name: AssociationUpsert :exec
INSERT INTO rack_rule_association (rack_id, operation_type, operation_code, rule_id)
VALUES (@rack_id, @operation_type, @operation_code, @rule_id)
ON CONFLICT (rack_id, operation_type, operation_code)
DO UPDATE SET rule_id = excluded.rule_id, updated_at = now();

-- name: RuleForRack :many
-- The rule rack_id is associated with for the operation, then the
-- operation's default rule: those of the two that exist, the associated one
-- first, each found through its index (a submission resolves its rule in
-- one round trip).
SELECT sqlc.embed(r), true AS associated
FROM rack_rule_association a JOIN operation_rule r ON r.id = a.rule_id
WHERE a.rack_id = @rack_id AND a.operation_type = @operation_type AND a.operation_code = @operation_code
UNION ALL
SELECT sqlc.embed(d), false
FROM operation_rule d
WHERE d.operation_type = @operation_type AND d.operation_code = @operation_code AND d.is_default
ORDER BY associated DESC;

-- name: AssociationGet :one
SELECT * FROM rack_rule_association
WHERE rack_id = @rack_id AND operation_type = @operation_type AND operation_code = @operation_code;

-- name: AssociationDelete :execrows
DELETE FROM rack_rule_association
WHERE rack_id = @rack_id AND operation_type = @operation_type AND operation_code = @operation_code;

-- name: AssociationListByRack :many
SELECT * FROM rack_rule_association WHERE rack_id = @rack_id
ORDER BY operation_type, operation_code;

-- name: AssociationRackIDsByRule :many
SELECT DISTINCT rack_id FROM rack_rule_association WHERE rule_id = @rule_id ORDER BY rack_id;

-- name: TaskInsert :one
INSERT INTO task (
    id, operation_type, operation_code, information, description, rack_id,
    components, component_ids, targets, rule, rule_name, applied_rule_id,
    status, message, run_id, queue_expires_at, idempotency_key, trigger_type, trigger_id, not_targeted, submitted_by)
VALUES (
    @id, @operation_type, @operation_code, @information, @description, @rack_id,
    @components, @component_ids, @targets, @rule, @rule_name, @applied_rule_id,
    @status, @message, sqlc.narg(run_id), sqlc.narg(queue_expires_at), sqlc.narg(idempotency_key), @trigger_type, @trigger_id,
    @not_targeted, @submitted_by)
RETURNING *;

-- name: TaskGetByID :one
SELECT * FROM task WHERE id = @id;

-- name: TaskGetByIDForUpdate :one
SELECT * FROM task WHERE id = @id FOR UPDATE;

-- name: TaskGetByIDsForUpdate :many
-- The tasks locked in ID order (two transactions locking overlapping sets
-- never wait on each other in a cycle).
SELECT * FROM task WHERE id = ANY(@ids::uuid[]) ORDER BY id FOR UPDATE;

-- name: TaskGetByIdempotencyKey :one
SELECT * FROM task WHERE idempotency_key = @idempotency_key;

-- name: TaskGetByIDs :many
SELECT * FROM task WHERE id = ANY(@ids::uuid[]) ORDER BY created_at DESC, id DESC;

-- name: TaskList :many
SELECT * FROM task
WHERE (sqlc.narg(rack_id)::uuid IS NULL OR rack_id = sqlc.narg(rack_id)::uuid)
  AND (sqlc.narg(component_id)::uuid IS NULL OR component_ids @> ARRAY[sqlc.narg(component_id)::uuid])
  AND (NOT @active_only::boolean OR status IN ('waiting', 'pending', 'running'))
ORDER BY created_at DESC, id DESC
LIMIT @row_limit OFFSET @row_offset;

-- name: TaskCount :one
SELECT count(*)::int FROM task
WHERE (sqlc.narg(rack_id)::uuid IS NULL OR rack_id = sqlc.narg(rack_id)::uuid)
  AND (sqlc.narg(component_id)::uuid IS NULL OR component_ids @> ARRAY[sqlc.narg(component_id)::uuid])
  AND (NOT @active_only::boolean OR status IN ('waiting', 'pending', 'running'));

-- name: TaskListActive :many
-- TaskList with active_only and no other filter, written out: its plan
-- (the partial index task_active_created) is the same whatever the
-- history, so it runs as a generic plan (db.GenericPlans). TaskList's
-- optional filters make a large table's generic plan a walk of every
-- task, and PostgreSQL plans each of its calls; it does so here too,
-- unless told: the generic plan's cost comes out a hair above a custom
-- plan's plus PostgreSQL's allowance for planning, so each call would be
-- planned afresh (0.1 ms at a million tasks, more than it runs).
SELECT * FROM task
WHERE status IN ('waiting', 'pending', 'running')
ORDER BY created_at DESC, id DESC
LIMIT @row_limit OFFSET @row_offset;

-- name: TaskCountActiveAll :one
-- TaskCount with active_only and no other filter (see TaskListActive).
SELECT count(*)::int FROM task
WHERE status IN ('waiting', 'pending', 'running');

-- name: TaskListByRack :many
-- TaskList with only a rack filter, written out: its plan (the rack's
-- newest tasks through task_rack_created) is the same for every rack and
-- any history, so it runs as a generic plan (db.GenericPlans) instead of
-- being planned on every call.
SELECT * FROM task
WHERE rack_id = @rack_id
ORDER BY created_at DESC, id DESC
LIMIT @row_limit OFFSET @row_offset;

-- name: TaskCountByRack :one
-- TaskCount with only a rack filter (see TaskListByRack).
SELECT count(*)::int FROM task WHERE rack_id = @rack_id;

-- name: TaskActiveOnRack :many
-- The rack's unfinished tasks, oldest first (FIFO order for promotion).
SELECT * FROM task
WHERE rack_id = @rack_id AND status IN ('waiting', 'pending', 'running')
ORDER BY created_at, id;

-- name: TaskRacksWithWaiting :many
SELECT DISTINCT rack_id FROM task WHERE status = 'waiting';

-- name: TaskLockRack :exec
-- Serialises admission, promotion and cancellation on one rack for the rest
-- of the transaction.
SELECT pg_advisory_xact_lock(hashtextextended(@rack_key::text, 7254711));

-- name: TaskPromote :exec
UPDATE task SET status = 'pending', message = @message, run_id = @run_id, queue_expires_at = NULL, window_held_until = NULL, updated_at = now()
WHERE id = @id AND status = 'waiting';

-- name: TaskHold :exec
-- TaskHold keeps a waiting task waiting for a maintenance window: the
-- reason, the next opening and the deadline that follows it.
UPDATE task SET message = @message, window_held_until = @window_held_until, queue_expires_at = @queue_expires_at, updated_at = now()
WHERE id = @id AND status = 'waiting';

-- name: TaskWindowRelease :exec
-- TaskWindowRelease records an admin's release of a waiting task from
-- maintenance windows and freezes.
UPDATE task SET window_release = @window_release, message = @message, updated_at = now()
WHERE id = @id AND status = 'waiting';

-- name: TaskApprovalRelease :one
-- TaskApprovalRelease lets a waiting task that waited for an approval
-- request go on waiting as any task does (conflicts, windows).
UPDATE task SET approval_id = NULL, message = @message, queue_expires_at = @queue_expires_at, updated_at = now()
WHERE id = @id AND status = 'waiting' AND approval_id IS NOT NULL
RETURNING rack_id;

-- name: TaskSetInformation :exec
-- TaskSetInformation rewrites a waiting task's payload as it starts (the
-- maintenance window a firmware task starts in).
UPDATE task SET information = @information, updated_at = now() WHERE id = @id;

-- name: TaskFinish :execrows
UPDATE task SET status = @status, message = @message, report = coalesce(sqlc.narg(report), report),
    queue_expires_at = NULL, finished_at = now(), updated_at = now()
WHERE id = @id AND status IN ('waiting', 'pending', 'running');

-- name: TaskFinishMany :many
-- TaskFinish for many tasks in one statement, each with its own status,
-- message and report (an empty report keeps the task's): the IDs of the
-- tasks it ended.
WITH i AS (
    SELECT unnest(@ids::uuid[]) AS id, unnest(@statuses::text[]) AS status,
        unnest(@messages::text[]) AS message, unnest(@reports::jsonb[]) AS report
)
UPDATE task SET status = i.status, message = i.message, report = coalesce(i.report, task.report),
    queue_expires_at = NULL, finished_at = now(), updated_at = now()
FROM i
WHERE task.id = i.id AND task.status IN ('waiting', 'pending', 'running')
RETURNING task.id;

-- name: TaskStatsFor :many
-- Unfinished tasks per rack and per component in scope.
SELECT t.rack_id AS id, t.status, count(*)::int AS n
FROM task t
WHERE t.rack_id = ANY(@ids::uuid[]) AND t.status IN ('waiting', 'pending', 'running')
GROUP BY t.rack_id, t.status
UNION ALL
SELECT c.id, t.status, count(*)::int AS n
FROM task t CROSS JOIN LATERAL unnest(t.component_ids) AS c(id)
WHERE t.component_ids && @ids::uuid[] AND c.id = ANY(@ids::uuid[]) AND t.status IN ('waiting', 'pending', 'running')
GROUP BY c.id, t.status;

-- name: TaskKeyUsage :many
-- Data-encryption key IDs still needed by unfinished tasks.
SELECT coalesce(information->'authentication_data'->>'key_id', '')::text AS key_id, count(*)::int AS n
FROM task
WHERE status IN ('waiting', 'pending', 'running') AND information ? 'authentication_data'
GROUP BY 1;

-- name: TaskStatusesByIDs :many
SELECT id, status FROM task WHERE id = ANY(@ids::uuid[]);

-- name: TaskCountActive :many
-- TaskCountActive counts the unfinished tasks by status (for metrics).
SELECT status, count(*)::bigint AS n FROM task
WHERE status IN ('waiting', 'pending', 'running')
GROUP BY status;

-- name: TaskLockRacks :exec
-- TaskLockRacks takes TaskLockRack's lock of each of rack_keys, in the
-- order given (callers sort them, so two transactions never wait on each
-- other's racks), for a burst of submissions admitted together.
SELECT count(pg_advisory_xact_lock(hashtextextended(k, 7254711)))
FROM unnest(@rack_keys::text[]) AS k;

-- name: TaskActiveOnRacks :many
-- The racks' unfinished tasks, oldest first.
SELECT * FROM task
WHERE rack_id = ANY(@rack_ids::uuid[]) AND status IN ('waiting', 'pending', 'running')
ORDER BY created_at, id;

-- name: TaskGetByIdempotencyKeys :many
SELECT * FROM task WHERE idempotency_key = ANY(@idempotency_keys::text[]);

-- name: TaskInsertMany :exec
-- TaskInsertMany inserts a burst's tasks from one JSON array of rows (the
-- columns of TaskInsert, and seq). A task's created_at is the
-- transaction's time plus seq microseconds, so tasks of one transaction on
-- one rack keep their arrival order (promotion is FIFO by created_at).
INSERT INTO task (
    id, operation_type, operation_code, information, description, rack_id,
    components, component_ids, targets, rule, rule_name, applied_rule_id,
    status, message, run_id, queue_expires_at, idempotency_key, trigger_type, trigger_id, not_targeted,
    submitted_by, window_held_until, approval_id, created_at, updated_at)
SELECT t.id, t.operation_type, t.operation_code, t.information, t.description, t.rack_id,
    t.components, t.component_ids, t.targets, t.rule, t.rule_name, t.applied_rule_id,
    t.status, t.message, t.run_id, t.queue_expires_at, t.idempotency_key, t.trigger_type, t.trigger_id,
    t.not_targeted, t.submitted_by, t.window_held_until, t.approval_id, now() + t.seq * interval '1 microsecond', now()
FROM jsonb_to_recordset(@tasks::jsonb) AS t(
    id uuid, operation_type text, operation_code text, information jsonb, description text, rack_id uuid,
    components jsonb, component_ids uuid[], targets jsonb, rule jsonb, rule_name text, applied_rule_id uuid,
    status text, message text, run_id bigint, queue_expires_at timestamptz, idempotency_key text,
    trigger_type text, trigger_id text, not_targeted jsonb, submitted_by text, window_held_until timestamptz,
    approval_id uuid, seq bigint);

-- name: RulesForRacks :many
-- RuleForRack for many racks: each rack's associated rule for the
-- operation, then the operation's default rule (with the nil rack_id), for
-- a burst of submissions resolving their rules in one round trip.
SELECT sqlc.embed(r), a.rack_id::uuid AS rack_id
FROM rack_rule_association a JOIN operation_rule r ON r.id = a.rule_id
WHERE a.rack_id = ANY(@rack_ids::uuid[]) AND a.operation_type = @operation_type AND a.operation_code = @operation_code
UNION ALL
SELECT sqlc.embed(d), '00000000-0000-0000-0000-000000000000'::uuid
FROM operation_rule d
WHERE d.operation_type = @operation_type AND d.operation_code = @operation_code AND d.is_default;

-- name: TaskMarkRunningMany :many
-- TaskMarkRunningMany moves pending tasks to running (the first calls of
-- their runs, a burst's together) and returns those it moved, with when
-- each was submitted and their frozen scope (the readiness gate's input).
UPDATE task SET status = 'running', message = 'Running', started_at = now(), updated_at = now()
WHERE id = ANY(@ids::uuid[]) AND status = 'pending'
RETURNING id, created_at, operation_code, operation_type, components, targets;

-- name: TaskScopeByIDs :many
-- TaskScopeByIDs reads the frozen scope of tasks (their components and
-- targets, never changed after the submit), for the readiness gate.
SELECT id, components, targets FROM task WHERE id = ANY(@ids::uuid[]);

-- name: TaskTriggeredCovering :many
-- TaskTriggeredCovering lists, per component of @ids, the tasks of
-- @trigger_type and @operation_code whose scope covers it, newest first
-- (for a trigger's own status read: event rules' leak handling).
SELECT c.id::uuid AS component_id, t.trigger_id, t.status
FROM task t
CROSS JOIN LATERAL unnest(t.component_ids) AS c(id)
WHERE t.trigger_type = @trigger_type AND t.operation_code = @operation_code
  AND t.component_ids && @ids::uuid[] AND c.id = ANY (@ids::uuid[])
ORDER BY c.id, t.created_at DESC, t.id DESC;

-- name: TaskPruneBatch :many
-- Deletes up to row_limit finished tasks that ended before @before, oldest
-- first, but those in keep (the tasks a live schedule, operation run or
-- event execution points to); returns their run IDs.
WITH doomed AS (
    SELECT t.id FROM task t
    WHERE t.status IN ('completed', 'failed', 'terminated') AND t.finished_at < @before
      AND NOT (t.id = ANY(@keep::uuid[]))
    ORDER BY t.finished_at
    LIMIT @row_limit
    FOR UPDATE SKIP LOCKED
)
DELETE FROM task WHERE id IN (SELECT id FROM doomed)
RETURNING run_id;

-- name: TaskOldestCreated :one
SELECT created_at FROM task ORDER BY created_at LIMIT 1;

-- name: TaskActiveFirmwareComponents :many
-- Every component a firmware task that has not ended (waiting, pending,
-- running) covers, with the newest such task.
SELECT DISTINCT ON (c.id) c.id::uuid AS component_id, t.id AS task_id
FROM task t
CROSS JOIN LATERAL unnest(t.component_ids) AS c(id)
WHERE t.status IN ('waiting', 'pending', 'running') AND t.operation_type = 'firmware_control'
ORDER BY c.id, t.created_at DESC;
