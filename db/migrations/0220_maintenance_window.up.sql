-- Maintenance windows and freezes (docs/change-safety.md): named periods,
-- a recurrence (cron in a time zone, plus a duration) or a one-off
-- interval, over a scope of racks. Disruptive operations start on a rack
-- only inside a window covering it and outside every freeze covering it.
CREATE TABLE maintenance_window (
    id uuid PRIMARY KEY,
    kind text NOT NULL CHECK (kind IN ('window', 'freeze')),
    name text NOT NULL CHECK (name <> ''),
    description text NOT NULL DEFAULT '',
    -- A recurrence: cron (5 fields), time_zone (IANA) and duration_seconds.
    cron text NOT NULL DEFAULT '',
    time_zone text NOT NULL DEFAULT '',
    duration_seconds bigint NOT NULL DEFAULT 0,
    -- Or a one-off interval [starts_at, ends_at).
    starts_at timestamptz,
    ends_at timestamptz,
    -- The scope: the whole site, or the union of the rest (rooms, rows,
    -- NVLink domains, racks, resolved to IDs when written).
    site boolean NOT NULL DEFAULT false,
    halls text[] NOT NULL DEFAULT '{}',
    rack_rows text[] NOT NULL DEFAULT '{}',
    nvl_domain_ids uuid[] NOT NULL DEFAULT '{}',
    rack_ids uuid[] NOT NULL DEFAULT '{}',
    created_by text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (kind, name),
    CHECK ((cron <> '') <> (starts_at IS NOT NULL)),
    CHECK ((starts_at IS NULL) = (ends_at IS NULL)),
    CHECK (cron = '' OR duration_seconds > 0),
    CHECK (starts_at IS NULL OR ends_at > starts_at)
);

-- A task held by windows or freezes: WAITING until window_held_until (the
-- next opening; a durable wake is scheduled then). window_release is an
-- admin's override (who and why): the task no longer waits for windows.
ALTER TABLE task
    ADD COLUMN window_held_until timestamptz,
    ADD COLUMN window_release text;

-- Operation runs an admin released from windows (who and why): such a run
-- claims its targets whatever the windows and freezes. Kept apart from
-- operation_run, which the rollout package owns; a deleted run drops its
-- release.
CREATE TABLE maintenance_window_run_release (
    operation_run_id uuid PRIMARY KEY REFERENCES operation_run (id) ON DELETE CASCADE,
    released_by text NOT NULL DEFAULT '',
    reason text NOT NULL,
    released_at timestamptz NOT NULL DEFAULT now()
);
