-- Firmware baselines and compliance (docs/firmware.md).

-- component_firmware is each device's installed firmware per sub-component
-- as Core last reported it (the inventory sync writes it; a row changes
-- only when what Core reports changes, so a no-change cycle writes none).
-- versions maps a sub-component to its installed versions, several when a
-- tray has several of it (two NICs): {"bmc": ["2.0"], "nic": ["1.1", "1.1"]}.
-- reported says Core's last successful read of the device's type answered
-- for the device; while it does, the device was seen at that read
-- (component_firmware_read); once it does not, seen_at is the last time it
-- was. changed_at is when versions last changed.
CREATE TABLE component_firmware (
    component_id uuid PRIMARY KEY REFERENCES component (id) ON DELETE CASCADE,
    versions     jsonb NOT NULL DEFAULT '{}',
    reported     boolean NOT NULL,
    seen_at      timestamptz NOT NULL,
    changed_at   timestamptz NOT NULL
);

-- component_firmware_read is, per component type, when the sync last read
-- installed versions from Core successfully (one row a type).
CREATE TABLE component_firmware_read (
    component_type text PRIMARY KEY,
    read_at        timestamptz NOT NULL
);

-- A baseline is a named set of desired versions; every change is a new
-- revision, kept with who made it and when.
CREATE TABLE firmware_baseline (
    id         uuid PRIMARY KEY,
    name       text NOT NULL,
    -- revision is the newest revision's number.
    revision   integer NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT firmware_baseline_name_key UNIQUE (name),
    CONSTRAINT firmware_baseline_name_check CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$')
);

-- entries: [{component_type, component, version, vendor, model,
-- rack_profile}]; source is 'manual' or 'core' (imported from Core's
-- desired versions).
CREATE TABLE firmware_baseline_revision (
    baseline_id uuid NOT NULL REFERENCES firmware_baseline (id) ON DELETE CASCADE,
    revision    integer NOT NULL,
    description text NOT NULL DEFAULT '',
    entries     jsonb NOT NULL,
    source      text NOT NULL DEFAULT 'manual' CHECK (source IN ('manual', 'core')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    created_by  text NOT NULL DEFAULT '',
    PRIMARY KEY (baseline_id, revision)
);

-- firmware_baseline_activation is every activation, newest last; the
-- newest row is the site's active baseline revision.
CREATE TABLE firmware_baseline_activation (
    id           bigserial PRIMARY KEY,
    baseline_id  uuid NOT NULL,
    revision     integer NOT NULL,
    activated_at timestamptz NOT NULL DEFAULT now(),
    activated_by text NOT NULL DEFAULT '',
    FOREIGN KEY (baseline_id, revision) REFERENCES firmware_baseline_revision (baseline_id, revision) ON DELETE CASCADE
);
