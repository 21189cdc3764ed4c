ALTER TABLE task_schedule DROP COLUMN created_by;
