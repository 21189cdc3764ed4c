-- name: RunInsertMany :many
-- RunInsertMany inserts runs and their steps in one statement (a burst of
-- submissions starts all its runs at once) and returns the steps, each
-- with its run's ID and timeout. Each step names its run by the run's
-- 1-based position in the run arrays (step_runs); the run IDs are drawn
-- first, in that order, so the caller maps runs back by position and
-- steps by (run, stage, step), never by the order rows come back in.
WITH input AS MATERIALIZED (
    SELECT nextval(pg_get_serial_sequence('engine_run', 'id')) AS id, x.n, x.owner, x.metadata,
        x.stage_count, x.open_steps, x.timeout_ms
    FROM (
        SELECT generate_subscripts(@owners::text[], 1)::bigint AS n, unnest(@owners::text[]) AS owner,
            unnest(@metadatas::jsonb[]) AS metadata, unnest(@stage_counts::integer[]) AS stage_count,
            unnest(@open_steps::integer[]) AS open_steps, unnest(@timeouts_ms::bigint[]) AS timeout_ms
    ) x
), r AS (
    INSERT INTO engine_run (id, owner, metadata, stage_count, open_steps, timeout_at)
    SELECT i.id, i.owner, i.metadata, i.stage_count, i.open_steps,
        CASE WHEN i.timeout_ms > 0 THEN now() + i.timeout_ms * interval '1 millisecond' END
    FROM input i
    RETURNING engine_run.id, engine_run.timeout_at
), s AS (
    INSERT INTO engine_step (run_id, stage_index, step_index, spec, budget_ms)
    SELECT i.id, st.stage_index, st.step_index, st.spec, st.budget_ms
    FROM (
        SELECT unnest(@step_runs::bigint[]) AS run_n, unnest(@stage_indexes::integer[]) AS stage_index,
            unnest(@step_indexes::integer[]) AS step_index, unnest(@specs::jsonb[]) AS spec,
            unnest(@budgets_ms::bigint[]) AS budget_ms
    ) st
    JOIN input i ON i.n = st.run_n
    RETURNING engine_step.id, engine_step.run_id, engine_step.stage_index, engine_step.step_index
)
SELECT s.id, s.run_id, s.stage_index, s.step_index, r.timeout_at, i.n AS run_n
FROM s JOIN r ON r.id = s.run_id JOIN input i ON i.id = s.run_id
ORDER BY s.id;

-- name: StageStartMany :exec
-- StageStartMany makes stages their runs' current ones: their steps (ids,
-- pending) become running with their deadlines fixed and their River jobs
-- recorded, and each run's join counters are reset; a run's first stage
-- also records its timeout job (timeout_job_ids, by timeout_run_ids). Every row is reached
-- through its key, whatever the planner guesses of the lists' lengths.
WITH s AS (
    UPDATE engine_step
    SET state = 'running', started_at = now(), deadline_at = now() + budget_ms * interval '1 millisecond',
        job_id = (@job_ids::bigint[])[array_position(@ids::bigint[], engine_step.id)]
    WHERE engine_step.id = ANY(@ids::bigint[]) AND engine_step.state = 'pending'
    RETURNING engine_step.run_id
)
UPDATE engine_run
SET stage_index = (@stage_indexes::integer[])[array_position(@run_ids::bigint[], engine_run.id)],
    open_steps = (SELECT count(*) FROM s WHERE s.run_id = engine_run.id),
    failed_steps = 0, first_failure = '',
    timeout_job_id = coalesce((@timeout_job_ids::bigint[])[array_position(@timeout_run_ids::bigint[], engine_run.id)],
        engine_run.timeout_job_id)
WHERE engine_run.id = ANY(@run_ids::bigint[]);

