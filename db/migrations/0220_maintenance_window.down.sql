DROP TABLE maintenance_window_run_release;
ALTER TABLE task DROP COLUMN window_held_until, DROP COLUMN window_release;
DROP TABLE maintenance_window;
