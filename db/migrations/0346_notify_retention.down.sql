DROP INDEX IF EXISTS notify_delivery_created_brin;
DELETE FROM notify_delivery d WHERE NOT EXISTS (SELECT 1 FROM notify_event e WHERE e.id = d.event_id);
ALTER TABLE notify_delivery ADD CONSTRAINT notify_delivery_event_id_fkey FOREIGN KEY (event_id) REFERENCES notify_event (id) ON DELETE CASCADE;
