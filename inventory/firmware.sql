-- Installed firmware per sub-component (component_firmware) and what the
-- compliance report reads (docs/firmware.md).

-- name: FirmwareInstalledListByType :many
-- The stored installed versions of the live components of @type.
SELECT cf.component_id, cf.versions, cf.reported
FROM component_firmware cf
JOIN component c ON c.id = cf.component_id
WHERE c.type = @type AND c.deleted_at IS NULL;

-- name: FirmwareInstalledUpsert :execrows
-- Records the devices in @rows ({component_id, versions, changed}) as
-- reported at @read_at; changed says their versions differ from the
-- stored ones.
INSERT INTO component_firmware AS cf (component_id, versions, reported, seen_at, changed_at)
SELECT (e->>'component_id')::uuid, (e->'versions')::jsonb, true, @read_at, @read_at
FROM json_array_elements(@rows::json) AS e
JOIN component c ON c.id = (e->>'component_id')::uuid
ON CONFLICT (component_id) DO UPDATE SET
    versions   = excluded.versions,
    reported   = true,
    seen_at    = excluded.seen_at,
    changed_at = CASE WHEN cf.versions = excluded.versions THEN cf.changed_at ELSE excluded.changed_at END;

-- name: FirmwareInstalledMarkUnreported :execrows
-- Marks the devices in @ids, which Core's read of @type did not answer
-- for, as unreported; they were last seen at that type's previous read.
UPDATE component_firmware cf SET
    reported = false,
    seen_at  = coalesce((SELECT r.read_at FROM component_firmware_read r WHERE r.component_type = @type), cf.seen_at)
WHERE cf.component_id = ANY(@ids::uuid[]) AND cf.reported;

-- name: FirmwareReadSet :exec
INSERT INTO component_firmware_read (component_type, read_at) VALUES (@component_type, @read_at)
ON CONFLICT (component_type) DO UPDATE SET read_at = excluded.read_at, due = false;

-- name: FirmwareReadSetIfUnchanged :one
-- FirmwareReadSet, only while the installed-firmware generation is still
-- @firmware (no statement wrote component_firmware since the caller's own
-- record); it returns the generation and whether it recorded the read.
WITH g AS (SELECT n FROM component_firmware_generation),
r AS (
    INSERT INTO component_firmware_read (component_type, read_at)
    SELECT @component_type, @read_at WHERE (SELECT n FROM g) = @firmware::bigint
    ON CONFLICT (component_type) DO UPDATE SET read_at = excluded.read_at, due = false
    RETURNING 1
)
SELECT (SELECT n FROM g)::bigint AS firmware, EXISTS (SELECT 1 FROM r) AS recorded;

-- name: FirmwareReadMarkDue :exec
-- FirmwareReadMarkDue makes the types' versions due at the next cycle.
UPDATE component_firmware_read SET due = true WHERE component_type = ANY(@types::text[]) AND NOT due;

-- name: FirmwareReadDueList :many
SELECT component_type FROM component_firmware_read WHERE due;

-- name: FirmwareReadList :many
SELECT component_type, read_at FROM component_firmware_read;

-- name: FirmwareInstalledGet :one
SELECT cf.versions, cf.reported, cf.seen_at, cf.changed_at, r.read_at AS type_read_at
FROM component_firmware cf
JOIN component c ON c.id = cf.component_id
LEFT JOIN component_firmware_read r ON r.component_type = c.type
WHERE cf.component_id = @component_id;

-- name: FirmwareDeviceList :many
-- The live compute trays, NVLink switches and power shelves of live racks
-- (and rack-less ones) with what compliance needs of them and their
-- installed versions (NULL versions: never read); their racks come from
-- FirmwareRackList. Unordered (the caller sorts). Optional filters: @type
-- ('' any), @rack_ids (empty any), @domain_id, @component_ids (empty any).
SELECT c.id, c.name, c.type, c.manufacturer, coalesce(c.model, '')::text AS model, coalesce(c.external_id, '')::text AS external_id,
    c.rack_id, cf.versions, cf.reported, cf.seen_at
FROM component c
LEFT JOIN rack r ON r.id = c.rack_id
LEFT JOIN component_firmware cf ON cf.component_id = c.id
WHERE c.deleted_at IS NULL AND r.deleted_at IS NULL
  AND c.type IN ('Compute', 'NVSwitch', 'PowerShelf')
  AND (@type::text = '' OR c.type = @type::text)
  AND (coalesce(cardinality(@rack_ids::uuid[]), 0) = 0 OR c.rack_id = ANY(@rack_ids::uuid[]))
  AND (sqlc.narg(domain_id)::uuid IS NULL OR r.nvl_domain_id = sqlc.narg(domain_id)::uuid)
  AND (coalesce(cardinality(@component_ids::uuid[]), 0) = 0 OR c.id = ANY(@component_ids::uuid[]));

-- name: FirmwareRackList :many
-- The live racks (of @rack_ids; empty: all) with what compliance reports
-- of them: name, Core rack profile, room, position and NVLink domain.
SELECT r.id, r.name, coalesce(r.rack_profile_id, '')::text AS rack_profile, r.location_room, r.location_position,
    r.nvl_domain_id, coalesce(d.name, d.external_id, '')::text AS domain_name
FROM rack r
LEFT JOIN nvl_domain d ON d.id = r.nvl_domain_id
WHERE r.deleted_at IS NULL
  AND (coalesce(cardinality(@rack_ids::uuid[]), 0) = 0 OR r.id = ANY(@rack_ids::uuid[]));

-- name: FirmwareGenerations :one
-- The inventory generation and the installed-firmware generation: while
-- both hold, what FirmwareDevices returns has not changed (but for the
-- seen-at times, which follow component_firmware_read).
SELECT (SELECT coalesce(sum(n), 0) FROM inventory_generation)::bigint AS inventory,
    (SELECT n FROM component_firmware_generation)::bigint AS firmware;

-- name: FirmwareDeviceInventoryList :many
-- FirmwareDeviceList's devices, every one, without their installed
-- versions (FirmwareInstalledList reads those): what a compliance snapshot
-- reads of the inventory.
SELECT c.id, c.name, c.type, c.manufacturer, coalesce(c.model, '')::text AS model, c.rack_id
FROM component c
LEFT JOIN rack r ON r.id = c.rack_id
WHERE c.deleted_at IS NULL AND r.deleted_at IS NULL
  AND c.type IN ('Compute', 'NVSwitch', 'PowerShelf');

-- name: FirmwareInstalledList :many
-- Every stored installed-firmware row (deleted components' included).
SELECT component_id, versions, reported, seen_at FROM component_firmware;
