-- Batched webhook delivery (issue 44, docs/notifications.md "How delivery
-- works"): a subscription's deliveries are split over 16 lanes by their
-- subject (a rack's events always in the same lane), and one River job
-- (kind notify.deliver_lane) at a time works a lane: it takes up to a
-- batch of pending deliveries in order, posts them and records the
-- outcomes in one statement. No River job per event any more.

-- notify_lane_of is the lane of a subject: stable forever (md5), so a
-- subject's deliveries never span two lanes.
CREATE FUNCTION notify_lane_of(subject text) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT (('x' || substr(md5(subject), 1, 8))::bit(32)::int & 15)::smallint $$;

-- One row per subscription and lane: who works it (a lease that lapses
-- with a killed worker), whether a job for it is queued, and when it is
-- next due without a new event (a failed attempt's backoff).
CREATE TABLE notify_lane (
    subscription_id uuid NOT NULL REFERENCES notify_subscription (id) ON DELETE CASCADE,
    lane smallint NOT NULL CHECK (lane BETWEEN 0 AND 15),
    -- The job working the lane (its River job ID) holds it until then.
    holder bigint,
    leased_until timestamptz,
    -- A job for the lane was inserted then and has not started.
    queued_at timestamptz,
    -- The lane needs a job from then on, new events or not.
    due_at timestamptz,
    PRIMARY KEY (subscription_id, lane)
);
INSERT INTO notify_lane (subscription_id, lane, due_at)
SELECT s.id, l, now() FROM notify_subscription s, generate_series(0, 15) AS l;

ALTER TABLE notify_delivery ADD COLUMN lane smallint GENERATED ALWAYS AS (notify_lane_of(subject)) STORED;
-- A lane's sender owns its deliveries: no claim per delivery.
ALTER TABLE notify_delivery DROP COLUMN claimed_until;
-- Pending deliveries by lane and subject: a lane's heads (the first
-- pending delivery of each subject) and the backlog. Replaces the index
-- by subject and the one by creation time (one index less to write per
-- delivery).
DROP INDEX notify_delivery_pending;
DROP INDEX notify_delivery_created;
CREATE INDEX notify_delivery_pending ON notify_delivery (subscription_id, lane, subject, id) WHERE status = 'pending';
