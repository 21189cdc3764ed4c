DROP INDEX notify_delivery_pending;
CREATE INDEX notify_delivery_pending ON notify_delivery (subscription_id, subject, id) WHERE status = 'pending';
CREATE INDEX notify_delivery_created ON notify_delivery (created_at) WHERE status = 'pending';
ALTER TABLE notify_delivery ADD COLUMN claimed_until timestamptz;
ALTER TABLE notify_delivery DROP COLUMN lane;
DROP TABLE notify_lane;
DROP FUNCTION notify_lane_of(text);
