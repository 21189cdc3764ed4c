-- name: SubscriptionInsert :one
INSERT INTO notify_subscription (id, url, event_types, rack_ids, secret, description, created_by, batch_max, batch_max_bytes)
VALUES (@id, @url, @event_types, @rack_ids, @secret, @description, @created_by, @batch_max, @batch_max_bytes)
RETURNING *;

-- name: SubscriptionGetByID :one
SELECT * FROM notify_subscription WHERE id = @id;

-- name: SubscriptionList :many
SELECT * FROM notify_subscription ORDER BY created_at, id;

-- name: SubscriptionDelete :execrows
DELETE FROM notify_subscription WHERE id = @id;

-- name: SubscriptionDeleteDeliveries :execrows
-- Deletes a subscription's deliveries, and the events no other
-- subscription has a delivery of (before the subscription itself).
WITH d AS (
    DELETE FROM notify_delivery WHERE subscription_id = @subscription_id RETURNING event_id, created_at
)
DELETE FROM notify_event e USING (SELECT DISTINCT event_id, created_at FROM d) g
WHERE e.id = g.event_id
  AND NOT EXISTS (SELECT 1 FROM notify_delivery o
                  WHERE o.created_at = g.created_at AND o.event_id = g.event_id AND o.subscription_id <> @subscription_id);

-- name: DeliveryPrune :one
-- One batch of retention (the prune job): walks up to lim deliveries after
-- id after, in id order, deletes those delivered before delivered_before
-- and those dead (last changed) before dead_before, and the events of the
-- deleted whose last delivery they were. Pending deliveries are never
-- deleted, nor an event a delivery is left of; rows are locked only as
-- they are deleted, and no delivery the senders work is (those are
-- pending). It returns the last id walked (0: none left), whether the
-- walk reached a delivery written since walk_until (no later one can be
-- due for deletion yet), and how many deliveries and events went.
WITH w AS (
    SELECT id, created_at FROM notify_delivery WHERE id > @after::bigint ORDER BY id LIMIT @lim::int
), gone AS (
    DELETE FROM notify_delivery d USING w
    WHERE d.id = w.id
      AND ((d.status = 'delivered' AND d.delivered_at < @delivered_before::timestamptz) OR (d.status = 'dead' AND d.updated_at < @dead_before::timestamptz))
    RETURNING d.id, d.event_id, d.created_at AS created_at
), live AS (
    -- The deliveries left of the events of those deleted: a delivery's
    -- created_at is its event's (one statement wrote both), so they are
    -- within the deleted ones' time range, which the BRIN index by
    -- created_at reads (a few pages, never the table).
    SELECT o.event_id, o.created_at FROM notify_delivery o
    WHERE o.created_at >= (SELECT min(gone.created_at) FROM gone) AND o.created_at <= (SELECT max(gone.created_at) FROM gone)
      AND NOT EXISTS (SELECT 1 FROM gone x WHERE x.id = o.id)
), ev AS (
    DELETE FROM notify_event e USING (SELECT DISTINCT gone.event_id, gone.created_at FROM gone) g
    WHERE e.id = g.event_id
      AND NOT EXISTS (SELECT 1 FROM live WHERE live.event_id = g.event_id AND live.created_at = g.created_at)
    RETURNING e.id
)
SELECT COALESCE((SELECT max(w.id) FROM w), 0)::bigint AS last_id,
    COALESCE((SELECT max(w.created_at) FROM w) >= @walk_until::timestamptz, false)::boolean AS reached,
    (SELECT count(*) FROM gone)::bigint AS deliveries,
    (SELECT count(*) FROM ev)::bigint AS events;

-- name: EventInsert :many
-- Writes an event and its deliveries to subscription_ids (in that order),
-- one statement: no rows when dedupe_key was seen (nothing written). It
-- returns each delivery's subscription and lane (whose sender to wake).
WITH e AS (
    INSERT INTO notify_event (id, type, subject, dedupe_key, data)
    VALUES (@id, @type, @subject, sqlc.narg(dedupe_key), @data)
    ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
    RETURNING id, subject
)
INSERT INTO notify_delivery (event_id, subscription_id, subject)
SELECT e.id, s.id, e.subject FROM e, unnest(@subscription_ids::uuid[]) WITH ORDINALITY AS s (id, n)
ORDER BY s.n
RETURNING id, subscription_id, lane;

