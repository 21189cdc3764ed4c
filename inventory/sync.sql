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
-- Every domain discovered from a Core rack group, soft-deleted ones
-- included (a group that comes back resurrects its domain).
SELECT d.id, d.external_id, d.nmxc_cluster_id, d.deleted_at FROM nvl_domain d WHERE d.external_id IS NOT NULL;

-- name: SyncDomainResurrect :execrows
UPDATE nvl_domain SET deleted_at = NULL WHERE id = @id AND deleted_at IS NOT NULL;

-- name: SyncDomainSoftDeleteEmpty :execrows
-- Soft-deletes the live discovered domains outside @keep that no live rack
-- is in (a regrouping left them empty).
UPDATE nvl_domain d SET deleted_at = now()
WHERE d.external_id IS NOT NULL AND d.deleted_at IS NULL
  AND d.id <> ALL(@keep::uuid[])
  AND NOT EXISTS (SELECT 1 FROM rack r WHERE r.nvl_domain_id = d.id AND r.deleted_at IS NULL);

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

-- name: SyncDPUDelete :execrows
-- Removes the DPU BMCs in @macs (DPUs Core no longer reports on their host).
DELETE FROM bmc WHERE type = 'DPU' AND mac_address = ANY(@macs::text[]);

-- name: SyncDPUUpsert :execrows
-- Records the DPU BMCs in @rows ({mac, component_id, ip}) on their host
-- component; a MAC held by a host BMC is left alone.
INSERT INTO bmc (mac_address, component_id, type, ip_address)
SELECT e->>'mac', (e->>'component_id')::uuid, 'DPU', NULLIF(e->>'ip', '')
FROM jsonb_array_elements(@rows::jsonb) AS e
ON CONFLICT (mac_address) DO UPDATE SET component_id = EXCLUDED.component_id, ip_address = EXCLUDED.ip_address
WHERE bmc.type = 'DPU';

-- name: MirrorRackList :many
-- Every rack, soft-deleted ones included, with what the expected-inventory
-- mirror compares.
SELECT r.id, r.name, r.manufacturer, r.serial_number, r.model, r.description,
       r.location_region, r.location_datacenter, r.location_room, r.location_position,
       r.external_id, r.rack_profile_id, r.deleted_at, r.mirrored_at
FROM rack r
ORDER BY r.id;

