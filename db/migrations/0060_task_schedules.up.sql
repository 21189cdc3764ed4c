-- Task schedules (spec/orchestration.md §1.1): when (spec) and what
-- (operation_template, without targets) of recurring and one-time
-- operations. The racks a schedule acts on are task_schedule_scope rows.
-- Firing is a River job scheduled at next_run_at (docs/schedules.md): the
-- row's next_run_at is the token that makes each firing happen once.
CREATE TABLE task_schedule (
    id                 uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    name               varchar(255) NOT NULL UNIQUE,
    spec_type          varchar(16) NOT NULL CHECK (spec_type IN ('interval', 'cron', 'one-time')),
    spec               text        NOT NULL,
    timezone           varchar(64) NOT NULL DEFAULT 'UTC',
    -- TaskTemplate JSON: type, code, information (firmware credentials only
    -- as a sealed envelope), conflict_strategy, queue_timeout_secs, rule_id.
    operation_template jsonb       NOT NULL,
    overlap_policy     varchar(16) NOT NULL DEFAULT 'skip' CHECK (overlap_policy IN ('skip', 'queue')),
    -- false: paused, or a consumed one-time schedule (next_run_at NULL).
    enabled            boolean     NOT NULL DEFAULT true,
    next_run_at        timestamptz,
    last_run_at        timestamptz,
    -- How many firings submitted tasks (the tasks carry the firing time in
    -- their descriptions): an audit of exactly-once, not on the wire.
    fire_count         bigint      NOT NULL DEFAULT 0,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    CHECK (enabled <= (next_run_at IS NOT NULL))
);

CREATE INDEX idx_task_schedule_next_run ON task_schedule (next_run_at) WHERE enabled AND next_run_at IS NOT NULL;
CREATE INDEX task_schedule_created_id ON task_schedule (created_at, id);

-- One row per targeted rack. component_filter: NULL = every component of
-- the rack, {"kind":"types","types":[...]} or
-- {"kind":"components","components":["<uuid>",...]}.
CREATE TABLE task_schedule_scope (
    id               uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    schedule_id      uuid        NOT NULL REFERENCES task_schedule (id) ON DELETE CASCADE,
    rack_id          uuid        NOT NULL REFERENCES rack (id) ON DELETE CASCADE,
    component_filter jsonb,
    last_task_id     uuid        REFERENCES task (id) ON DELETE SET NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (schedule_id, rack_id)
);

CREATE INDEX task_schedule_scope_rack ON task_schedule_scope (rack_id);
CREATE INDEX task_schedule_scope_last_task ON task_schedule_scope (last_task_id) WHERE last_task_id IS NOT NULL;
