-- Operation runs (spec/orchestration.md §2): phased, gated rollouts of one
-- operation (firmware upgrade) over a planned, frozen set of rack targets.
-- Planning happens once, at create; the run and all its targets are written
-- in one transaction. docs/rollouts.md describes the state machines.
CREATE TABLE operation_run (
    id                  uuid         PRIMARY KEY DEFAULT gen_random_uuid(),
    name                varchar(255) NOT NULL,
    description         text         NOT NULL DEFAULT '',
    status              text         NOT NULL DEFAULT 'pending' CHECK (status IN
                            ('pending', 'running', 'paused', 'completed', 'completed_with_failures', 'cancelled', 'failed')),
    status_reason       varchar(64)  NOT NULL DEFAULT 'none' CHECK (status_reason IN
                            ('none', 'operator_paused', 'phase_gate', 'safety_gate', 'conflict_retry_timeout')),
    status_message      text         NOT NULL DEFAULT '',
    -- Fully defaulted at create (generated seeds and effective retry
    -- durations included). Firmware credentials in the template are stored
    -- only as a sealed envelope.
    selector            jsonb        NOT NULL,
    options             jsonb        NOT NULL,
    operation_template  jsonb        NOT NULL,
    operation_type      text         NOT NULL,
    operation_code      text         NOT NULL,
    current_phase_index int          NOT NULL DEFAULT 0 CHECK (current_phase_index >= 0),
    total_phases        int          NOT NULL DEFAULT 0 CHECK (total_phases >= 0),
    -- When the run's next wake-up job (conflict backoff, retry timeout) is
    -- scheduled; NULL when none is.
    wake_at             timestamptz,
    created_at          timestamptz  NOT NULL DEFAULT now(),
    updated_at          timestamptz  NOT NULL DEFAULT now(),
    started_at          timestamptz,
    finished_at         timestamptz
);

CREATE INDEX operation_run_created ON operation_run (created_at DESC, id DESC);
CREATE INDEX operation_run_active ON operation_run (updated_at) WHERE status IN ('pending', 'running');

CREATE TABLE operation_run_target (
    id                 uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    operation_run_id   uuid        NOT NULL REFERENCES operation_run (id) ON DELETE CASCADE,
    -- No foreign key: a run's history outlives a purged rack.
    rack_id            uuid        NOT NULL,
    sequence_index     int         NOT NULL CHECK (sequence_index >= 0),
    phase_index        int         NOT NULL CHECK (phase_index >= 0),
    -- The frozen execution set: component type -> component UUIDs.
    components_by_type jsonb       NOT NULL,
    task_id            uuid        REFERENCES task (id) ON DELETE SET NULL,
    status             text        NOT NULL DEFAULT 'pending' CHECK (status IN
                           ('pending', 'claimed', 'blocked', 'submitted', 'completed', 'failed', 'terminated', 'skipped')),
    message            text        NOT NULL DEFAULT '',
    -- Conflict-retry time of a blocked target.
    retry_after        timestamptz,
    -- blocked_since, attempts, last_retry_delay_seconds.
    retry_state        jsonb       NOT NULL DEFAULT '{}',
    -- A failure the operator acknowledged by resuming the run: it no longer
    -- feeds the safety gates (docs/rollouts.md, "sticky gates").
    acknowledged       boolean     NOT NULL DEFAULT false,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (operation_run_id, rack_id),
    UNIQUE (operation_run_id, sequence_index),
    CHECK ((status = 'blocked') <= (retry_after IS NOT NULL))
);

CREATE INDEX operation_run_target_phase ON operation_run_target (operation_run_id, phase_index, sequence_index);
CREATE INDEX operation_run_target_task ON operation_run_target (task_id) WHERE task_id IS NOT NULL;
CREATE INDEX operation_run_target_blocked ON operation_run_target (rack_id) WHERE status = 'blocked';
