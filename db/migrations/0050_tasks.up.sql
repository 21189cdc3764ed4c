-- Tasks (spec/execution.md §5): one per rack per submitted operation. A task
-- runs as one engine run (run_id), started in the transaction that inserts a
-- PENDING task, or in the one that promotes a WAITING task.
CREATE TABLE task (
    id               uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    operation_type   text        NOT NULL CHECK (operation_type IN
                         ('inject_expectation', 'power_control', 'firmware_control', 'bring_up', 'decommission')),
    operation_code   text        NOT NULL,
    -- The operation payload (spec §1); firmware credentials only as a
    -- sealed envelope, never in plaintext.
    information      jsonb       NOT NULL DEFAULT '{}',
    description      text        NOT NULL DEFAULT '',
    rack_id          uuid        NOT NULL REFERENCES rack (id) ON DELETE CASCADE,
    -- Frozen scope: component UUIDs by component type, and the identifiers
    -- the backends know them by.
    components       jsonb       NOT NULL,
    component_ids    uuid[]      NOT NULL,
    targets          jsonb       NOT NULL,
    -- The resolved rule, frozen at submission; applied_rule_id is NULL for
    -- built-in rules.
    rule             jsonb       NOT NULL,
    rule_name        text        NOT NULL DEFAULT '',
    applied_rule_id  uuid,
    status           text        NOT NULL CHECK (status IN ('waiting', 'pending', 'running', 'completed', 'failed', 'terminated')),
    message          text        NOT NULL DEFAULT '',
    report           jsonb,
    run_id           bigint,
    queue_expires_at timestamptz,
    idempotency_key  text        UNIQUE,
    trigger_type     text        NOT NULL DEFAULT '',
    trigger_id       text        NOT NULL DEFAULT '',
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz,
    CHECK ((status = 'waiting') = (queue_expires_at IS NOT NULL)),
    CHECK ((status IN ('pending', 'running')) <= (run_id IS NOT NULL))
);

CREATE INDEX task_created_at_id ON task (created_at DESC, id DESC);
CREATE INDEX task_rack_created ON task (rack_id, created_at DESC, id DESC);
CREATE INDEX task_active_rack ON task (rack_id, created_at, id) WHERE status IN ('waiting', 'pending', 'running');
CREATE INDEX task_component_ids ON task USING gin (component_ids);
CREATE UNIQUE INDEX task_run_id ON task (run_id) WHERE run_id IS NOT NULL;