-- name: StepClaimMany :many
-- StepClaimMany is how a job starts (or goes on with) its step: each step
-- (ids, with the job working it and the execution's token) is claimed for
-- process_id and returned with its run's state. A token of 0 starts a new
-- execution (the token grows, superseding any other); a token of an earlier
-- claim goes on with it only if no one superseded it. A step that is not
-- running, whose job is no longer job_ids' (rescheduled elsewhere), or
-- whose token moved on is not returned.
WITH input AS (
    SELECT unnest(@ids::bigint[]) AS id, unnest(@job_ids::bigint[]) AS job_id, unnest(@tokens::bigint[]) AS token
), c AS (
    UPDATE engine_step
    SET process_id = NULLIF(@process_id::bigint, 0), claimed_at = now(),
        exec_token = CASE WHEN i.token = 0 THEN engine_step.exec_token + 1 ELSE engine_step.exec_token END,
        -- A new execution that finds the last one's claim still open (it
        -- never recorded its call's outcome: it died, lost its lease, or
        -- its job was retried) records that call's outcome as unknown.
        unknown_outcomes = CASE WHEN i.token = 0 AND engine_step.claimed_at IS NOT NULL
            THEN engine_step.unknown_outcomes || jsonb_build_array(jsonb_build_object(
                'batch', engine_step.batch_index, 'attempt', engine_step.attempt + 1,
                'began_at', engine_step.claimed_at, 'process_id', engine_step.process_id,
                'found_at', now(), 'why', 'the execution that made the call ended without recording its outcome'))
            ELSE engine_step.unknown_outcomes END
    FROM input i
    WHERE engine_step.id = i.id AND engine_step.state = 'running' AND engine_step.job_id = i.job_id
        AND (i.token = 0 OR engine_step.exec_token = i.token)
    RETURNING engine_step.id, engine_step.run_id, engine_step.stage_index, engine_step.step_index, engine_step.spec,
        engine_step.state, engine_step.batch_index, engine_step.attempt, engine_step.checkpoint, engine_step.wake_at,
        engine_step.deadline_at, engine_step.failed_targets, engine_step.exec_token, engine_step.job_id,
        (engine_step.unknown_outcomes <> '[]' AND engine_step.unknown_outcomes @> jsonb_build_array(
            jsonb_build_object('batch', engine_step.batch_index)))::boolean AS outcome_unknown
)
SELECT s.id, s.run_id, s.stage_index, s.step_index, s.spec, s.state, s.batch_index, s.attempt,
    s.checkpoint, s.wake_at, s.deadline_at, s.failed_targets, s.exec_token, s.job_id, s.outcome_unknown,
    r.state AS run_state, r.owner, r.timeout_at, now()::timestamptz AS now,
    -- The targets earlier steps of the step's chain failed, which it skips
    -- (a probe of the mostly empty partial index of steps with failed
    -- targets; not even that for a step without a chain or an earlier stage).
    (CASE WHEN s.stage_index > 0 AND s.spec ? 'chain' THEN (
        SELECT jsonb_agg(jsonb_build_object('step', p.spec->>'name', 'failed', p.failed_targets) ORDER BY p.stage_index)
        FROM engine_step p
        WHERE p.run_id = s.run_id AND p.failed_targets <> '{}' AND p.stage_index < s.stage_index
            AND p.spec->>'chain' = s.spec->>'chain')
    END)::jsonb AS chain_failures
FROM c s
-- OFFSET 0 keeps this a probe of the run's key per step: joined plainly,
-- the planner may hash the whole run table for a handful of steps.
CROSS JOIN LATERAL (SELECT state, owner, timeout_at FROM engine_run WHERE engine_run.id = s.run_id OFFSET 0) r;

-- claimed_at is cleared by every write that records a call's outcome (a
-- batch advance, a failure, a poll) and by StepUnclaim: a claim still set
-- when a new execution begins means the last call's outcome is unknown.

-- name: StepAdvanceBatch :execrows
UPDATE engine_step
SET batch_index = batch_index + 1, batch_attempts = array_append(batch_attempts, attempt + 1), claimed_at = NULL,
    attempt = 0, last_error = '', checkpoint = NULL, progress = NULL, wake_at = sqlc.narg(wake_at),
    failed_targets = failed_targets || @failed_targets::jsonb
