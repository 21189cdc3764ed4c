ALTER TABLE task DROP COLUMN not_targeted;
