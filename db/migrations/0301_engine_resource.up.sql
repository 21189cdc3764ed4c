-- Engine resources (docs/engine.md "Resources"; issue 45): named
-- capacities a step may hold while its run goes on. A step that declares
-- holds starts only when each named resource with a capacity has room
-- (the sum of the amounts its running runs hold, plus those of the steps
-- waiting ahead of it, plus its own, within the capacity); else it waits
-- (a row in engine_wait, its job snoozed) and is woken when a run holding
-- the resource ends. A hold lasts until its run ends; only the holds of
-- running runs count, so a crashed process's holds stay with its runs
-- (rescued through their leases) and never leak past their end. A
-- resource without a row has no capacity: holds are recorded, never
-- waited for.
CREATE TABLE engine_resource (
    name       text PRIMARY KEY CHECK (name <> ''),
    capacity   double precision NOT NULL CHECK (capacity > 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE engine_hold (
    resource text NOT NULL,
    run_id   bigint NOT NULL REFERENCES engine_run (id) ON DELETE CASCADE,
    amount   double precision NOT NULL CHECK (amount >= 0),
    held_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (resource, run_id)
);
CREATE INDEX engine_hold_run_idx ON engine_hold (run_id);

-- A step waiting for resources: since orders the waiters (first come,
-- first admitted); counted_until is how far its wait has been added to
-- its step deadline and run timeout (time spent waiting does not count
-- against them).
CREATE TABLE engine_wait (
    step_id       bigint NOT NULL REFERENCES engine_step (id) ON DELETE CASCADE,
    resource      text NOT NULL,
    run_id        bigint NOT NULL,
    amount        double precision NOT NULL CHECK (amount >= 0),
    since         timestamptz NOT NULL DEFAULT now(),
    counted_until timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (step_id, resource)
);
CREATE INDEX engine_wait_resource_idx ON engine_wait (resource, since, step_id);
CREATE INDEX engine_wait_run_idx ON engine_wait (run_id);