WHERE id = @id AND state = 'running' AND batch_index = @batch_index AND exec_token = @exec_token;

-- name: StepRecordFailure :execrows
UPDATE engine_step
SET attempt = attempt + 1, last_error = @last_error, claimed_at = NULL
WHERE id = @id AND state = 'running' AND batch_index = @batch_index AND exec_token = @exec_token;

-- name: StepRecordPoll :execrows
UPDATE engine_step SET polls = polls + 1, claimed_at = NULL
WHERE id = @id AND state = 'running' AND exec_token = @exec_token;

-- name: StepUnclaim :exec
-- StepUnclaim closes the claim of an execution that made no call (it
-- found its step asleep, or its process stopping).
UPDATE engine_step SET claimed_at = NULL
WHERE id = @id AND state = 'running' AND exec_token = @exec_token;

-- name: StepSaveCheckpoint :execrows
UPDATE engine_step SET checkpoint = @checkpoint
WHERE id = @id AND state = 'running' AND batch_index = @batch_index AND exec_token = @exec_token;

-- name: StepSaveProgress :execrows
UPDATE engine_step SET progress = @progress
WHERE id = @id AND state = 'running' AND exec_token = @exec_token;

-- name: RunLock :one
SELECT id, state, stage_index, stage_count, timeout_at, now()::timestamptz AS now
FROM engine_run
WHERE id = @id
FOR UPDATE;

-- name: RunLockMany :exec
-- RunLockMany locks runs in ID order, as a batched checkpoint does before
-- writing: two checkpoints sharing runs queue instead of deadlocking.
SELECT id FROM engine_run
WHERE id = ANY(@ids::bigint[])
ORDER BY id
FOR UPDATE;

-- name: RunLockManyFree :many
-- RunLockManyFree locks, in ID order, those of the runs that no other
-- transaction holds, and returns them: a committer leaves the steps of a
-- run another transaction holds (a leak response pre-empting it, a
-- cancel) to be committed alone, rather than making the other steps of
-- its group, and the groups queued behind it, wait.
SELECT id FROM engine_run
WHERE id = ANY(@ids::bigint[])
ORDER BY id
FOR UPDATE SKIP LOCKED;

-- name: StepEndMany :many
-- StepEndMany is the checkpoint of a group of steps; the caller holds their
-- runs' locks (RunLockMany). It records each step's outcome, if the step is
-- still running in its run's current stage, and counts the ended steps on
-- their run rows (open steps, failed steps, the first failure in input
-- order). It returns one row per run with steps ended here, with the run's
-- counters after the update and the steps it ended; steps that had already ended (a duplicate
-- execution, a cancel that won the race) change nothing, and neither do
-- steps whose execution token (tokens) was superseded. calls < 0: the
-- step's last batch is already counted.
WITH input AS (
    SELECT unnest(@ids::bigint[]) AS id, unnest(@run_ids::bigint[]) AS run_id,
        unnest(@stage_indexes::integer[]) AS stage_index, unnest(@states::text[]) AS state,
        unnest(@errors::text[]) AS error, unnest(@failures::text[]) AS failure,
        unnest(@calls::integer[]) AS calls, unnest(@ords::integer[]) AS ord,
        unnest(@failed_targets::jsonb[]) AS failed_targets, unnest(@tokens::bigint[]) AS token
), s AS (
    UPDATE engine_step
    SET state = i.state, error = i.error, ended_at = now(), checkpoint = NULL, wake_at = NULL,
        failed_targets = CASE WHEN i.failed_targets = '{}' THEN engine_step.failed_targets
            ELSE engine_step.failed_targets || i.failed_targets END,
        batch_attempts = CASE WHEN i.calls < 0 THEN engine_step.batch_attempts
            ELSE array_append(engine_step.batch_attempts, i.calls) END
    FROM input i
    JOIN engine_run r ON r.id = i.run_id AND r.state = 'running' AND r.stage_index = i.stage_index
    WHERE engine_step.id = i.id AND engine_step.state = 'running' AND engine_step.exec_token = i.token
    RETURNING i.id, i.run_id, i.state, i.failure, i.ord
), ended AS (
    SELECT s.run_id, count(*) AS n, array_agg(s.id ORDER BY s.id) AS ids,
        count(*) FILTER (WHERE s.state = 'failed') AS failed,
        coalesce((array_agg(s.failure ORDER BY s.ord) FILTER (WHERE s.state = 'failed'))[1], '') AS failure
    FROM s
    GROUP BY s.run_id
)
UPDATE engine_run
SET open_steps = open_steps - ended.n,
    failed_steps = failed_steps + ended.failed,
    first_failure = CASE WHEN first_failure = '' THEN ended.failure ELSE first_failure END
