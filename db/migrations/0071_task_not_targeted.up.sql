-- The components of a task's racks that its rule drives no step for
-- (ToR switches, UMS, CDU under the built-in rules): left out of the task
-- and named in its report, with the reason.
ALTER TABLE task ADD COLUMN not_targeted jsonb NOT NULL DEFAULT '[]';
