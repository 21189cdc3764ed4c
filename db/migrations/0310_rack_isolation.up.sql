-- Leak tiers (docs/event-rules.md "Leak tiers", issue 45): a rack whose open
-- leaks reach the severe threshold, or every rack of a coolant loop the
-- BMS reports leaking (critical), is powered off and the facility is asked
-- to isolate it (AC breaker, coolant valves). The request is re-sent
-- (next_send_at) until the facility acknowledges it, and the rack stays
-- refused for power-on until an operator clears it. At most one isolation
-- per rack is open (not cleared).
CREATE TABLE rack_isolation (
    id              uuid        PRIMARY KEY,
    rack_id         uuid        NOT NULL REFERENCES rack (id) ON DELETE CASCADE,
    tier            text        NOT NULL CHECK (tier IN ('severe', 'critical')),
    reason          text        NOT NULL,
    -- The leaking components (severe) that reached the threshold.
    component_ids   uuid[]      NOT NULL DEFAULT '{}',
    -- The BMS report behind a critical isolation.
    report_id       uuid,
    observed_at     timestamptz NOT NULL,
    requested_at    timestamptz NOT NULL DEFAULT now(),
    -- Facility requests sent so far, and when the next is due while
    -- neither acknowledged nor cleared.
    sends           integer     NOT NULL DEFAULT 0,
    last_sent_at    timestamptz,
    next_send_at    timestamptz NOT NULL DEFAULT now(),
    acknowledged_at timestamptz,
    acknowledged_by text,
    ack_note        text,
    cleared_at      timestamptz,
    cleared_by      text,
    clear_reason    text,
    CHECK ((cleared_at IS NULL) = (cleared_by IS NULL))
);
CREATE UNIQUE INDEX rack_isolation_open ON rack_isolation (rack_id) WHERE cleared_at IS NULL;
CREATE INDEX rack_isolation_due ON rack_isolation (next_send_at) WHERE acknowledged_at IS NULL AND cleared_at IS NULL;

-- An admin's override of the power-on refusal of one rack for one open
-- isolation (its own, or one on its coolant loop): audited, with a reason;
-- it ends with the isolation.
CREATE TABLE rack_isolation_override (
    rack_id      uuid        NOT NULL REFERENCES rack (id) ON DELETE CASCADE,
    isolation_id uuid        NOT NULL REFERENCES rack_isolation (id) ON DELETE CASCADE,
    override_by  text        NOT NULL,
    reason       text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (rack_id, isolation_id)
);

-- Leaks the BMS reports through ReportFacilityLeak (the critical tier):
-- on a coolant loop, or on a rack; racks are the racks Flow isolated for it.
CREATE TABLE facility_leak_report (
    id           uuid        PRIMARY KEY,
    reported_by  text        NOT NULL,
    coolant_loop text,
    rack_id      uuid        REFERENCES rack (id) ON DELETE SET NULL,
    summary      text        NOT NULL DEFAULT '',
    rack_ids     uuid[]      NOT NULL DEFAULT '{}',
    reported_at  timestamptz NOT NULL DEFAULT now(),
    CHECK (coolant_loop IS NOT NULL OR rack_id IS NOT NULL)
);
CREATE INDEX facility_leak_report_by ON facility_leak_report (reported_by, reported_at DESC);
