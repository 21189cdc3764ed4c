-- name: SyncComponentList :many
-- Every live component of one type with what the sync compares and writes,
-- its host BMC MAC (the first BMC when none is marked host) and its DPU
-- BMC MACs.
SELECT c.id, c.rack_id, COALESCE(r.external_id, '')::text AS rack_external_id,
       c.name, c.serial_number, c.external_id, c.firmware_version, c.power_state,
       c.slot_id, c.tray_idx, c.host_id, c.operation_phase, c.operation_reason,
       c.blocked_operations, c.health, c.description, c.updated_at,
       COALESCE((SELECT b.mac_address FROM bmc b WHERE b.component_id = c.id
                 ORDER BY (b.type = 'Host') DESC, b.mac_address LIMIT 1), '')::text AS host_mac
FROM component c
LEFT JOIN rack r ON r.id = c.rack_id
WHERE c.type = @type AND c.deleted_at IS NULL
ORDER BY c.id;

-- name: SyncComponentUpdate :execrows
-- Writes the synced fields of the components in @rows (a JSON list of
-- {id, updated_at, external_id, power_state, firmware_version, phase,
-- reason, blocked, health, description}); a row changed since it was read
-- (updated_at moved) is left for the next cycle.
UPDATE component c SET
    external_id        = NULLIF(e->>'external_id', ''),
    power_state        = e->>'power_state',
    firmware_version   = e->>'firmware_version',
    operation_phase    = e->>'phase',
    operation_reason   = e->>'reason',
    blocked_operations = ARRAY(SELECT json_array_elements_text(e->'blocked')),
    health             = CASE WHEN json_typeof(e->'health') = 'null' THEN NULL ELSE e->'health' END,
    description        = e->>'description',
    updated_at         = now()
FROM json_array_elements(@rows::json) AS e
WHERE c.id = (e->>'id')::uuid
  AND c.updated_at = (e->>'updated_at')::timestamptz
  AND c.deleted_at IS NULL;

-- name: SyncRackList :many
SELECT r.id, r.external_id, r.health, r.rack_group_id, r.nvl_domain_id
FROM rack r
WHERE r.deleted_at IS NULL
ORDER BY r.id;

-- name: SyncRackSetHealth :execrows
-- Sets the health of the racks in @rows ({id, health}).
UPDATE rack r SET health = CASE WHEN json_typeof(e->'health') = 'null' THEN NULL ELSE e->'health' END, updated_at = now()
FROM json_array_elements(@rows::json) AS e
WHERE r.id = (e->>'id')::uuid AND r.deleted_at IS NULL;

-- name: SyncDomainList :many
SELECT d.id, d.external_id, d.nmxc_cluster_id FROM nvl_domain d WHERE d.external_id IS NOT NULL;

-- name: SyncDomainInsert :exec
INSERT INTO nvl_domain (id, external_id, nmxc_cluster_id) VALUES (@id, @external_id, @nmxc_cluster_id);

-- name: SyncDomainSetCluster :execrows
UPDATE nvl_domain SET nmxc_cluster_id = @nmxc_cluster_id WHERE id = @id;

-- name: SyncRackSetGroup :execrows
-- Assigns the racks in @rows ({id, domain_id, group_id}) to their domain
-- and rack group.
UPDATE rack r SET nvl_domain_id = (e->>'domain_id')::uuid, rack_group_id = e->>'group_id', updated_at = now()
FROM jsonb_array_elements(@rows::jsonb) AS e
WHERE r.id = (e->>'id')::uuid AND r.deleted_at IS NULL;

-- name: RackPhases :many
-- The distinct operation phases of each rack's live components.
SELECT c.rack_id::uuid AS rack_id, array_agg(DISTINCT c.operation_phase)::text[] AS phases
FROM component c
WHERE c.rack_id = ANY(@rack_ids::uuid[]) AND c.deleted_at IS NULL
GROUP BY c.rack_id;
