-- Event rules (spec/orchestration.md §4, docs/event-rules.md): persisted
-- rules, their bindings to the site or a rack, the deduplicated events
-- Flow has answered and the action executions each event planned.
CREATE TABLE event_rule (
    id          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    name        text        NOT NULL CHECK (name <> '' AND name = btrim(name) AND octet_length(name) <= 128),
    description text        NOT NULL DEFAULT '',
    enabled     boolean     NOT NULL DEFAULT false,
    event_type  text        NOT NULL CHECK (event_type ~ '^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$'),
    -- The versioned action list ({"version": 1, "actions": [...]}).
    policy      jsonb       NOT NULL,
    -- The identity that created the rule: tasks its submit_task actions
    -- submit are recorded as submitted by it.
    created_by  text        NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (id, event_type)
);

CREATE TABLE event_rule_binding (
    id         uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    rule_id    uuid        NOT NULL,
    event_type text        NOT NULL,
    scope_type text        NOT NULL CHECK (scope_type IN ('site', 'rack')),
    -- A purged rack takes its bindings with it.
    scope_id   uuid        REFERENCES rack (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (rule_id, event_type) REFERENCES event_rule (id, event_type) ON DELETE CASCADE,
    CHECK ((scope_type = 'site') = (scope_id IS NULL))
);

-- One slot per (event type, site) and per (event type, rack).
CREATE UNIQUE INDEX event_rule_binding_site ON event_rule_binding (event_type) WHERE scope_type = 'site';
CREATE UNIQUE INDEX event_rule_binding_rack ON event_rule_binding (event_type, scope_id) WHERE scope_type = 'rack';
CREATE INDEX event_rule_binding_rule ON event_rule_binding (rule_id);

-- Deduplicated event occurrences: one row per (source, key), however many
-- times the source reports it.
CREATE TABLE event (
    id               uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    source_name      text        NOT NULL CHECK (source_name ~ '^[a-z][a-z0-9_]*$'),
    source_key       text        NOT NULL CHECK (source_key <> ''),
    event_type       text        NOT NULL,
    severity         text        NOT NULL CHECK (severity IN ('info', 'warning', 'critical')),
    resource_kind    text        NOT NULL CHECK (resource_kind IN ('rack', 'component')),
    resource_id      uuid        NOT NULL,
    -- The resource's rack (the resource itself for a rack event).
    rack_id          uuid        NOT NULL,
    component_type   text,
    applied_rule_id  uuid        NOT NULL,
    -- Only the actions whose condition applied, as the rule stood when the
    -- event was planned.
    effective_policy jsonb       NOT NULL,
    summary          text        NOT NULL DEFAULT '' CHECK (char_length(summary) <= 1024),
    observations     integer     NOT NULL DEFAULT 1 CHECK (observations > 0),
    observed_at      timestamptz NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    last_observed_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (source_name, source_key),
    CHECK ((resource_kind = 'component') = (component_type IS NOT NULL))
);

CREATE INDEX event_resource ON event (resource_id, created_at DESC);

-- One execution per (event, action). The River job of kind
-- operations.event_rule_execution is the claim: it holds the attempt, the
-- lock and the rescue, so no claim token is stored here.
CREATE TABLE event_action_execution (
    id              uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    event_id        uuid        NOT NULL REFERENCES event (id) ON DELETE CASCADE,
    action_name     text        NOT NULL,
    action_type     text        NOT NULL CHECK (action_type IN ('submit_task', 'send_alert', 'noop')),
    -- Immutable, versioned ({"version": 1, ...}).
    plan            jsonb       NOT NULL,
    status          text        NOT NULL CHECK (status IN ('pending', 'running', 'skipped', 'deferred', 'completed', 'failed')),
    reason          text        CHECK (reason IN ('no_targets', 'attempt_failed', 'attempt_interrupted')),
    attempts        integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    status_message  text        NOT NULL DEFAULT '',
    next_attempt_at timestamptz,
    -- The tasks a submit_task execution submitted.
    task_ids        uuid[]      NOT NULL DEFAULT '{}',
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (event_id, action_name),
    -- skipped comes with no_targets, deferred with attempt_failed or
    -- attempt_interrupted, and no other status has a reason.
    CHECK ((status = 'skipped') = (reason IS NOT DISTINCT FROM 'no_targets')),
    CHECK ((status = 'deferred') = COALESCE(reason IN ('attempt_failed', 'attempt_interrupted'), false)),
    CHECK ((status = 'deferred') = (next_attempt_at IS NOT NULL))
);

CREATE INDEX event_action_execution_status ON event_action_execution (status, updated_at) WHERE status IN ('pending', 'running', 'deferred');

-- Ongoing leak occurrences (spec §5.2), persisted where upstream keeps
-- them in memory: the source key stays the same while the component stays
-- in consecutive successful polls, across restarts and replicas, so one
-- occurrence gets one response. A component that drops out of a
-- successful poll loses its row; leaking again is a new occurrence.
CREATE TABLE leak_occurrence (
    component_kind text        NOT NULL CHECK (component_kind IN ('compute', 'nvswitch')),
    external_id    text        NOT NULL CHECK (external_id <> ''),
    source_key     text        NOT NULL UNIQUE,
    started_at     timestamptz NOT NULL DEFAULT now(),
    last_seen_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (component_kind, external_id)
);

-- leak_status per component (wire Component.leak_status), written by leak
-- detection after each successful poll; no row means UNKNOWN.
CREATE TABLE component_leak (
    component_id uuid        PRIMARY KEY REFERENCES component (id) ON DELETE CASCADE,
    status       text        NOT NULL CHECK (status IN ('detected', 'not_detected')),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- Leak handling status reads the tasks event-rule executions submitted.
CREATE INDEX task_trigger ON task (trigger_type, trigger_id) WHERE trigger_type <> '';