FROM ended
WHERE engine_run.id = ended.run_id
RETURNING engine_run.id, engine_run.stage_index, engine_run.open_steps, engine_run.failed_steps,
    engine_run.first_failure, engine_run.stage_count, ended.ids::bigint[] AS ended_step_ids,
    -- the next stage's steps, when this one has just ended well
    CASE WHEN engine_run.open_steps = 0 AND engine_run.failed_steps = 0
        AND engine_run.stage_index + 1 < engine_run.stage_count
    THEN ARRAY(SELECT n.id FROM engine_step n
        WHERE n.run_id = engine_run.id AND n.stage_index = engine_run.stage_index + 1
        ORDER BY n.step_index)
    END::bigint[] AS next_step_ids;

-- name: RunEndMany :many
-- RunEndMany ends running runs (ids) with their states and errors.
UPDATE engine_run
SET state = (@states::text[])[array_position(@ids::bigint[], engine_run.id)],
    error = (@errors::text[])[array_position(@ids::bigint[], engine_run.id)],
    ended_at = now()
WHERE engine_run.id = ANY(@ids::bigint[]) AND engine_run.state = 'running'
RETURNING id, owner, metadata, state, error, created_at, ended_at, timeout_job_id;

-- name: StepCancelOpen :many
-- StepCancelOpen cancels the pending and running steps of runs (run_ids,
-- each with its error) and returns the River jobs of the running ones.
UPDATE engine_step
SET state = 'cancelled', ended_at = now(), checkpoint = NULL, wake_at = NULL,
    error = (@errors::text[])[array_position(@run_ids::bigint[], engine_step.run_id)]
WHERE engine_step.run_id = ANY(@run_ids::bigint[]) AND engine_step.state IN ('pending', 'running')
RETURNING job_id;

-- name: RunEndedAmong :many
-- RunEndedAmong returns which of the runs ids are no longer running.
SELECT id FROM engine_run
WHERE id = ANY(@ids::bigint[]) AND state <> 'running';

-- name: RunGetByIDs :many
SELECT id, owner, metadata, state, error, stage_index, stage_count, timeout_at, created_at, ended_at
FROM engine_run
WHERE id = ANY(@ids::bigint[]);

-- name: StepListByRuns :many
-- The steps of the runs, each run's in stage and step order.
SELECT id, run_id, stage_index, step_index, spec, state, error, batch_index, attempt, batch_attempts, polls,
    last_error, progress, failed_targets, job_id, wake_at, deadline_at, started_at, ended_at, unknown_outcomes
FROM engine_step
WHERE run_id = ANY(@run_ids::bigint[])
ORDER BY run_id, stage_index, step_index;

-- name: ProcessInsert :one
-- ProcessInsert takes a lease for a new engine process.
INSERT INTO engine_process (name, expires_at)
VALUES (@process_name::text, now() + sqlc.arg(expiry_ms)::bigint * interval '1 millisecond')
RETURNING id;

-- name: ProcessRenew :execrows
-- ProcessRenew renews a lease that has not expired; 0 rows: it expired (or
-- was swept or released), and the process must stop its calls.
UPDATE engine_process
SET heartbeat_at = now(), expires_at = now() + sqlc.arg(expiry_ms)::bigint * interval '1 millisecond'
WHERE id = @id AND expires_at > now();

