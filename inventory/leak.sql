-- ComponentLeakSet records, for every live component of the type with an
-- external ID, whether its ID is in the leaking set of a successful poll;
-- only changed rows are written. Unchanged rows are left out before the
-- insert: ON CONFLICT DO UPDATE locks the conflicting row even when its
-- WHERE is false, and a lock is a write (the row's xmax, WAL), so leaving
-- them to the WHERE would write every component of the type every poll
-- (every 3 s: 81,000 rows at 3,000 racks). The WHERE stays for a row
-- another writer changed in between.
-- name: ComponentLeakSet :execrows
INSERT INTO component_leak (component_id, status, detected_at)
SELECT c.id, n.status, CASE WHEN n.status = 'detected' THEN now() END
FROM component c
CROSS JOIN LATERAL (SELECT CASE WHEN c.external_id = ANY (@leaking::text[]) THEN 'detected' ELSE 'not_detected' END AS status) n
LEFT JOIN component_leak l ON l.component_id = c.id
WHERE c.type = @type AND c.external_id IS NOT NULL AND c.deleted_at IS NULL
    AND l.status IS DISTINCT FROM n.status
ON CONFLICT (component_id) DO UPDATE SET status = EXCLUDED.status, updated_at = now(),
    detected_at = EXCLUDED.detected_at,
    override_reason = NULL, override_by = NULL, override_at = NULL
WHERE component_leak.status <> EXCLUDED.status;

-- ComponentLeakSetChanged is ComponentLeakSet for the components whose
-- status changes, reached through indexes instead of every component of
-- the type: those leaking (by external ID) not yet detected, and those
-- detected no longer leaking. It leaves out what ComponentLeakSet also
-- does, a first row for a component never looked at (which becomes
-- not_detected): leak detection runs that every so many cycles.
-- name: ComponentLeakSetChanged :execrows
INSERT INTO component_leak (component_id, status, detected_at)
SELECT c.id, 'detected', now()
FROM component c LEFT JOIN component_leak l ON l.component_id = c.id
WHERE c.external_id = ANY (@leaking::text[]) AND c.type = @type AND c.deleted_at IS NULL
    AND l.status IS DISTINCT FROM 'detected'
UNION ALL
SELECT c.id, 'not_detected', NULL
FROM component_leak l JOIN component c ON c.id = l.component_id
WHERE l.status = 'detected' AND c.type = @type AND c.external_id IS NOT NULL AND c.deleted_at IS NULL
    AND NOT (c.external_id = ANY (@leaking::text[]))
ON CONFLICT (component_id) DO UPDATE SET status = EXCLUDED.status, updated_at = now(),
    detected_at = EXCLUDED.detected_at,
    override_reason = NULL, override_by = NULL, override_at = NULL
WHERE component_leak.status <> EXCLUDED.status;

-- ComponentLeakOpen returns which of the components have an open leak:
-- detected, with or without an admin override.
-- name: ComponentLeakOpen :many
SELECT l.component_id, c.name, c.external_id, l.detected_at, l.override_reason, l.override_by, l.override_at
FROM component_leak l JOIN component c ON c.id = l.component_id
WHERE l.component_id = ANY (@ids::uuid[]) AND l.status = 'detected';

-- ComponentLeakOverride records an admin's override of the energise guard
-- for the component's current leak; no row: no open leak.
-- name: ComponentLeakOverride :one
UPDATE component_leak SET override_reason = @reason, override_by = @override_by, override_at = now()
WHERE component_id = @component_id AND status = 'detected'
RETURNING component_id, detected_at, override_at;

-- name: ComponentLeakGet :many
SELECT component_id, status FROM component_leak WHERE component_id = ANY (@ids::uuid[]);

-- RackLeakOpen returns the racks with at least min_leaks open leaks that
-- no admin overrode (the severe leak tier, docs/event-rules.md), with the
-- leaking components and when the first and the latest of those leaks
-- were detected; through the detected index.
-- name: RackLeakOpen :many
SELECT c.rack_id::uuid AS rack_id,
    array_agg(l.component_id ORDER BY l.component_id)::uuid[] AS component_ids,
    min(l.detected_at)::timestamptz AS first_detected,
    max(l.detected_at)::timestamptz AS last_detected
FROM component_leak l JOIN component c ON c.id = l.component_id
WHERE l.status = 'detected' AND l.override_at IS NULL AND c.rack_id IS NOT NULL AND c.deleted_at IS NULL
GROUP BY c.rack_id
HAVING count(*) >= @min_leaks::int;

-- RackLoopPlacement returns a live rack's name, power feed and coolant
-- loop (the leak tiers).
-- name: RackLoopPlacement :one
SELECT name, power_feed, coolant_loop FROM rack WHERE id = @id AND deleted_at IS NULL;

-- LoopRackIDs returns the live racks on a coolant loop (the leak tiers'
-- loop-wide answers; through rack_coolant_loop_idx).
-- name: LoopRackIDs :many
SELECT id FROM rack WHERE coolant_loop = @loop::text AND deleted_at IS NULL ORDER BY id;
