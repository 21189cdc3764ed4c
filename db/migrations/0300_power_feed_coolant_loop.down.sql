DROP TABLE power_budget;
DROP INDEX rack_coolant_loop_idx;
DROP INDEX rack_power_feed_idx;
ALTER TABLE rack DROP COLUMN coolant_loop, DROP COLUMN power_feed;
