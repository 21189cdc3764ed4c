DROP TABLE notify_delivery;
DROP TABLE notify_event;
DROP TABLE notify_subscription;
