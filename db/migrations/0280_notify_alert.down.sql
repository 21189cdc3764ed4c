DROP TABLE notify_alert;
