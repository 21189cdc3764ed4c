-- Task schedules (docs/schedules.md): the schedule package's own tables,
-- task_schedule and task_schedule_scope. Tasks are read and written only
-- through the task manager's API, never here.

-- name: ScheduleInsert :one
INSERT INTO task_schedule (name, spec_type, spec, timezone, operation_template, overlap_policy, next_run_at, created_by)
VALUES (@name, @spec_type, @spec, @timezone, @operation_template, @overlap_policy, @next_run_at, @created_by)
RETURNING *;

-- name: ScheduleGetByID :one
SELECT * FROM task_schedule WHERE id = @id;

-- name: ScheduleGetByIDForUpdate :one
SELECT * FROM task_schedule WHERE id = @id FOR UPDATE;

-- name: ScheduleGetByName :one
SELECT * FROM task_schedule WHERE name = @name;

-- name: ScheduleList :many
SELECT s.* FROM task_schedule s
WHERE (sqlc.narg(rack_id)::uuid IS NULL OR EXISTS (
        SELECT 1 FROM task_schedule_scope sc WHERE sc.schedule_id = s.id AND sc.rack_id = sqlc.narg(rack_id)::uuid))
  AND (NOT @enabled_only::boolean OR s.enabled)
ORDER BY s.created_at, s.id
OFFSET @row_offset LIMIT sqlc.narg(row_limit);

-- name: ScheduleCount :one
SELECT count(*)::int FROM task_schedule s
WHERE (sqlc.narg(rack_id)::uuid IS NULL OR EXISTS (
        SELECT 1 FROM task_schedule_scope sc WHERE sc.schedule_id = s.id AND sc.rack_id = sqlc.narg(rack_id)::uuid))
  AND (NOT @enabled_only::boolean OR s.enabled);

-- name: ScheduleUpdate :one
UPDATE task_schedule SET
    name           = @name,
    spec_type      = @spec_type,
    spec           = @spec,
    timezone       = @timezone,
    overlap_policy = @overlap_policy,
    enabled        = @enabled,
    next_run_at    = sqlc.narg(next_run_at),
    last_run_at    = sqlc.narg(last_run_at),
    fire_count     = fire_count + @fired::int,
    updated_at     = now()
WHERE id = @id
RETURNING *;

-- name: ScheduleDelete :execrows
DELETE FROM task_schedule WHERE id = @id;

-- name: ScheduleEnabledOnRacks :many
-- Enabled schedules with a scope entry on any of the racks.
SELECT s.* FROM task_schedule s
WHERE s.enabled AND EXISTS (
    SELECT 1 FROM task_schedule_scope sc WHERE sc.schedule_id = s.id AND sc.rack_id = ANY(@rack_ids::uuid[]))
ORDER BY s.created_at, s.id;

-- name: ScheduleDue :many
-- Enabled schedules whose firing is overdue by more than the grace: the
-- safety net re-inserts their firing jobs.
SELECT id, next_run_at FROM task_schedule
WHERE enabled AND next_run_at IS NOT NULL AND next_run_at <= @before
ORDER BY next_run_at
LIMIT @row_limit;

-- name: ScopeInsert :one
INSERT INTO task_schedule_scope (schedule_id, rack_id, component_filter)
VALUES (@schedule_id, @rack_id, @component_filter)
RETURNING *;

-- name: ScopeListBySchedule :many
SELECT * FROM task_schedule_scope WHERE schedule_id = @schedule_id ORDER BY created_at, id;

-- name: ScopeGetByID :one
SELECT * FROM task_schedule_scope WHERE id = @id;

-- name: ScopeSetFilter :one
UPDATE task_schedule_scope SET component_filter = @component_filter WHERE id = @id RETURNING *;

-- name: ScopeSetLastTask :exec
UPDATE task_schedule_scope SET last_task_id = @last_task_id WHERE id = @id;

-- name: ScopeDelete :execrows
DELETE FROM task_schedule_scope WHERE id = @id;

-- name: ScopeCount :one
SELECT count(*)::int FROM task_schedule_scope WHERE schedule_id = @schedule_id;

-- name: FiringWake :exec
-- Wakes the leader's firing dispatcher when the transaction commits
-- (WakeChannel).
SELECT pg_notify('flow_schedule_wake', @at::text);

-- name: SchedulePinnedTasks :many
-- The last task of every scope entry (the overlap policy reads it):
-- pruning keeps them.
SELECT DISTINCT last_task_id::uuid AS task_id FROM task_schedule_scope WHERE last_task_id IS NOT NULL;