-- name: MirrorRackInsert :execrows
-- Creates the racks in @rows (JSON objects with the columns' names).
INSERT INTO rack (id, name, manufacturer, serial_number, model, description,
                  location_region, location_datacenter, location_room, location_position,
                  external_id, rack_profile_id, mirrored_at)
SELECT (e->>'id')::uuid, e->>'name', e->>'manufacturer', e->>'serial_number', e->>'model', e->>'description',
       e->>'location_region', e->>'location_datacenter', e->>'location_room', e->>'location_position',
       e->>'external_id', e->>'rack_profile_id', now()
FROM jsonb_array_elements(@rows::jsonb) AS e;

-- name: MirrorRackUpdate :execrows
-- Writes the mirror-managed columns of the racks in @rows, resurrects them
-- and marks them mirrored.
UPDATE rack r SET
    name = e->>'name', manufacturer = e->>'manufacturer', serial_number = e->>'serial_number',
    model = e->>'model', description = e->>'description',
    location_region = e->>'location_region', location_datacenter = e->>'location_datacenter',
    location_room = e->>'location_room', location_position = e->>'location_position',
    external_id = e->>'external_id', rack_profile_id = e->>'rack_profile_id',
    deleted_at = NULL, mirrored_at = COALESCE(r.mirrored_at, now()), updated_at = now()
FROM jsonb_array_elements(@rows::jsonb) AS e
WHERE r.id = (e->>'id')::uuid;

-- name: MirrorRackSoftDelete :execrows
UPDATE rack SET deleted_at = now(), updated_at = now() WHERE id = ANY(@ids::uuid[]) AND deleted_at IS NULL;

-- name: ComponentSyncList :many
-- Every component of one type, soft-deleted ones included, with what the
-- expected mirror and the actual sync compare and write: its host BMC (the
-- first BMC when none is marked host) and its DPU BMCs, from one aggregate
-- of the component's BMCs (one index probe per component). A mirror pass
-- that writes nothing hands its listing on to the type's actual sync
-- instead of the sync reading it again.
SELECT c.id, c.rack_id, c.name, c.manufacturer, c.serial_number, c.model, c.description,
       c.slot_id, c.tray_idx, c.host_id, c.deleted_at, c.mirrored_at,
       COALESCE(b.host_mac, '')::text AS host_mac, COALESCE(b.host_ip, '')::text AS host_ip,
       COALESCE(r.external_id, '')::text AS rack_external_id,
       c.external_id, c.firmware_version, c.power_state, c.operation_phase, c.operation_reason,
       c.blocked_operations, c.health, c.updated_at,
       COALESCE(b.dpu_macs, '{}')::text[] AS dpu_macs,
       COALESCE(b.dpu_ips, '{}')::text[] AS dpu_ips
FROM component c
LEFT JOIN rack r ON r.id = c.rack_id
LEFT JOIN LATERAL (
    SELECT (array_agg(b.mac_address ORDER BY (b.type = 'Host') DESC, b.mac_address))[1] AS host_mac,
           ((array_agg(b.ip_address ORDER BY (b.type = 'Host') DESC, b.mac_address))[1])::text AS host_ip,
           array_agg(b.mac_address ORDER BY b.mac_address) FILTER (WHERE b.type = 'DPU') AS dpu_macs,
           array_agg(COALESCE(b.ip_address, '') ORDER BY b.mac_address) FILTER (WHERE b.type = 'DPU') AS dpu_ips
    FROM bmc b WHERE b.component_id = c.id
) b ON true
WHERE c.type = @type
ORDER BY c.id;

-- name: ComponentSyncPage :many
-- ComponentSyncList's columns for the live components of one type after
-- @after in ID order, at most @page_size of them: the actual sync reads a
-- type's components a page at a time in its transaction and writes what
-- changed in each page before reading the next (issue 29).
SELECT c.id, c.rack_id, c.name, c.manufacturer, c.serial_number, c.model, c.description,
       c.slot_id, c.tray_idx, c.host_id, c.deleted_at, c.mirrored_at,
       COALESCE(b.host_mac, '')::text AS host_mac, COALESCE(b.host_ip, '')::text AS host_ip,
       COALESCE(r.external_id, '')::text AS rack_external_id,
       c.external_id, c.firmware_version, c.power_state, c.operation_phase, c.operation_reason,
       c.blocked_operations, c.health, c.updated_at,
       COALESCE(b.dpu_macs, '{}')::text[] AS dpu_macs,
       COALESCE(b.dpu_ips, '{}')::text[] AS dpu_ips
FROM component c
LEFT JOIN rack r ON r.id = c.rack_id
LEFT JOIN LATERAL (
    SELECT (array_agg(b.mac_address ORDER BY (b.type = 'Host') DESC, b.mac_address))[1] AS host_mac,
           ((array_agg(b.ip_address ORDER BY (b.type = 'Host') DESC, b.mac_address))[1])::text AS host_ip,
           array_agg(b.mac_address ORDER BY b.mac_address) FILTER (WHERE b.type = 'DPU') AS dpu_macs,
           array_agg(COALESCE(b.ip_address, '') ORDER BY b.mac_address) FILTER (WHERE b.type = 'DPU') AS dpu_ips
    FROM bmc b WHERE b.component_id = c.id
) b ON true
WHERE c.type = @type AND c.deleted_at IS NULL AND c.id > @after::uuid
ORDER BY c.id
LIMIT @page_size::int;

-- name: MirrorComponentKeyOwners :many
-- The components, of any type and soft-deleted ones included, holding one
-- of @serials (the natural key's unique index spans them all).
SELECT c.id, c.serial_number, lower(c.manufacturer)::text AS manufacturer
FROM component c WHERE c.serial_number = ANY(@serials::text[]);

-- name: MirrorBMCOwners :many
SELECT b.mac_address, b.component_id FROM bmc b WHERE b.mac_address = ANY(@macs::text[]);

-- name: MirrorComponentInsert :execrows
INSERT INTO component (id, rack_id, type, name, manufacturer, serial_number, model, description,
                       slot_id, tray_idx, host_id, mirrored_at)
SELECT (e->>'id')::uuid, (e->>'rack_id')::uuid, @type, e->>'name', e->>'manufacturer', e->>'serial_number',
       e->>'model', e->>'description', (e->>'slot_id')::int, (e->>'tray_idx')::int, (e->>'host_id')::int, now()
FROM jsonb_array_elements(@rows::jsonb) AS e;

-- name: MirrorComponentUpdate :execrows
-- Writes the mirror-managed columns of the components in @rows, resurrects
-- them and marks them mirrored.
UPDATE component c SET
    rack_id = (e->>'rack_id')::uuid, name = e->>'name', manufacturer = e->>'manufacturer',
    serial_number = e->>'serial_number', model = e->>'model', description = e->>'description',
    slot_id = (e->>'slot_id')::int, tray_idx = (e->>'tray_idx')::int, host_id = (e->>'host_id')::int,
    deleted_at = NULL, mirrored_at = COALESCE(c.mirrored_at, now()), updated_at = now()
FROM jsonb_array_elements(@rows::jsonb) AS e
WHERE c.id = (e->>'id')::uuid;

-- name: MirrorComponentSoftDelete :execrows
UPDATE component SET deleted_at = now(), updated_at = now() WHERE id = ANY(@ids::uuid[]) AND deleted_at IS NULL;

-- name: MirrorHostBMCInsert :execrows
-- Gives the components in @rows ({mac, component_id, ip}) their host BMC.
INSERT INTO bmc (mac_address, component_id, type, ip_address)
SELECT e->>'mac', (e->>'component_id')::uuid, 'Host', NULLIF(e->>'ip', '')
FROM jsonb_array_elements(@rows::jsonb) AS e;

-- name: MirrorBMCSetIP :execrows
UPDATE bmc b SET ip_address = NULLIF(e->>'ip', '')
FROM jsonb_array_elements(@rows::jsonb) AS e
WHERE b.mac_address = e->>'mac';
