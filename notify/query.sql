-- name: SubscriptionInsert :one
INSERT INTO notify_subscription (id, url, event_types, rack_ids, secret, description, created_by)
VALUES (@id, @url, @event_types, @rack_ids, @secret, @description, @created_by)
RETURNING *;

-- name: SubscriptionGetByID :one
SELECT * FROM notify_subscription WHERE id = @id;

-- name: SubscriptionList :many
SELECT * FROM notify_subscription ORDER BY created_at, id;

-- name: SubscriptionDelete :execrows
DELETE FROM notify_subscription WHERE id = @id;

-- name: EventInsert :many
-- Writes an event and its deliveries to subscription_ids (in that order),
-- one statement: no rows when dedupe_key was seen (nothing written).
WITH e AS (
    INSERT INTO notify_event (id, type, subject, dedupe_key, data)
    VALUES (@id, @type, @subject, sqlc.narg(dedupe_key), @data)
    ON CONFLICT (dedupe_key) DO NOTHING
    RETURNING id, subject
)
INSERT INTO notify_delivery (event_id, subscription_id, subject)
SELECT e.id, s.id, e.subject FROM e, unnest(@subscription_ids::uuid[]) WITH ORDINALITY AS s (id, n)
ORDER BY s.n
RETURNING id;

-- name: DeliveryClaim :one
-- Claims a pending, due delivery that no earlier pending delivery of its
-- subscription and subject holds back, until claimed_until, and returns
-- with it what sending needs: its subscription's URL and sealed secret,
-- and its event.
WITH c AS (
    UPDATE notify_delivery d SET claimed_until = @claimed_until, updated_at = now()
    WHERE d.id = @id AND d.status = 'pending' AND d.next_attempt_at <= now()
      AND (d.claimed_until IS NULL OR d.claimed_until < now())
      AND NOT EXISTS (SELECT 1 FROM notify_delivery e
          WHERE e.subscription_id = d.subscription_id AND e.subject = d.subject AND e.status = 'pending' AND e.id < d.id)
    RETURNING d.id, d.event_id, d.subscription_id, d.subject, d.attempts
)
SELECT c.id, c.event_id, c.subscription_id, c.subject, c.attempts, s.url, s.secret,
    ev.type AS event_type, ev.data AS event_data, ev.created_at AS event_created_at
FROM c JOIN notify_subscription s ON s.id = c.subscription_id JOIN notify_event ev ON ev.id = c.event_id;

-- name: DeliveryGetByID :one
SELECT * FROM notify_delivery WHERE id = @id;

-- name: DeliveryDelivered :one
-- Records a delivery's success and returns the next pending delivery of
-- its subscription and subject (0: none), one statement.
WITH done AS (
    UPDATE notify_delivery u SET status = 'delivered', attempts = u.attempts + 1, last_status_code = @last_status_code,
        last_error = '', claimed_until = NULL, delivered_at = now(), updated_at = now()
    WHERE u.id = @id AND u.status = 'pending'
    RETURNING u.id, u.subscription_id, u.subject
)
SELECT COALESCE((SELECT n.id FROM notify_delivery n, done
    WHERE n.subscription_id = done.subscription_id AND n.subject = done.subject AND n.status = 'pending' AND n.id > done.id
    ORDER BY n.id LIMIT 1), 0)::bigint AS next_id;

-- name: DeliveryFailed :one
-- Records a failed attempt: dead when dead is set, else pending again from
-- next_attempt_at.
UPDATE notify_delivery SET attempts = attempts + 1, last_status_code = @last_status_code, last_error = @last_error,
    status = CASE WHEN @dead::boolean THEN 'dead' ELSE 'pending' END,
    next_attempt_at = @next_attempt_at, claimed_until = NULL, updated_at = now()
WHERE id = @id AND status = 'pending'
RETURNING status;

-- name: DeliveryList :many
SELECT d.*, e.type AS event_type FROM notify_delivery d JOIN notify_event e ON e.id = d.event_id
WHERE (sqlc.narg(subscription_id)::uuid IS NULL OR d.subscription_id = sqlc.narg(subscription_id))
  AND (sqlc.narg(status)::text IS NULL OR d.status = sqlc.narg(status))
ORDER BY d.id DESC
LIMIT @lim;

-- name: DeliveryRedrive :many
-- Makes dead deliveries pending again, with their attempts reset.
UPDATE notify_delivery SET status = 'pending', attempts = 0, last_error = '', last_status_code = 0,
    next_attempt_at = now(), claimed_until = NULL, updated_at = now()
WHERE status = 'dead' AND (id = ANY(@ids::bigint[]) OR (@all_of::uuid <> '00000000-0000-0000-0000-000000000000'::uuid AND subscription_id = @all_of))
RETURNING id;

-- name: DeliveryBacklog :one
-- The pending deliveries and the age of the oldest, in seconds.
SELECT count(*)::bigint AS pending,
    COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0)::float8 AS oldest_seconds
FROM notify_delivery WHERE status = 'pending';

-- name: DeliveryStale :many
-- Pending deliveries nobody works: claimed by a sender whose claim lapsed
-- (it died sending: a live sender records its attempt before then), or
-- heads of their subject due since before @before and unclaimed (their
-- job died before it claimed).
SELECT d.id FROM notify_delivery d
WHERE d.status = 'pending' AND (
    (d.claimed_until IS NOT NULL AND d.claimed_until < now())
    OR (d.claimed_until IS NULL AND d.next_attempt_at < @before AND NOT EXISTS (SELECT 1 FROM notify_delivery e
        WHERE e.subscription_id = d.subscription_id AND e.subject = d.subject AND e.status = 'pending' AND e.id < d.id)))
ORDER BY d.id LIMIT @lim;

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

-- name: DeliveryHeadNextAttempt :one
-- When the oldest pending delivery before @id of its subscription and
-- subject (the one holding it back) is next tried.
SELECT next_attempt_at FROM notify_delivery
WHERE subscription_id = @subscription_id AND subject = @subject AND status = 'pending' AND id < @id
ORDER BY id LIMIT 1;
