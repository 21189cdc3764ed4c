ALTER TABLE task DROP COLUMN submitted_by;
