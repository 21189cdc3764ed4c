ALTER TABLE notify_delivery DROP COLUMN IF EXISTS batch_of;
ALTER TABLE notify_subscription DROP COLUMN IF EXISTS batch_max_bytes;
ALTER TABLE notify_subscription DROP COLUMN IF EXISTS batch_max;
