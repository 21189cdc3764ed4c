-- Two-person approval of bulk submissions (docs/change-safety.md): a task
-- of a submission over FLOW_APPROVAL_THRESHOLD waits, WAITING, for the
-- approval request approval_id; approval clears it and the task is promoted
-- as any waiting task is (conflicts, windows), rejection or expiry ends it.
ALTER TABLE task ADD COLUMN approval_id uuid;
