-- Inventory: NVLink domains, racks, components and their BMCs.
--
-- Identity rules (see docs/inventory.md):
--   * a rack or component is known by (manufacturer, serial_number), with the
--     manufacturer compared case-insensitively; soft-deleted rows keep their
--     identity until purged;
--   * a BMC MAC address is stored normalised (lowercase, colon-separated) and
--     is unique across the whole database.

CREATE TABLE nvl_domain (
    id          uuid PRIMARY KEY,
    -- NULL for domains discovered from Core rack groups that carry no name.
    name        text,
    external_id text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT nvl_domain_name_key UNIQUE (name),
    CONSTRAINT nvl_domain_external_id_key UNIQUE (external_id),
    CONSTRAINT nvl_domain_name_check CHECK (name <> '')
);

CREATE TABLE rack (
    id                  uuid PRIMARY KEY,
    name                text NOT NULL,
    manufacturer        text NOT NULL,
    serial_number       text NOT NULL,
    model               text,
    description         text,
    location_region     text NOT NULL DEFAULT '',
    location_datacenter text NOT NULL DEFAULT '',
    location_room       text NOT NULL DEFAULT '',
    location_position   text NOT NULL DEFAULT '',
    external_id         text,
    nvl_domain_id       uuid REFERENCES nvl_domain (id) ON DELETE SET NULL,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    deleted_at          timestamptz,
    CONSTRAINT rack_external_id_check CHECK (external_id <> '')
);

CREATE UNIQUE INDEX rack_serial_key ON rack (serial_number, lower(manufacturer));
CREATE UNIQUE INDEX rack_external_id_key ON rack (external_id);
CREATE INDEX rack_name_idx ON rack (name, id) WHERE deleted_at IS NULL;
CREATE INDEX rack_nvl_domain_idx ON rack (nvl_domain_id) WHERE nvl_domain_id IS NOT NULL;

CREATE TABLE component (
    id               uuid PRIMARY KEY,
    rack_id          uuid REFERENCES rack (id) ON DELETE CASCADE,
    type             text NOT NULL,
    name             text NOT NULL DEFAULT '',
    manufacturer     text NOT NULL,
    serial_number    text NOT NULL,
    model            text,
    description      text,
    firmware_version text NOT NULL DEFAULT '',
    slot_id          integer NOT NULL DEFAULT 0,
    tray_idx         integer NOT NULL DEFAULT 0,
    host_id          integer NOT NULL DEFAULT 0,
    -- The component's ID in its source system (Component.component_id).
    external_id      text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    deleted_at       timestamptz,
    CONSTRAINT component_type_check CHECK (type IN ('Compute', 'NVSwitch', 'PowerShelf', 'ToRSwitch', 'UMS', 'CDU')),
    CONSTRAINT component_external_id_check CHECK (external_id <> '')
);

CREATE UNIQUE INDEX component_serial_key ON component (serial_number, lower(manufacturer));
CREATE INDEX component_rack_idx ON component (rack_id, name, id);
CREATE INDEX component_name_idx ON component (name, id) WHERE deleted_at IS NULL;
CREATE INDEX component_external_id_idx ON component (external_id) WHERE external_id IS NOT NULL;

CREATE TABLE bmc (
    mac_address  text PRIMARY KEY,
    component_id uuid NOT NULL REFERENCES component (id) ON DELETE CASCADE,
    type         text NOT NULL,
    ip_address   text,
    CONSTRAINT bmc_type_check CHECK (type IN ('Host', 'DPU')),
    CONSTRAINT bmc_mac_address_check CHECK (mac_address ~ '^([0-9a-f]{2}:){5}[0-9a-f]{2}$')
);

CREATE INDEX bmc_component_idx ON bmc (component_id);
