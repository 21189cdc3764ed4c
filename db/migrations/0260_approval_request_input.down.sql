ALTER TABLE approval_request DROP COLUMN input;
