-- Retention of webhook deliveries and events (issue 44,
-- docs/notifications.md "Retention"): the prune job deletes delivered
-- deliveries past FLOW_NOTIFY_DELIVERED_RETENTION and dead letters past
-- FLOW_NOTIFY_DEAD_RETENTION, walking notify_delivery by id in batches,
-- and with them each event whose last delivery went. Pending deliveries
-- are never pruned, and an event is never deleted while a delivery of it
-- is left.
--
-- No foreign key from a delivery to its event: its ON DELETE CASCADE
-- looked deliveries up by event for every event deleted, and there is no
-- index by event (0341 dropped it: one index write less per delivery);
-- its check also read and share-locked the event for every delivery
-- written. A delivery is only ever written in the statement that writes
-- its event (EventInsert), and the pruner deletes an event only once no
-- delivery of it is left, so the key held nothing the code does not.
ALTER TABLE notify_delivery DROP CONSTRAINT IF EXISTS notify_delivery_event_id_fkey;

-- A delivery's created_at is its event's (the same statement, so the same
-- transaction's now()): "is any delivery of this event left" reads the
-- block ranges of that time through this index, a few pages, never the
-- table. A BRIN costs next to nothing per row written.
CREATE INDEX IF NOT EXISTS notify_delivery_created_brin ON notify_delivery USING brin (created_at) WITH (pages_per_range = 16, autosummarize = on);
