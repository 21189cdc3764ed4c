-- Notifications (docs/notifications.md): webhook subscriptions, the
-- outbox of events written in the transaction of the change they report,
-- and one delivery per event and matching subscription, worked by River
-- jobs (kind notify.deliver).
CREATE TABLE notify_subscription (
    id uuid PRIMARY KEY,
    url text NOT NULL CHECK (url <> ''),
    -- The event types it receives (at least one; '*' is every type).
    event_types text[] NOT NULL CHECK (cardinality(event_types) > 0),
    -- Scope: the racks it hears of (resolved to IDs); empty: the site.
    rack_ids uuid[] NOT NULL DEFAULT '{}',
    -- The signing secret, sealed with the data key (a firmware.Envelope
    -- as JSON); never returned, never logged.
    secret jsonb NOT NULL,
    description text NOT NULL DEFAULT '',
    created_by text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now()
);

-- The outbox: one row per emitted event that some subscription matched.
-- dedupe_key makes one fact one event (a task's end is emitted once
-- however often its end hook runs).
CREATE TABLE notify_event (
    id uuid PRIMARY KEY,
    type text NOT NULL,
    -- The ordering key: "rack/<uuid>", or "site" for site-wide events.
    subject text NOT NULL,
    dedupe_key text UNIQUE,
    data jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- One delivery of an event to a subscription. Deliveries of one
-- subscription and subject go out in id order; a dead one (dead letter)
-- no longer holds the ones after it.
CREATE TABLE notify_delivery (
    id bigserial PRIMARY KEY,
    event_id uuid NOT NULL REFERENCES notify_event (id) ON DELETE CASCADE,
    subscription_id uuid NOT NULL REFERENCES notify_subscription (id) ON DELETE CASCADE,
    subject text NOT NULL,
    status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts integer NOT NULL DEFAULT 0,
    last_status_code integer NOT NULL DEFAULT 0,
    last_error text NOT NULL DEFAULT '',
    -- Not before: the backoff of the last failed attempt.
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    -- A worker sending it holds it until then (a killed worker's claim
    -- lapses).
    claimed_until timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    delivered_at timestamptz
);
CREATE INDEX notify_delivery_pending ON notify_delivery (subscription_id, subject, id) WHERE status = 'pending';
CREATE INDEX notify_delivery_event ON notify_delivery (event_id);
CREATE INDEX notify_delivery_created ON notify_delivery (created_at) WHERE status = 'pending';
CREATE INDEX notify_delivery_subscription ON notify_delivery (subscription_id, id DESC);
