-- ComponentLeakSet records, for every live component of the type with an
-- external ID, whether its ID is in the leaking set of a successful poll;
-- only changed rows are written.
-- name: ComponentLeakSet :execrows
INSERT INTO component_leak (component_id, status, detected_at)
SELECT c.id, CASE WHEN c.external_id = ANY (@leaking::text[]) THEN 'detected' ELSE 'not_detected' END,
       CASE WHEN c.external_id = ANY (@leaking::text[]) THEN now() END
FROM component c
WHERE c.type = @type AND c.external_id IS NOT NULL AND c.deleted_at IS NULL
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
