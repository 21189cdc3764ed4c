ALTER TABLE task DROP COLUMN approval_id;