-- name: ProcessDelete :exec
DELETE FROM engine_process WHERE id = ANY(@ids::bigint[]);

-- name: ProcessLockExpired :many
-- ProcessLockExpired locks expired leases for the sweep; another process
-- sweeping at the same time skips them.
SELECT id, name, heartbeat_at, now()::timestamptz AS now FROM engine_process
WHERE expires_at < now()
ORDER BY id
LIMIT 20
FOR UPDATE SKIP LOCKED;

-- name: ProcessExpiredExists :one
-- ProcessExpiredExists reports whether a lease has expired: the heartbeat's
-- probe for a dead process (a sweep keeps an expired lease until it has
-- rescheduled all its steps).
SELECT EXISTS (SELECT 1 FROM engine_process WHERE expires_at < now());

-- name: StepSetJobs :exec
-- StepSetJobs records the fresh River jobs of rescheduled steps.
UPDATE engine_step
SET job_id = (@job_ids::bigint[])[array_position(@ids::bigint[], engine_step.id)]
WHERE engine_step.id = ANY(@ids::bigint[]);

-- name: RunExtendTimeout :exec
-- RunExtendTimeout pushes back the timeouts of runs (ids) by the time their
-- steps were stranded in a dead process (ms, per run).
UPDATE engine_run
SET timeout_at = timeout_at + (sqlc.arg(ms)::bigint[])[array_position(sqlc.arg(ids)::bigint[], engine_run.id)] * interval '1 millisecond'
WHERE engine_run.id = ANY(sqlc.arg(ids)::bigint[]) AND timeout_at IS NOT NULL AND state = 'running';

-- name: StepSupersededAmong :many
-- StepSupersededAmong returns which of the executions (step ids with their
-- tokens) were superseded or whose step is no longer running.
WITH i AS (SELECT unnest(@ids::bigint[]) AS id, unnest(@tokens::bigint[]) AS token)
SELECT s.id FROM engine_step s
JOIN i ON s.id = i.id
WHERE s.exec_token <> i.token OR s.state <> 'running';

-- name: StepExecState :one
-- StepExecState says why a guarded write of an execution changed nothing:
-- the step ended, or its token moved on.
SELECT state, exec_token FROM engine_step WHERE id = @id;

