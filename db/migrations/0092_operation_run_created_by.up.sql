-- The identity that created each operation run (docs/security.md): every
-- child task the run submits records it as its submitter. '' for runs
-- created before this column existed.
ALTER TABLE operation_run ADD COLUMN created_by text NOT NULL DEFAULT '';
