-- Inventory sync with NICo Core (docs/inventory-sync.md): what the sync
-- writes on components and racks, the drift it persists, and a record of
-- each cycle.

-- power_state is Core's power as last synced ('' never synced); health is
-- Core's aggregate health report (NULL: none known). health is json, not
-- jsonb: it keeps the text the sync wrote, so the sync compares a fresh
-- report with the stored one byte for byte (35,000 comparisons a cycle)
-- before falling back to comparing values.
ALTER TABLE component
    ADD COLUMN power_state text NOT NULL DEFAULT '',
    ADD COLUMN health      json;

-- health is Core's rack health report (json, as above); rack_group_id and
-- rack_profile_id are mirrored from Core.
ALTER TABLE rack
    ADD COLUMN health          json,
    ADD COLUMN rack_group_id   text,
    ADD COLUMN rack_profile_id text;

-- nmxc_cluster_id is the NMX-C cluster Core observed the domain's switches
-- in (NULL: none observed).
ALTER TABLE nvl_domain ADD COLUMN nmxc_cluster_id uuid;

-- component_drift holds the differences between Flow's inventory and Core
-- found by the last successful sync of each component type; a type's rows
-- are replaced together, and only when they changed.
CREATE TABLE component_drift (
    id               bigserial PRIMARY KEY,
    component_type   text NOT NULL,
    drift_type       text NOT NULL
        CHECK (drift_type IN ('missing_in_actual', 'missing_in_expected', 'mismatch')),
    -- NULL for missing_in_expected (Core has it, Flow does not).
    component_id     uuid REFERENCES component (id) ON DELETE CASCADE,
    -- Core's ID; NULL for missing_in_actual without one.
    external_id      text,
    mac_address      text NOT NULL DEFAULT '',
    name             text NOT NULL DEFAULT '',
    serial_number    text NOT NULL DEFAULT '',
    firmware_version text NOT NULL DEFAULT '',
    rack_external_id text NOT NULL DEFAULT '',
    -- [{field_name, expected_value, actual_value}] for mismatch.
    diffs            jsonb NOT NULL DEFAULT '[]',
    checked_at       timestamptz NOT NULL
);

CREATE INDEX component_drift_type_idx ON component_drift (component_type);
CREATE INDEX component_drift_component_idx ON component_drift (component_id) WHERE component_id IS NOT NULL;

-- inventory_sync_run records each sync cycle: when, how long, and per part
-- (expected mirror, compute, nvswitch, topology, powershelf, rack health)
-- whether it succeeded, its error and how many rows it changed.
CREATE TABLE inventory_sync_run (
    id          bigserial PRIMARY KEY,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL,
    trigger     text NOT NULL CHECK (trigger IN ('schedule', 'manual')),
    parts       jsonb NOT NULL
);

CREATE INDEX inventory_sync_run_started_idx ON inventory_sync_run (started_at DESC);