-- name: StepSpecMany :many
-- StepSpecMany returns the specs of steps ids (for their jobs' labels).
SELECT id, spec FROM engine_step WHERE id = ANY(@ids::bigint[]);

-- name: RunDeleteEnded :one
-- Deletes the runs of ids that have ended (their steps go with them) and
-- says how many runs and steps went.
WITH runs AS (
    SELECT id FROM engine_run WHERE id = ANY(@ids::bigint[]) AND state <> 'running'
), steps AS (
    SELECT count(*) AS n FROM engine_step WHERE run_id IN (SELECT id FROM runs)
), gone AS (
    DELETE FROM engine_run WHERE id IN (SELECT id FROM runs) RETURNING 1
)
SELECT (SELECT count(*) FROM gone)::bigint AS runs, (SELECT n FROM steps)::bigint AS steps;

-- Resources (hold.go, migration 0301).

-- name: ResourceLock :many
SELECT name, capacity FROM engine_resource WHERE name = ANY (@names::text[]) ORDER BY name FOR UPDATE;

-- name: ResourceSet :exec
INSERT INTO engine_resource (name, capacity) VALUES (@name, @capacity)
ON CONFLICT (name) DO UPDATE SET capacity = excluded.capacity, updated_at = now();

-- name: ResourceDelete :execrows
DELETE FROM engine_resource WHERE name = @name;

-- name: HoldHeld :many
SELECT resource FROM engine_hold WHERE run_id = @run_id AND resource = ANY (@names::text[]);

-- name: HoldUsed :one
-- What the running runs other than run_id hold of resource.
SELECT coalesce(sum(h.amount), 0)::float8 AS used, count(*)::bigint AS holders
FROM engine_hold h JOIN engine_run r ON r.id = h.run_id AND r.state = 'running'
WHERE h.resource = @resource AND h.run_id <> @run_id;

-- name: WaitAhead :one
-- What the runs waiting for resource ahead of (since, step_id) want (one
-- amount per run, its earliest waiting step, runs already holding it are
-- not waiting for it).
SELECT coalesce(sum(x.amount), 0)::float8 AS ahead, count(*)::bigint AS waiters FROM (
    SELECT DISTINCT ON (w.run_id) w.run_id, w.amount, w.since, w.step_id
    FROM engine_wait w JOIN engine_step s ON s.id = w.step_id AND s.state = 'running'
    WHERE w.resource = @resource AND w.run_id <> @run_id
      AND NOT EXISTS (SELECT 1 FROM engine_hold h WHERE h.resource = w.resource AND h.run_id = w.run_id)
    ORDER BY w.run_id, w.since, w.step_id
) x WHERE (x.since, x.step_id) < (@since::timestamptz, @step_id::bigint);

-- name: WaitGet :many
SELECT resource, since, counted_until, now()::timestamptz AS now FROM engine_wait WHERE step_id = @step_id;

-- name: WaitUpsert :exec
INSERT INTO engine_wait (step_id, resource, run_id, amount)
SELECT @step_id, unnest(@resources::text[]), @run_id, unnest(@amounts::float8[])
ON CONFLICT (step_id, resource) DO UPDATE SET counted_until = now();

-- name: WaitDeleteStep :exec
DELETE FROM engine_wait WHERE step_id = @step_id;

-- name: HoldInsert :exec
INSERT INTO engine_hold (resource, run_id, amount)
SELECT unnest(@resources::text[]), @run_id, unnest(@amounts::float8[])
ON CONFLICT (resource, run_id) DO NOTHING;

-- name: StepExtendDeadline :one
-- Time spent waiting for resources is added to the steps deadline and
-- (RunExtendTimeout) its runs timeout.
UPDATE engine_step SET deadline_at = deadline_at + sqlc.arg(wait_ms)::bigint * interval '1 millisecond'
WHERE id = @id AND state = 'running'
RETURNING run_id;

-- name: HoldReleaseRuns :many
-- The holds of ended runs, released (one row per hold).
DELETE FROM engine_hold WHERE run_id = ANY (@run_ids::bigint[]) RETURNING resource;

-- name: WaitDeleteRuns :exec
DELETE FROM engine_wait WHERE run_id = ANY (@run_ids::bigint[]);

-- name: WaitOldestJobs :many
-- The jobs of the oldest steps waiting for resource (to wake).
SELECT s.job_id::bigint AS job_id FROM engine_wait w JOIN engine_step s ON s.id = w.step_id AND s.state = 'running'
WHERE w.resource = @resource AND s.job_id IS NOT NULL
ORDER BY w.since, w.step_id LIMIT @n;

-- name: ResourceUse :many
-- Per resource: its capacity (0: none), what running runs hold and how
-- many runs wait for it.
SELECT n.name::text AS name, coalesce(c.capacity, 0)::float8 AS capacity,
    (SELECT coalesce(sum(h.amount), 0) FROM engine_hold h JOIN engine_run r ON r.id = h.run_id AND r.state = 'running' WHERE h.resource = n.name)::float8 AS used,
    (SELECT count(*) FROM engine_hold h JOIN engine_run r ON r.id = h.run_id AND r.state = 'running' WHERE h.resource = n.name)::bigint AS holders,
    (SELECT count(DISTINCT w.run_id) FROM engine_wait w JOIN engine_step s ON s.id = w.step_id AND s.state = 'running' WHERE w.resource = n.name)::bigint AS waiting
FROM unnest(@names::text[]) AS n(name) LEFT JOIN engine_resource c ON c.name = n.name
ORDER BY n.name;
