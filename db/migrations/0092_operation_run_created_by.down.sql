ALTER TABLE operation_run DROP COLUMN created_by;
