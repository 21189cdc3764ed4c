-- name: IsolationInsert :one
-- A new open isolation; no row when the rack has one open already.
INSERT INTO rack_isolation (id, rack_id, tier, reason, component_ids, report_id, observed_at, sends, last_sent_at, next_send_at)
VALUES (@id, @rack_id, @tier, @reason, @component_ids::uuid[], @report_id, @observed_at, 1, now(), @next_send_at)
ON CONFLICT (rack_id) WHERE cleared_at IS NULL DO NOTHING
RETURNING *;

-- name: IsolationOpenOfRacks :many
-- The open isolations of the racks, oldest first.
SELECT * FROM rack_isolation WHERE rack_id = ANY (@rack_ids::uuid[]) AND cleared_at IS NULL
ORDER BY requested_at, id;

-- name: IsolationLastCleared :many
-- When each of the racks' isolations was last cleared (racks never
-- isolated or never cleared are left out).
SELECT rack_id, max(cleared_at)::timestamptz AS cleared_at FROM rack_isolation
WHERE rack_id = ANY (@rack_ids::uuid[]) AND cleared_at IS NOT NULL
GROUP BY rack_id;

-- name: IsolationDue :many
-- Open, unacknowledged isolations whose facility request is due again,
-- locked so that one sender sends each.
SELECT * FROM rack_isolation
WHERE acknowledged_at IS NULL AND cleared_at IS NULL AND next_send_at <= now()
ORDER BY next_send_at, id
LIMIT @lim
FOR UPDATE SKIP LOCKED;

-- name: IsolationSent :exec
UPDATE rack_isolation SET sends = sends + 1, last_sent_at = now(), next_send_at = @next_send_at WHERE id = @id;

-- name: IsolationDueNow :execrows
-- After a restart: every open, unacknowledged isolation is due at once.
UPDATE rack_isolation SET next_send_at = now()
WHERE acknowledged_at IS NULL AND cleared_at IS NULL AND next_send_at > now();

-- name: IsolationAcknowledge :one
UPDATE rack_isolation SET acknowledged_at = now(), acknowledged_by = @by, ack_note = @note
WHERE rack_id = @rack_id AND cleared_at IS NULL AND acknowledged_at IS NULL
RETURNING *;

-- name: IsolationClear :one
UPDATE rack_isolation SET cleared_at = now(), cleared_by = @by, clear_reason = @reason
WHERE rack_id = @rack_id AND cleared_at IS NULL
RETURNING *;

-- name: IsolationList :many
-- Isolations, newest first: the open ones only, or all.
SELECT * FROM rack_isolation
WHERE (NOT @open_only::bool OR cleared_at IS NULL)
ORDER BY requested_at DESC, id
LIMIT @lim;

-- name: IsolationOverrideUpsert :exec
INSERT INTO rack_isolation_override (rack_id, isolation_id, override_by, reason)
VALUES (@rack_id, @isolation_id, @override_by, @reason)
ON CONFLICT (rack_id, isolation_id) DO UPDATE SET override_by = EXCLUDED.override_by, reason = EXCLUDED.reason, created_at = now();

-- name: IsolationOverridden :many
-- Which of the isolations an admin overrode for the rack.
SELECT isolation_id FROM rack_isolation_override WHERE rack_id = @rack_id AND isolation_id = ANY (@isolation_ids::uuid[]);

-- name: ReportInsert :one
INSERT INTO facility_leak_report (id, reported_by, coolant_loop, rack_id, summary, rack_ids)
VALUES (@id, @reported_by, @coolant_loop, @rack_id, @summary, @rack_ids::uuid[])
RETURNING *;

-- name: ReportList :many
-- Reports, newest first; only those of reported_by when it is not ''.
SELECT * FROM facility_leak_report
WHERE (@reported_by::text = '' OR reported_by = @reported_by)
ORDER BY reported_at DESC, id
LIMIT @lim;

-- name: IsolationAnyOpen :one
-- Whether any rack is isolated (the energise guard's fast path).
SELECT EXISTS (SELECT 1 FROM rack_isolation WHERE cleared_at IS NULL)::bool;
