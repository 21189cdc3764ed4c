-- Process leases (docs/engine.md, "Leases and fencing"). Each engine process
-- holds a row it renews every heartbeat; a row past expires_at belongs to a
-- dead (or partitioned) process, and a surviving process reschedules the
-- steps it had running.
CREATE TABLE engine_process (
    id           bigserial   PRIMARY KEY,
    -- name says which process it is (host, pid), for operators.
    name         text        NOT NULL DEFAULT '',
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
);

-- The execution of a running step: the process working it and the token of
-- that execution. Every write of a call (batch advance, failure, poll,
-- checkpoint, progress, the step's end) is guarded by the token, so a
-- superseded execution (its process declared dead, its job rescheduled)
-- cannot write. claimed_at is when the current call began: a call still
-- going long after its own timeout in a live process is presumed hung.
ALTER TABLE engine_step
    ADD COLUMN process_id bigint,
    ADD COLUMN exec_token bigint NOT NULL DEFAULT 0,
    ADD COLUMN claimed_at timestamptz;
-- No index on these: the sweeps reach running steps through River's running
-- jobs (few, indexed by state), and updates of these columns stay HOT.