-- name: EventInsertMany :many
-- EventInsert of several events in one statement: the events (ids,
-- types, subjects, dedupe keys ('' none), data as JSON text), and their
-- deliveries as pairs (event_of: the event's ID, subscription_of), in
-- that order. An event whose dedupe key was seen writes nothing.
WITH e AS (
    INSERT INTO notify_event (id, type, subject, dedupe_key, data)
    SELECT (@ids::uuid[])[i], (@types::text[])[i], (@subjects::text[])[i], NULLIF((@dedupe_keys::text[])[i], ''), ((@datas::text[])[i])::jsonb
    FROM generate_subscripts(@ids::uuid[], 1) AS i
    ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
    RETURNING id, subject
)
INSERT INTO notify_delivery (event_id, subscription_id, subject)
SELECT e.id, (@subscription_of::uuid[])[n], e.subject FROM generate_subscripts(@event_of::uuid[], 1) AS n
JOIN e ON e.id = (@event_of::uuid[])[n]
ORDER BY n
RETURNING id, subscription_id, lane;

-- name: LaneInsert :exec
-- A new subscription's lanes (notify_lane_of's 16).
INSERT INTO notify_lane (subscription_id, lane) SELECT @subscription_id, generate_series(0, 15);

-- name: LaneLease :one
-- Leases a lane to holder until leased_until when it is free (or already
-- holder's): its job starts, or renews. No row: another job works it.
UPDATE notify_lane SET holder = @holder, leased_until = @leased_until, queued_at = NULL, due_at = NULL
WHERE subscription_id = @subscription_id AND lane = @lane
  AND (leased_until IS NULL OR leased_until < now() OR holder = @holder)
RETURNING leased_until;

-- name: LaneBatch :many
-- Up to lim pending deliveries of a lane, in order, of the subjects whose
-- first pending delivery (their head) is due, with what sending needs:
-- the subscription's URL and sealed secret, and the event.
WITH heads AS (
    SELECT DISTINCT ON (h.subject) h.subject, h.next_attempt_at FROM notify_delivery h
    WHERE h.subscription_id = @subscription_id AND h.lane = @lane::smallint AND h.status = 'pending'
    ORDER BY h.subject, h.id
)
SELECT d.id, d.event_id, d.subject, d.attempts, d.batch_of, s.url, s.secret, s.batch_max, s.batch_max_bytes,
    ev.type AS event_type, ev.data AS event_data, ev.created_at AS event_created_at
FROM notify_delivery d
JOIN heads ON heads.subject = d.subject AND heads.next_attempt_at <= now()
JOIN notify_subscription s ON s.id = d.subscription_id
JOIN notify_event ev ON ev.id = d.event_id
WHERE d.subscription_id = @subscription_id AND d.lane = @lane::smallint AND d.status = 'pending'
ORDER BY d.id
LIMIT @lim;

-- name: DeliveryRecord :exec
-- Records a batch's attempts in one statement: each delivery's new status
-- (delivered, pending again from next_attempt_at, or dead), its HTTP
-- status and error, and for a failed request of a batched subscription
-- the request's first delivery ID (batch_of: retried as a unit; 0 none). Delivery bookkeeping only, so it commits without
-- waiting for the WAL flush (synchronous_commit off for this one
-- transaction): a crash may lose the last few milliseconds of outcomes,
-- which re-sends those events (at least once; receivers dedupe on the
-- event ID), and never loses an event.
UPDATE notify_delivery d SET status = (@statuses::text[])[r.n], attempts = d.attempts + 1,
    batch_of = NULLIF((@batch_of::bigint[])[r.n], 0),
    last_status_code = (@codes::int[])[r.n], last_error = (@errors::text[])[r.n], next_attempt_at = (@next_attempt_at::timestamptz[])[r.n],
    delivered_at = CASE WHEN (@statuses::text[])[r.n] = 'delivered' THEN now() ELSE d.delivered_at END, updated_at = now()
FROM unnest(@ids::bigint[]) WITH ORDINALITY AS r (id, n),
    (SELECT set_config('synchronous_commit', 'off', true) AS v) AS sc
WHERE d.id = r.id AND d.status = 'pending';

-- name: LaneRelease :exec
-- Ends holder's lease of a lane and sets when the lane is next due: now
-- when more is owed (more), else its earliest head's next attempt (NULL:
-- nothing pending).
UPDATE notify_lane l SET holder = NULL, leased_until = NULL,
    due_at = CASE WHEN @more::boolean THEN now() ELSE (
        SELECT min(h.next_attempt_at) FROM (
            SELECT DISTINCT ON (p.subject) p.next_attempt_at FROM notify_delivery p
            WHERE p.subscription_id = l.subscription_id AND p.lane = l.lane AND p.status = 'pending'
            ORDER BY p.subject, p.id) h) END
