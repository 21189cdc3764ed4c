-- Inventory queries. Names are noun then verb. Live rows have deleted_at NULL;
-- queries read live rows unless their name says WithDeleted.
--
-- List filters take LIKE patterns (the service turns exact values into
-- escaped patterns) with a flag choosing ANY (use_or) or ALL; a NULL pattern
-- array means "no filter on this field". Ordering is CASE-based on a key and
-- a direction, always followed by id ascending as the tie-breaker.
--
-- A component scope (GetComponents' target_spec) is: explicit component IDs,
-- whole racks (scope_rack_ids) and racks narrowed to types, written
-- '<rack uuid>/<type>' in scope_rack_types.

-- name: NVLDomainInsert :exec
INSERT INTO nvl_domain (id, name, external_id, nmxc_cluster_id)
VALUES (@id, @name, sqlc.narg(external_id), sqlc.narg(nmxc_cluster_id));

-- name: NVLDomainGetByExternalID :one
SELECT * FROM nvl_domain WHERE external_id = @external_id AND deleted_at IS NULL;

-- name: NVLDomainExternalIDs :many
-- The external IDs of the domains with these UUIDs (those that have one),
-- for the racks and components that point at them.
SELECT id, external_id::text AS external_id FROM nvl_domain
WHERE id = ANY (@ids::uuid[]) AND external_id IS NOT NULL;

-- name: NVLinkDomainList :many
-- Domains with an external ID (GetListOfNVLinkDomains): an optional name
-- query, name ascending or descending (unnamed domains last when ascending,
-- first when descending, as PostgreSQL places NULLs), then UUID ascending.
SELECT * FROM nvl_domain
WHERE deleted_at IS NULL AND coalesce(external_id, '') <> ''
  AND (sqlc.narg(name_patterns)::text[] IS NULL
   OR (CASE WHEN @name_any::bool THEN name LIKE ANY (sqlc.narg(name_patterns)::text[])
            ELSE name LIKE ALL (sqlc.narg(name_patterns)::text[]) END))
ORDER BY
    CASE WHEN NOT @order_desc::bool THEN name END ASC NULLS LAST,
    CASE WHEN @order_desc::bool THEN name END DESC NULLS FIRST,
    id ASC
LIMIT @row_limit OFFSET @row_offset;

-- name: NVLinkDomainCount :one
SELECT count(*) FROM nvl_domain
WHERE deleted_at IS NULL AND coalesce(external_id, '') <> ''
  AND (sqlc.narg(name_patterns)::text[] IS NULL
   OR (CASE WHEN @name_any::bool THEN name LIKE ANY (sqlc.narg(name_patterns)::text[])
            ELSE name LIKE ALL (sqlc.narg(name_patterns)::text[]) END));

-- name: RackListByNVLDomains :many
-- The live racks of several domains, by domain then rack UUID.
SELECT * FROM rack
WHERE nvl_domain_id = ANY (@nvl_domain_ids::uuid[]) AND deleted_at IS NULL
ORDER BY nvl_domain_id, id;

-- name: NVLDomainGetByID :one
SELECT * FROM nvl_domain WHERE id = @id AND deleted_at IS NULL;

-- name: NVLDomainGetByName :one
SELECT * FROM nvl_domain WHERE name = @name AND deleted_at IS NULL;

-- name: NVLDomainList :many
SELECT * FROM nvl_domain
WHERE deleted_at IS NULL AND (sqlc.narg(name_patterns)::text[] IS NULL
   OR (CASE WHEN @name_any::bool THEN name LIKE ANY (sqlc.narg(name_patterns)::text[])
            ELSE name LIKE ALL (sqlc.narg(name_patterns)::text[]) END))
ORDER BY name ASC NULLS LAST, id ASC
LIMIT @row_limit OFFSET @row_offset;

-- name: NVLDomainCount :one
SELECT count(*) FROM nvl_domain
WHERE deleted_at IS NULL AND (sqlc.narg(name_patterns)::text[] IS NULL
   OR (CASE WHEN @name_any::bool THEN name LIKE ANY (sqlc.narg(name_patterns)::text[])
            ELSE name LIKE ALL (sqlc.narg(name_patterns)::text[]) END));

-- name: RackInsert :exec
INSERT INTO rack (
    id, name, manufacturer, serial_number, model, description,
    location_region, location_datacenter, location_room, location_position, external_id
) VALUES (
    @id, @name, @manufacturer, @serial_number, @model, @description,
    @location_region, @location_datacenter, @location_room, @location_position, sqlc.narg(external_id)
);

-- name: RackGetByID :one
SELECT * FROM rack WHERE id = @id AND deleted_at IS NULL;

-- name: RackGetByIDWithDeleted :one
SELECT * FROM rack WHERE id = @id;

-- name: RackGetByIDForUpdate :one
SELECT * FROM rack WHERE id = @id AND deleted_at IS NULL FOR UPDATE;

-- name: RackGetBySerial :one
SELECT * FROM rack
WHERE lower(manufacturer) = lower(@manufacturer) AND serial_number = @serial_number AND deleted_at IS NULL;

-- name: RackGetByExternalID :one
SELECT * FROM rack WHERE external_id = @external_id AND deleted_at IS NULL;

-- name: RackListByName :many
SELECT * FROM rack WHERE name = @name AND deleted_at IS NULL ORDER BY id LIMIT 2;

-- name: RackListByNVLDomain :many
SELECT * FROM rack WHERE nvl_domain_id = @nvl_domain_id AND deleted_at IS NULL ORDER BY name, id;

-- name: RackList :many
SELECT * FROM rack
WHERE deleted_at IS NULL
  AND (sqlc.narg(name_patterns)::text[] IS NULL
       OR (CASE WHEN @name_any::bool THEN name LIKE ANY (sqlc.narg(name_patterns)::text[])
                ELSE name LIKE ALL (sqlc.narg(name_patterns)::text[]) END))
  AND (sqlc.narg(manufacturer_patterns)::text[] IS NULL
       OR (CASE WHEN @manufacturer_any::bool THEN manufacturer ILIKE ANY (sqlc.narg(manufacturer_patterns)::text[])
                ELSE manufacturer ILIKE ALL (sqlc.narg(manufacturer_patterns)::text[]) END))
  AND (NOT @external_id_only::bool OR coalesce(external_id, '') <> '')
  AND (sqlc.narg(model_patterns)::text[] IS NULL
       OR (CASE WHEN @model_any::bool THEN coalesce(model, '') LIKE ANY (sqlc.narg(model_patterns)::text[])
                ELSE coalesce(model, '') LIKE ALL (sqlc.narg(model_patterns)::text[]) END))
ORDER BY
    CASE WHEN @order_key::text = 'name' AND NOT @order_desc::bool THEN name END ASC,
    CASE WHEN @order_key::text = 'name' AND @order_desc::bool THEN name END DESC,
    CASE WHEN @order_key::text = 'manufacturer' AND NOT @order_desc::bool THEN manufacturer END ASC,
    CASE WHEN @order_key::text = 'manufacturer' AND @order_desc::bool THEN manufacturer END DESC,
    CASE WHEN @order_key::text = 'model' AND NOT @order_desc::bool THEN model END ASC NULLS FIRST,
    CASE WHEN @order_key::text = 'model' AND @order_desc::bool THEN model END DESC NULLS LAST,
    id ASC
LIMIT @row_limit OFFSET @row_offset;

-- name: RackCount :one
SELECT count(*) FROM rack
WHERE deleted_at IS NULL
  AND (sqlc.narg(name_patterns)::text[] IS NULL
       OR (CASE WHEN @name_any::bool THEN name LIKE ANY (sqlc.narg(name_patterns)::text[])
                ELSE name LIKE ALL (sqlc.narg(name_patterns)::text[]) END))
  AND (sqlc.narg(manufacturer_patterns)::text[] IS NULL
       OR (CASE WHEN @manufacturer_any::bool THEN manufacturer ILIKE ANY (sqlc.narg(manufacturer_patterns)::text[])
                ELSE manufacturer ILIKE ALL (sqlc.narg(manufacturer_patterns)::text[]) END))
  AND (NOT @external_id_only::bool OR coalesce(external_id, '') <> '')
  AND (sqlc.narg(model_patterns)::text[] IS NULL
       OR (CASE WHEN @model_any::bool THEN coalesce(model, '') LIKE ANY (sqlc.narg(model_patterns)::text[])
                ELSE coalesce(model, '') LIKE ALL (sqlc.narg(model_patterns)::text[]) END));

-- name: RackUpdate :exec
UPDATE rack SET
    name = @name,
    model = @model,
    description = @description,
    location_region = @location_region,
    location_datacenter = @location_datacenter,
    location_room = @location_room,
    location_position = @location_position,
    external_id = sqlc.narg(external_id),
    updated_at = now()
WHERE id = @id;

-- name: RackSetNVLDomain :exec
UPDATE rack SET nvl_domain_id = sqlc.narg(nvl_domain_id), updated_at = now() WHERE id = @id;

-- name: RackSoftDelete :execrows
UPDATE rack SET deleted_at = now(), updated_at = now() WHERE id = @id AND deleted_at IS NULL;

-- name: RackPurge :execrows
DELETE FROM rack WHERE id = @id AND deleted_at IS NOT NULL;

-- name: RackListDeletedByName :many
SELECT * FROM rack WHERE name = @name AND deleted_at IS NOT NULL
ORDER BY deleted_at DESC, id LIMIT @row_limit;

-- name: ComponentInsert :copyfrom
INSERT INTO component (
    id, rack_id, type, name, manufacturer, serial_number, model, description,
    firmware_version, slot_id, tray_idx, host_id, external_id
) VALUES (
    @id, @rack_id, @type, @name, @manufacturer, @serial_number, @model, @description,
    @firmware_version, @slot_id, @tray_idx, @host_id, @external_id
);

-- name: ComponentGetByID :one
SELECT sqlc.embed(c), r.nvl_domain_id AS rack_nvl_domain_id, r.external_id AS rack_external_id
FROM component c LEFT JOIN rack r ON r.id = c.rack_id
WHERE c.id = @id AND c.deleted_at IS NULL;

-- name: ComponentGetByIDs :many
-- ComponentGetByIDs is ComponentGetByID for many components in one round
-- trip: the live ones of ids, in no particular order.
SELECT sqlc.embed(c), r.nvl_domain_id AS rack_nvl_domain_id, r.external_id AS rack_external_id
FROM component c LEFT JOIN rack r ON r.id = c.rack_id
WHERE c.id = ANY(@ids::uuid[]) AND c.deleted_at IS NULL;

-- name: ComponentGetByIDWithDeleted :one
SELECT * FROM component WHERE id = @id;

-- name: ComponentGetBySerialWithRack :many
-- GetComponentInfoBySerial in one round trip: the component with its rack's
-- columns (NULL without a rack) and one row per BMC (NULL BMC columns
-- without BMCs).
SELECT sqlc.embed(c), r.nvl_domain_id AS rack_nvl_domain_id, r.external_id AS rack_external_id,
       r.name AS rack_name, r.manufacturer AS rack_manufacturer, r.serial_number AS rack_serial_number,
       r.model AS rack_model, r.description AS rack_description,
       r.location_region AS rack_location_region, r.location_datacenter AS rack_location_datacenter,
       r.location_room AS rack_location_room, r.location_position AS rack_location_position,
       r.created_at AS rack_created_at, r.updated_at AS rack_updated_at, r.deleted_at AS rack_deleted_at,
       b.mac_address AS bmc_mac_address, b.type AS bmc_type, b.ip_address AS bmc_ip_address
FROM component c
LEFT JOIN rack r ON r.id = c.rack_id
LEFT JOIN bmc b ON b.component_id = c.id
WHERE lower(c.manufacturer) = lower(@manufacturer) AND c.serial_number = @serial_number AND c.deleted_at IS NULL;

-- name: ComponentGetByIDWithRack :many
-- GetComponentInfoByID in one round trip, as ComponentGetBySerialWithRack
-- (the same columns, so the same Go code reads both).
SELECT sqlc.embed(c), r.nvl_domain_id AS rack_nvl_domain_id, r.external_id AS rack_external_id,
       r.name AS rack_name, r.manufacturer AS rack_manufacturer, r.serial_number AS rack_serial_number,
       r.model AS rack_model, r.description AS rack_description,
       r.location_region AS rack_location_region, r.location_datacenter AS rack_location_datacenter,
       r.location_room AS rack_location_room, r.location_position AS rack_location_position,
       r.created_at AS rack_created_at, r.updated_at AS rack_updated_at, r.deleted_at AS rack_deleted_at,
       b.mac_address AS bmc_mac_address, b.type AS bmc_type, b.ip_address AS bmc_ip_address
FROM component c
LEFT JOIN rack r ON r.id = c.rack_id
LEFT JOIN bmc b ON b.component_id = c.id
WHERE c.id = @id AND c.deleted_at IS NULL;

-- name: ComponentListByRacks :many
-- Unordered: callers group by rack and sort in Go, which is much cheaper
-- than a collated sort of thousands of rows.
SELECT * FROM component WHERE rack_id = ANY (@rack_ids::uuid[]) AND deleted_at IS NULL;

-- name: ComponentListByExternalID :many
-- The candidates come from the two indexes (the external ID's, the BMC's
-- MAC): written as "external_id = … OR id IN (…)" the condition was
-- checked on every component (a leak's ingest: 164 ms a call at 500 racks
-- on a loaded machine, issue 45).
SELECT sqlc.embed(c), r.nvl_domain_id AS rack_nvl_domain_id, r.external_id AS rack_external_id
FROM component c LEFT JOIN rack r ON r.id = c.rack_id
WHERE c.deleted_at IS NULL
  AND (@type::text = '' OR c.type = @type::text)
  AND c.id IN (SELECT x.id FROM component x WHERE x.external_id = @external_id
               UNION ALL
               SELECT b.component_id FROM bmc b WHERE b.mac_address = @mac_address)
ORDER BY c.id
LIMIT 2;

-- name: ComponentList :many
SELECT sqlc.embed(c), r.nvl_domain_id AS rack_nvl_domain_id, r.external_id AS rack_external_id
FROM component c LEFT JOIN rack r ON r.id = c.rack_id
WHERE c.deleted_at IS NULL
  AND (NOT @scoped::bool
       OR c.id = ANY (@scope_component_ids::uuid[])
       OR c.rack_id = ANY (@scope_rack_ids::uuid[])
       OR (c.rack_id::text || '/' || c.type) = ANY (@scope_rack_types::text[]))
  AND (sqlc.narg(types)::text[] IS NULL OR c.type = ANY (sqlc.narg(types)::text[]))
  AND (sqlc.narg(name_patterns)::text[] IS NULL
       OR (CASE WHEN @name_any::bool THEN c.name LIKE ANY (sqlc.narg(name_patterns)::text[])
                ELSE c.name LIKE ALL (sqlc.narg(name_patterns)::text[]) END))
  AND (sqlc.narg(manufacturer_patterns)::text[] IS NULL
       OR (CASE WHEN @manufacturer_any::bool THEN c.manufacturer ILIKE ANY (sqlc.narg(manufacturer_patterns)::text[])
                ELSE c.manufacturer ILIKE ALL (sqlc.narg(manufacturer_patterns)::text[]) END))
  AND (sqlc.narg(model_patterns)::text[] IS NULL
       OR (CASE WHEN @model_any::bool THEN coalesce(c.model, '') LIKE ANY (sqlc.narg(model_patterns)::text[])
                ELSE coalesce(c.model, '') LIKE ALL (sqlc.narg(model_patterns)::text[]) END))
ORDER BY
    CASE WHEN @order_key::text = 'name' AND NOT @order_desc::bool THEN c.name END ASC,
    CASE WHEN @order_key::text = 'name' AND @order_desc::bool THEN c.name END DESC,
    CASE WHEN @order_key::text = 'manufacturer' AND NOT @order_desc::bool THEN c.manufacturer END ASC,
    CASE WHEN @order_key::text = 'manufacturer' AND @order_desc::bool THEN c.manufacturer END DESC,
    CASE WHEN @order_key::text = 'model' AND NOT @order_desc::bool THEN c.model END ASC NULLS FIRST,
    CASE WHEN @order_key::text = 'model' AND @order_desc::bool THEN c.model END DESC NULLS LAST,
    CASE WHEN @order_key::text = 'type' AND NOT @order_desc::bool THEN c.type END ASC,
    CASE WHEN @order_key::text = 'type' AND @order_desc::bool THEN c.type END DESC,
    c.id ASC
LIMIT @row_limit OFFSET @row_offset;

-- name: ComponentCount :one
SELECT count(*) FROM component c
WHERE c.deleted_at IS NULL
  AND (NOT @scoped::bool
       OR c.id = ANY (@scope_component_ids::uuid[])
       OR c.rack_id = ANY (@scope_rack_ids::uuid[])
       OR (c.rack_id::text || '/' || c.type) = ANY (@scope_rack_types::text[]))
  AND (sqlc.narg(types)::text[] IS NULL OR c.type = ANY (sqlc.narg(types)::text[]))
  AND (sqlc.narg(name_patterns)::text[] IS NULL
       OR (CASE WHEN @name_any::bool THEN c.name LIKE ANY (sqlc.narg(name_patterns)::text[])
                ELSE c.name LIKE ALL (sqlc.narg(name_patterns)::text[]) END))
  AND (sqlc.narg(manufacturer_patterns)::text[] IS NULL
       OR (CASE WHEN @manufacturer_any::bool THEN c.manufacturer ILIKE ANY (sqlc.narg(manufacturer_patterns)::text[])
                ELSE c.manufacturer ILIKE ALL (sqlc.narg(manufacturer_patterns)::text[]) END))
  AND (sqlc.narg(model_patterns)::text[] IS NULL
       OR (CASE WHEN @model_any::bool THEN coalesce(c.model, '') LIKE ANY (sqlc.narg(model_patterns)::text[])
                ELSE coalesce(c.model, '') LIKE ALL (sqlc.narg(model_patterns)::text[]) END));

-- name: ComponentUpdate :exec
UPDATE component SET
    rack_id = sqlc.narg(rack_id),
    firmware_version = @firmware_version,
    description = @description,
    slot_id = @slot_id,
    tray_idx = @tray_idx,
    host_id = @host_id,
    updated_at = now()
WHERE id = @id;

-- name: ComponentSoftDeleteByRack :exec
UPDATE component SET deleted_at = now(), updated_at = now() WHERE rack_id = @rack_id AND deleted_at IS NULL;

-- name: ComponentSoftDelete :execrows
UPDATE component SET deleted_at = now(), updated_at = now() WHERE id = @id AND deleted_at IS NULL;

-- name: ComponentPurge :execrows
DELETE FROM component WHERE id = @id AND deleted_at IS NOT NULL;

-- name: BMCInsert :copyfrom
INSERT INTO bmc (mac_address, component_id, type, ip_address) VALUES (@mac_address, @component_id, @type, @ip_address);

-- name: BMCGetByMAC :one
SELECT * FROM bmc WHERE mac_address = @mac_address;

-- name: BMCUpdate :exec
UPDATE bmc SET type = @type, ip_address = @ip_address WHERE mac_address = @mac_address;

-- name: BMCListByComponents :many
SELECT * FROM bmc WHERE component_id = ANY (@component_ids::uuid[]);

-- name: BMCListByMACs :many
SELECT * FROM bmc WHERE mac_address = ANY (@mac_addresses::text[]);

-- name: ComponentListBySerials :many
SELECT * FROM component WHERE serial_number = ANY (@serial_numbers::text[]);

-- name: ComponentListForRackPage :many
-- The live components of racks, unordered: the rack listing's hot path,
-- grouped and sorted in Go; their BMCs come from BMCListForRackPage.
-- Timestamps are left out. The service reads it with ComponentRackPageFunc
-- (dbsqlc/component_page.go), which decodes the raw column values itself.
SELECT c.id, c.rack_id, c.type, c.name, c.manufacturer, c.serial_number, c.model, c.description,
       c.firmware_version, c.slot_id, c.tray_idx, c.host_id, c.external_id,
       c.operation_phase, c.operation_reason, c.blocked_operations, c.power_state, c.health
FROM component c
WHERE c.rack_id = ANY (@rack_ids::uuid[]) AND c.deleted_at IS NULL;

-- name: BMCListForRackPage :many
-- The BMCs of racks' components (deleted ones' included: the caller keeps
-- those of the components it has), by bmc.rack_id: one index range per rack
-- instead of one probe per component.
SELECT b.component_id, b.mac_address, b.type, b.ip_address
FROM bmc b
WHERE b.rack_id = ANY (@rack_ids::uuid[]);

