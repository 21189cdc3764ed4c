-- name: EventRuleInsert :one
INSERT INTO event_rule (id, name, description, event_type, policy, created_by)
VALUES (@id, @name, @description, @event_type, @policy, @created_by)
RETURNING *;

-- name: EventRuleGetByID :one
SELECT * FROM event_rule WHERE id = @id;

-- name: EventRuleGetByIDForUpdate :one
SELECT * FROM event_rule WHERE id = @id FOR UPDATE;

-- name: EventRuleCount :one
SELECT count(*) FROM event_rule
WHERE (sqlc.narg(event_type)::text IS NULL OR event_type = sqlc.narg(event_type))
  AND (sqlc.narg(enabled)::boolean IS NULL OR enabled = sqlc.narg(enabled));

-- name: EventRuleList :many
SELECT * FROM event_rule
WHERE (sqlc.narg(event_type)::text IS NULL OR event_type = sqlc.narg(event_type))
  AND (sqlc.narg(enabled)::boolean IS NULL OR enabled = sqlc.narg(enabled))
ORDER BY id
LIMIT @row_limit OFFSET @row_offset;

-- name: EventRuleUpdateMetadata :one
UPDATE event_rule SET name = @name, description = @description, updated_at = now()
WHERE id = @id RETURNING *;

-- name: EventRuleUpdatePolicy :one
UPDATE event_rule SET policy = @policy, updated_at = now()
WHERE id = @id RETURNING *;

-- name: EventRuleSetEnabled :one
UPDATE event_rule SET enabled = @enabled, updated_at = now()
WHERE id = @id RETURNING *;

-- name: EventRuleDelete :execrows
DELETE FROM event_rule WHERE id = @id;

-- name: EventRuleBindingInsert :one
INSERT INTO event_rule_binding (rule_id, event_type, scope_type, scope_id)
VALUES (@rule_id, @event_type, @scope_type, sqlc.narg(scope_id))
RETURNING *;

-- name: EventRuleBindingGetSlot :one
SELECT * FROM event_rule_binding
WHERE event_type = @event_type AND scope_type = @scope_type
  AND scope_id IS NOT DISTINCT FROM sqlc.narg(scope_id);

-- name: EventRuleBindingDeleteSlot :execrows
DELETE FROM event_rule_binding
WHERE event_type = @event_type AND scope_type = @scope_type
  AND scope_id IS NOT DISTINCT FROM sqlc.narg(scope_id);

-- name: EventRuleBindingsOfRule :many
SELECT * FROM event_rule_binding WHERE rule_id = @rule_id ORDER BY created_at, id;

-- EventRuleEffective is the enabled rule bound to the rack, else the
-- enabled rule bound to the site (spec §4.4); no row: the built-in.
-- name: EventRuleEffective :one
SELECT r.* FROM event_rule_binding b JOIN event_rule r ON r.id = b.rule_id
WHERE b.event_type = @event_type AND r.enabled
  AND (b.scope_type = 'site' OR b.scope_id = @rack_id::uuid)
ORDER BY (b.scope_type = 'rack') DESC
LIMIT 1;

-- name: EventObserve :one
UPDATE event SET observations = observations + 1, last_observed_at = now()
WHERE source_name = @source_name AND source_key = @source_key
RETURNING id;

-- EventObserveMany counts one more observation of each stored occurrence
-- of source among source_keys, returning the keys it found.
-- name: EventObserveMany :many
UPDATE event SET observations = observations + 1, last_observed_at = now()
WHERE source_name = @source_name AND source_key = ANY (@source_keys::text[])
RETURNING source_key;

-- name: EventInsert :one
INSERT INTO event (id, source_name, source_key, event_type, severity, resource_kind, resource_id, rack_id,
                   component_type, applied_rule_id, effective_policy, summary, observed_at)
VALUES (@id, @source_name, @source_key, @event_type, @severity, @resource_kind, @resource_id, @rack_id,
        sqlc.narg(component_type), @applied_rule_id, @effective_policy, @summary, @observed_at)
ON CONFLICT (source_name, source_key) DO NOTHING
RETURNING id;

-- name: EventGetByID :one
SELECT * FROM event WHERE id = @id;

-- name: EventList :many
SELECT * FROM event
WHERE (sqlc.narg(resource_id)::uuid IS NULL OR resource_id = sqlc.narg(resource_id))
ORDER BY created_at DESC, id DESC
LIMIT @row_limit;

-- name: ExecutionInsert :exec
INSERT INTO event_action_execution (id, event_id, action_name, action_type, plan, status, reason, status_message)
VALUES (@id, @event_id, @action_name, @action_type, @plan, @status, sqlc.narg(reason), @status_message);

