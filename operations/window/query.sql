-- name: WindowInsert :one
INSERT INTO maintenance_window (id, kind, name, description, cron, time_zone, duration_seconds, starts_at, ends_at,
    site, halls, rack_rows, nvl_domain_ids, rack_ids, created_by)
VALUES (@id, @kind, @name, @description, @cron, @time_zone, @duration_seconds, @starts_at, @ends_at,
    @site, @halls, @rack_rows, @nvl_domain_ids, @rack_ids, @created_by)
RETURNING *;

-- name: WindowGetByID :one
SELECT * FROM maintenance_window WHERE id = @id;

-- name: WindowGetByName :one
SELECT * FROM maintenance_window WHERE kind = @kind AND name = @name;

-- name: WindowList :many
SELECT * FROM maintenance_window
WHERE (sqlc.narg(kind)::text IS NULL OR kind = sqlc.narg(kind))
ORDER BY kind, name;

-- name: WindowDelete :execrows
DELETE FROM maintenance_window WHERE id = @id;

-- name: WindowCount :one
SELECT count(*) FROM maintenance_window;

-- name: WindowRunReleaseUpsert :exec
INSERT INTO maintenance_window_run_release (operation_run_id, released_by, reason)
VALUES (@operation_run_id, @released_by, @reason)
ON CONFLICT (operation_run_id) DO UPDATE SET released_by = EXCLUDED.released_by, reason = EXCLUDED.reason, released_at = now();

-- name: WindowRunReleaseGet :one
SELECT * FROM maintenance_window_run_release WHERE operation_run_id = @operation_run_id;

-- name: WindowPlaces :one
-- WindowPlaces lists the halls (location rooms) and positions of the live
-- racks, so that a window's halls and rows must each name one.
SELECT coalesce(array_agg(DISTINCT location_room) FILTER (WHERE location_room <> ''), '{}')::text[] AS halls,
       coalesce(array_agg(DISTINCT location_position) FILTER (WHERE location_position <> ''), '{}')::text[] AS positions
FROM rack WHERE deleted_at IS NULL;