-- name: ComponentSetOperationStatus :execrows
UPDATE component SET operation_phase = @operation_phase, operation_reason = @operation_reason,
    blocked_operations = @blocked_operations, updated_at = now()
WHERE id = @id AND deleted_at IS NULL;

-- name: ComponentBlocking :many
-- The live components among ids, or among the compute trays of the racks of
-- ids (rack_scoped), whose status blocks operation type op. Few components
-- block anything, so the partial index component_blocking_idx keeps this
-- cheap on every disruptive call.
SELECT c.id FROM component c
WHERE cardinality(c.blocked_operations) > 0 AND c.deleted_at IS NULL
  AND @op::text = ANY (c.blocked_operations)
  AND (c.id = ANY (@ids::uuid[])
       OR (@rack_scoped::boolean AND c.type = 'Compute'
           AND c.rack_id IN (SELECT rack_id FROM component WHERE id = ANY (@ids::uuid[]))))
ORDER BY c.id;

-- name: ComponentCountLiveByRack :one
SELECT count(*) FROM component WHERE rack_id = @rack_id AND deleted_at IS NULL;

-- name: RackListScope :many
-- Every live rack with what an inventory-wide scope plans with (name and
-- location), unordered (ResolveInventory sorts).
SELECT id, name, location_region, location_datacenter, location_room, location_position
FROM rack WHERE deleted_at IS NULL;

