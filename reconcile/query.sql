-- name: DriftListByType :many
SELECT * FROM component_drift WHERE component_type = @component_type ORDER BY id;

-- name: DriftList :many
SELECT * FROM component_drift ORDER BY component_type, id;

-- name: DriftDeleteByType :execrows
DELETE FROM component_drift WHERE component_type = @component_type;

-- name: DriftInsert :copyfrom
INSERT INTO component_drift (component_type, drift_type, component_id, external_id, mac_address, name, serial_number, firmware_version, rack_external_id, diffs, checked_at)
VALUES (@component_type, @drift_type, @component_id, @external_id, @mac_address, @name, @serial_number, @firmware_version, @rack_external_id, @diffs, @checked_at);

-- name: SyncRunInsert :one
INSERT INTO inventory_sync_run (started_at, finished_at, trigger, parts)
VALUES (@started_at, @finished_at, @trigger, @parts)
RETURNING id;

-- name: SyncRunLatest :one
SELECT * FROM inventory_sync_run ORDER BY started_at DESC, id DESC LIMIT 1;

-- name: SyncRunLatestOK :many
-- For each part name, the start of the newest cycle in which it succeeded.
SELECT (p->>'name')::text AS name, max(r.started_at)::timestamptz AS started_at
FROM inventory_sync_run r, jsonb_array_elements(r.parts) AS p
WHERE (p->>'ok')::boolean
GROUP BY p->>'name';

-- name: SyncRunPrune :execrows
-- Keeps the newest @keep cycles.
DELETE FROM inventory_sync_run
WHERE id < (SELECT min(id) FROM (SELECT id FROM inventory_sync_run ORDER BY id DESC LIMIT @keep::int) AS newest);

-- name: SyncLock :exec
-- Serialises sync cycles across processes: a session-level advisory lock,
-- held on a dedicated connection (no transaction) for the cycle.
SELECT pg_advisory_lock(@key::bigint);

-- name: SyncUnlock :exec
SELECT pg_advisory_unlock(@key::bigint);