FROM (SELECT set_config('synchronous_commit', 'off', true) AS v) AS sc
WHERE l.subscription_id = @subscription_id AND l.lane = @lane AND l.holder = @holder;

-- name: LaneQueue :many
-- The lanes that need a job now (woken by new deliveries, named by
-- subscription_ids and lanes, or due), that nobody works and that have no
-- job queued (or one queued longer ago than stale_before: lost), marked
-- queued; the caller inserts their jobs in the same transaction. A woken
-- lane is named "<subscription_id>/<lane>".
UPDATE notify_lane l SET queued_at = now()
FROM (SELECT l2.subscription_id, l2.lane FROM notify_lane l2
      WHERE (l2.due_at <= now() OR (l2.subscription_id::text || '/' || l2.lane::text) = ANY(@woken::text[]))
        AND (l2.leased_until IS NULL OR l2.leased_until < now())
        AND (l2.queued_at IS NULL OR l2.queued_at < @stale_before)
      ORDER BY l2.subscription_id, l2.lane
      FOR UPDATE OF l2 SKIP LOCKED) AS c
WHERE l.subscription_id = c.subscription_id AND l.lane = c.lane
RETURNING l.subscription_id, l.lane;

-- name: LaneSweep :execrows
-- Marks due the lanes nobody works that have a due head: deliveries no
-- sender was woken for (written by another process, or before a crash;
-- a killed sender's lease lapses).
UPDATE notify_lane l SET due_at = now()
FROM (SELECT DISTINCT x.subscription_id, x.lane FROM (
        SELECT DISTINCT ON (p.subscription_id, p.lane, p.subject) p.subscription_id, p.lane, p.next_attempt_at FROM notify_delivery p
        WHERE p.status = 'pending' ORDER BY p.subscription_id, p.lane, p.subject, p.id) x
      WHERE x.next_attempt_at <= now()) AS r
WHERE l.subscription_id = r.subscription_id AND l.lane = r.lane
  AND (l.leased_until IS NULL OR l.leased_until < now()) AND (l.due_at IS NULL OR l.due_at > now());

-- name: DeliveryList :many
SELECT d.*, e.type AS event_type FROM notify_delivery d JOIN notify_event e ON e.id = d.event_id
WHERE (sqlc.narg(subscription_id)::uuid IS NULL OR d.subscription_id = sqlc.narg(subscription_id))
  AND (sqlc.narg(status)::text IS NULL OR d.status = sqlc.narg(status))
ORDER BY d.id DESC
LIMIT @lim;

-- name: DeliveryRedrive :many
-- Makes dead deliveries pending again, with their attempts reset.
UPDATE notify_delivery SET status = 'pending', attempts = 0, last_error = '', last_status_code = 0,
    next_attempt_at = now(), updated_at = now(), batch_of = NULL
WHERE status = 'dead' AND (id = ANY(@ids::bigint[]) OR (@all_of::uuid <> '00000000-0000-0000-0000-000000000000'::uuid AND subscription_id = @all_of))
RETURNING id, subscription_id, lane;

-- name: DeliveryBacklog :one
-- The pending deliveries and the age of the oldest, in seconds.
SELECT count(*)::bigint AS pending,
    COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0)::float8 AS oldest_seconds
FROM notify_delivery WHERE status = 'pending';

-- name: AlertRaise :one
-- Fires the alert of key: a new one, or a resolved one again (a new
-- starts_at); a firing one is left as it is (fired false).
INSERT INTO notify_alert (id, key, source_key, labels, annotations)
VALUES (@id, @key, @source_key, @labels, @annotations)
ON CONFLICT (key) DO UPDATE SET status = 'firing', starts_at = now(), ends_at = NULL, labels = EXCLUDED.labels,
    annotations = EXCLUDED.annotations, updated_at = now()
    WHERE notify_alert.status = 'resolved'
RETURNING id;

-- name: AlertResolve :many
UPDATE notify_alert SET status = 'resolved', ends_at = now(), updated_at = now()
WHERE source_key = @source_key AND status = 'firing'
RETURNING id;

-- name: AlertGetByID :one
SELECT * FROM notify_alert WHERE id = @id;

-- name: AlertSent :exec
UPDATE notify_alert SET last_sent_at = now(), last_error = @last_error, updated_at = now() WHERE id = @id;

-- name: AlertList :many
SELECT * FROM notify_alert ORDER BY created_at DESC LIMIT @lim;
