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
