-- Alerts Flow sends to Alertmanager (docs/notifications.md, event rules'
-- send_alert): one row per alert key, firing until resolved. A River job
-- (kind notify.alert) posts it to every Alertmanager, re-sends it while it
-- fires and posts its resolution.
CREATE TABLE notify_alert (
    id uuid PRIMARY KEY,
    -- What makes two raises one alert (the event's source key and the
    -- action), and the source key whose end resolves it.
    key text NOT NULL UNIQUE,
    source_key text NOT NULL,
    labels jsonb NOT NULL,
    annotations jsonb NOT NULL,
    status text NOT NULL DEFAULT 'firing' CHECK (status IN ('firing', 'resolved')),
    starts_at timestamptz NOT NULL DEFAULT now(),
    ends_at timestamptz,
    last_sent_at timestamptz,
    last_error text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX notify_alert_source ON notify_alert (source_key) WHERE status = 'firing';
