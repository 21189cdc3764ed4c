CREATE INDEX notify_delivery_event ON notify_delivery (event_id);
DROP INDEX notify_event_dedupe_key;
ALTER TABLE notify_event ADD CONSTRAINT notify_event_dedupe_key_key UNIQUE (dedupe_key);
