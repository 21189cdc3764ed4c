-- The engine's durable state: one row per run, one row per step. River's
-- job table holds the scheduling; these rows hold the outcome and cursor.

CREATE TABLE engine_run (
    id          bigserial PRIMARY KEY,
    -- owner is the caller's opaque reference (a task ID, say); metadata is
    -- the caller's JSON, handed back to the end-of-run hook.
    owner       text        NOT NULL DEFAULT '',
    metadata    jsonb       NOT NULL DEFAULT '{}',
    state       text        NOT NULL DEFAULT 'running'
                CHECK (state IN ('running', 'completed', 'failed', 'terminated')),
    error       text        NOT NULL DEFAULT '',
    stage_index integer     NOT NULL DEFAULT 0,
    stage_count integer     NOT NULL CHECK (stage_count > 0),
    -- The current stage's join: steps still open, steps failed, and the
    -- first failure (the run's error if the stage fails). Updating them
    -- locks the run row, so the last step of a stage to end sees the others.
    open_steps    integer   NOT NULL DEFAULT 0,
    failed_steps  integer   NOT NULL DEFAULT 0,
    first_failure text      NOT NULL DEFAULT '',
    timeout_at  timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now(),
    ended_at    timestamptz
);

CREATE INDEX engine_run_owner_idx ON engine_run (owner);

CREATE TABLE engine_step (
    id             bigserial PRIMARY KEY,
    run_id         bigint      NOT NULL REFERENCES engine_run (id) ON DELETE CASCADE,
    stage_index    integer     NOT NULL,
    step_index     integer     NOT NULL,
    -- spec is the frozen step definition (stage name and join, action kind,
    -- params, targets, max_parallel, timeouts, retry policy).
    spec           jsonb       NOT NULL,
    budget_ms      bigint      NOT NULL CHECK (budget_ms > 0),
    state          text        NOT NULL DEFAULT 'pending'
                   CHECK (state IN ('pending', 'running', 'completed', 'failed', 'cancelled')),
    error          text        NOT NULL DEFAULT '',
    -- Cursor: the batch being worked, failed calls of that batch, the calls
    -- each finished batch took.
    batch_index    integer     NOT NULL DEFAULT 0,
    attempt        integer     NOT NULL DEFAULT 0,
    batch_attempts integer[]   NOT NULL DEFAULT '{}',
    polls          integer     NOT NULL DEFAULT 0,
    last_error     text        NOT NULL DEFAULT '',
    checkpoint     jsonb,
    progress       jsonb,
    job_id         bigint,
    wake_at        timestamptz,
    deadline_at    timestamptz,
    started_at     timestamptz,
    ended_at       timestamptz,
    UNIQUE (run_id, stage_index, step_index)
);
