-- name: BaselineInsert :exec
INSERT INTO firmware_baseline (id, name, revision) VALUES (@id, @name, 1);

-- name: BaselineBumpRevision :one
-- Moves the baseline to its next revision, only if @base_revision is still
-- its newest (an edit based on an older read finds no row).
UPDATE firmware_baseline SET revision = revision + 1
WHERE id = @id AND revision = @base_revision
RETURNING revision;

-- name: BaselineRevisionInsert :exec
INSERT INTO firmware_baseline_revision (baseline_id, revision, description, entries, source, created_by)
VALUES (@baseline_id, @revision, @description, @entries, @source, @created_by);

-- name: BaselineGetByName :one
SELECT id, name, revision FROM firmware_baseline WHERE name = @name;

-- name: BaselineGetByID :one
SELECT id, name, revision FROM firmware_baseline WHERE id = @id;

-- name: BaselineRevisionGet :one
SELECT revision, description, entries, source, created_at, created_by
FROM firmware_baseline_revision WHERE baseline_id = @baseline_id AND revision = @revision;

-- name: BaselineRevisionHistory :many
SELECT revision, description, jsonb_array_length(entries)::int AS entry_count, source, created_at, created_by
FROM firmware_baseline_revision WHERE baseline_id = @baseline_id
ORDER BY revision DESC;

-- name: BaselineList :many
-- Every baseline at its newest revision, by name.
SELECT b.id, b.name, b.revision, r.description, r.entries, r.source, r.created_at, r.created_by
FROM firmware_baseline b
JOIN firmware_baseline_revision r ON r.baseline_id = b.id AND r.revision = b.revision
ORDER BY b.name;

-- name: BaselineActivationInsert :one
INSERT INTO firmware_baseline_activation (baseline_id, revision, activated_by)
VALUES (@baseline_id, @revision, @activated_by)
RETURNING activated_at;

-- name: BaselineActive :one
-- The site's active baseline revision: the newest activation.
SELECT a.baseline_id, a.revision, a.activated_at, a.activated_by
FROM firmware_baseline_activation a
ORDER BY a.id DESC
LIMIT 1;
