DROP TABLE approval_request;
UPDATE operation_run SET status = 'cancelled', status_message = 'cancelled: approvals removed' WHERE status = 'pending_approval';
ALTER TABLE operation_run DROP CONSTRAINT operation_run_status_check;
ALTER TABLE operation_run ADD CONSTRAINT operation_run_status_check CHECK (status IN
    ('pending', 'running', 'paused', 'completed', 'completed_with_failures', 'cancelled', 'failed'));
