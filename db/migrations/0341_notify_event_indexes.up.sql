-- Fewer index writes per webhook event (issue 44): the dedupe key's index
-- holds only the events that have one, and deliveries are never looked up
-- by event (no index by event_id: events are never deleted one by one).
--
-- First numbered 0331, after 0340 had landed: a database migrated to 340
-- would have skipped it, so it moved here; written to apply whether or not
-- a database ran it as 0331.
ALTER TABLE notify_event DROP CONSTRAINT IF EXISTS notify_event_dedupe_key_key;
CREATE UNIQUE INDEX IF NOT EXISTS notify_event_dedupe_key ON notify_event (dedupe_key) WHERE dedupe_key IS NOT NULL;
DROP INDEX IF EXISTS notify_delivery_event;
