-- The identity that created each task schedule (docs/security.md): every
-- task the schedule fires records it as its submitter. '' for schedules
-- created before this column existed.
ALTER TABLE task_schedule ADD COLUMN created_by text NOT NULL DEFAULT '';
