-- ComponentLeakSet records, for every live component of the type with an
-- external ID, whether its ID is in the leaking set of a successful poll;
-- only changed rows are written.
-- name: ComponentLeakSet :execrows
INSERT INTO component_leak (component_id, status)
SELECT c.id, CASE WHEN c.external_id = ANY (@leaking::text[]) THEN 'detected' ELSE 'not_detected' END
FROM component c
WHERE c.type = @type AND c.external_id IS NOT NULL AND c.deleted_at IS NULL
ON CONFLICT (component_id) DO UPDATE SET status = EXCLUDED.status, updated_at = now()
WHERE component_leak.status <> EXCLUDED.status;

-- name: ComponentLeakGet :many
SELECT component_id, status FROM component_leak WHERE component_id = ANY (@ids::uuid[]);
