-- The identity that submitted each task (docs/security.md): the client
-- certificate's SPIFFE ID or CN, "insecure" on a cleartext server, or, for
-- a task a schedule, an operation run or an event rule fired, the identity
-- that created it. '' for tasks submitted before this column existed.
ALTER TABLE task ADD COLUMN submitted_by text NOT NULL DEFAULT '';