-- name: ComponentListScope :many
-- The live components of racks, of types (every type when empty), without
-- BMCs: what a scope plans with, and the name it is sorted by; unordered
-- (ResolveInventory sorts each rack's in Go: no sort of the whole site's
-- components in the database).
SELECT c.rack_id::uuid AS rack_id, c.id, c.type, c.name
FROM component c
WHERE c.rack_id = ANY (@rack_ids::uuid[]) AND c.deleted_at IS NULL
  AND (cardinality(@types::text[]) = 0 OR c.type = ANY (@types::text[]));

-- name: RackListByNames :many
-- The live racks of names, for a burst of submissions naming theirs (the
-- caller finds a name's racks, or its ambiguity, as RackListByName would).
SELECT * FROM rack WHERE name = ANY(@names::text[]) AND deleted_at IS NULL ORDER BY name, id;

-- name: InventoryGeneration :one
-- The inventory generation: it grows with every committed inventory write
-- (migration 0180), so an equal value means an unchanged inventory.
SELECT coalesce(sum(n), 0)::bigint AS generation FROM inventory_generation;

-- name: RackSetPlacement :one
-- A rack's power feed and coolant loop (issue 45): each set only when its
-- set_ flag is true; an empty value clears it (NULL).
UPDATE rack SET
    power_feed = CASE WHEN @set_feed::bool THEN nullif(@power_feed::text, '') ELSE power_feed END,
    coolant_loop = CASE WHEN @set_loop::bool THEN nullif(@coolant_loop::text, '') ELSE coolant_loop END,
    updated_at = now()
WHERE id = @id AND deleted_at IS NULL
RETURNING *;

-- name: RackPlacementList :many
-- Every rack's feed and loop (the floor map's colourings, the feed list).
SELECT id, name, location_room, power_feed, coolant_loop FROM rack
WHERE deleted_at IS NULL AND (power_feed IS NOT NULL OR coolant_loop IS NOT NULL)
ORDER BY name, id;