-- name: ExecutionGetForUpdate :one
SELECT * FROM event_action_execution WHERE id = @id FOR UPDATE;

-- name: ExecutionsOfEvent :many
SELECT * FROM event_action_execution WHERE event_id = @event_id ORDER BY action_name;

-- name: ExecutionUpdate :exec
UPDATE event_action_execution
SET status = @status, reason = sqlc.narg(reason), attempts = @attempts, status_message = @status_message,
    next_attempt_at = sqlc.narg(next_attempt_at), task_ids = @task_ids, updated_at = now()
WHERE id = @id;

-- LeakOccurrenceSeeMany returns, for each component of one kind
-- (external_ids distinct, new_keys beside them), the source key of its
-- ongoing leak occurrence, starting one with its new key when there is
-- none.
-- name: LeakOccurrenceSeeMany :many
INSERT INTO leak_occurrence (component_kind, external_id, source_key)
SELECT @component_kind::text, unnest(@external_ids::text[]), unnest(@new_keys::text[])
ON CONFLICT (component_kind, external_id) DO UPDATE SET last_seen_at = now()
RETURNING external_id, source_key;

-- LeakOccurrenceEnd ends the occurrences of kind whose component is not in
-- the leaking set of a successful poll.
-- name: LeakOccurrenceEnd :many
DELETE FROM leak_occurrence
WHERE component_kind = @component_kind AND NOT (external_id = ANY (@leaking::text[]))
RETURNING external_id, source_key;

-- name: LeakOccurrenceList :many
SELECT * FROM leak_occurrence ORDER BY component_kind, external_id;

-- ExecutionsOfEventType returns which of @ids are executions of an event
-- of @event_type.
-- name: ExecutionsOfEventType :many
SELECT x.id FROM event_action_execution x JOIN event e ON e.id = x.event_id
WHERE x.id = ANY (@ids::uuid[]) AND e.event_type = @event_type;

-- ExecutionStale returns executions whose job should have run by now:
-- pending ones not touched for @age, deferred ones @age past their retry.
-- name: ExecutionStale :many
SELECT id FROM event_action_execution
WHERE (status = 'pending' AND updated_at < now() - @age::interval)
   OR (status = 'deferred' AND next_attempt_at < now() - @age::interval)
ORDER BY updated_at
LIMIT @row_limit
FOR UPDATE SKIP LOCKED;

-- ExecutionRequeue marks rescued executions pending again, with a fresh
-- updated_at.
-- name: ExecutionRequeue :exec
UPDATE event_action_execution SET status = 'pending', reason = NULL, next_attempt_at = NULL, updated_at = now()
WHERE id = ANY (@ids::uuid[]);

-- LeakOccurrenceUnknown records what was done for an occurrence on a device
-- Flow does not hold: the first call returns true (the occurrence was not
-- marked yet), so it is logged and answered once.
-- name: LeakOccurrenceUnknown :one
UPDATE leak_occurrence SET unknown_outcome = @outcome
WHERE source_key = @source_key AND unknown_outcome = ''
RETURNING true;

-- LeakOccurrenceUnknownOutcome overwrites the outcome of an unknown
-- device's occurrence (after the power-off call).
-- name: LeakOccurrenceUnknownOutcome :exec
UPDATE leak_occurrence SET unknown_outcome = @outcome WHERE source_key = @source_key;

-- name: EventPruneBatch :one
-- Deletes up to row_limit events last reported before @before whose every
-- execution has ended (skipped, completed or failed), oldest first, with
-- their executions; says how many events and executions went.
WITH doomed AS (
    SELECT e.id FROM event e
    WHERE e.last_observed_at < @before
      AND NOT EXISTS (SELECT 1 FROM event_action_execution x
                      WHERE x.event_id = e.id AND x.status IN ('pending', 'running', 'deferred'))
    ORDER BY e.last_observed_at
    LIMIT @row_limit
    FOR UPDATE SKIP LOCKED
), execs AS (
    SELECT count(*) AS n FROM event_action_execution WHERE event_id IN (SELECT id FROM doomed)
), gone AS (
    DELETE FROM event WHERE id IN (SELECT id FROM doomed) RETURNING 1
)
SELECT (SELECT count(*) FROM gone)::bigint AS events, (SELECT n FROM execs)::bigint AS executions;

-- name: ExecutionPinnedTasks :many
-- The tasks of executions not ended: pruning keeps them.
SELECT DISTINCT unnest(task_ids)::uuid AS task_id FROM event_action_execution
WHERE status IN ('pending', 'running', 'deferred');

-- name: EventOldestObserved :one
SELECT last_observed_at FROM event ORDER BY last_observed_at LIMIT 1;
