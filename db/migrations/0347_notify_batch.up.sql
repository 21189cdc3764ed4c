-- Batched webhook delivery (issue 44, docs/notifications.md "Batched
-- delivery"): a subscription may ask for CloudEvents JSON batches (one
-- request holds up to batch_max events and batch_max_bytes of body; 0:
-- one event per request). A batch that fails is retried as a unit: its
-- deliveries keep the first delivery ID of that request (batch_of) until
-- it succeeds or they die, and the retry sends exactly them together.
ALTER TABLE notify_subscription ADD COLUMN IF NOT EXISTS batch_max integer NOT NULL DEFAULT 0;
ALTER TABLE notify_subscription ADD COLUMN IF NOT EXISTS batch_max_bytes integer NOT NULL DEFAULT 0;
ALTER TABLE notify_delivery ADD COLUMN IF NOT EXISTS batch_of bigint;
