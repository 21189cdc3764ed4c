-- Fewer index writes per webhook event (issue 44): the dedupe key's index
-- holds only the events that have one, and deliveries are never looked up
-- by event (no index by event_id: events are never deleted one by one).
ALTER TABLE notify_event DROP CONSTRAINT notify_event_dedupe_key_key;
CREATE UNIQUE INDEX notify_event_dedupe_key ON notify_event (dedupe_key) WHERE dedupe_key IS NOT NULL;
DROP INDEX notify_delivery_event;
