-- Two-person approval (docs/change-safety.md "Two-person approval"): a run
-- or a bulk submission over FLOW_APPROVAL_THRESHOLD waits, with its frozen
-- plan, until a second identity approves the hash of that plan.
ALTER TABLE operation_run DROP CONSTRAINT operation_run_status_check;
ALTER TABLE operation_run ADD CONSTRAINT operation_run_status_check CHECK (status IN
    ('pending_approval', 'pending', 'running', 'paused', 'completed', 'completed_with_failures', 'cancelled', 'failed'));

CREATE TABLE approval_request (
    id           uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    -- kind says what waits: an operation run (subject_ids: the run) or a
    -- bulk submission (subject_ids: its WAITING tasks).
    kind         text        NOT NULL CHECK (kind IN ('operation_run', 'submission')),
    subject_ids  uuid[]      NOT NULL,
    summary      text        NOT NULL,
    racks        int         NOT NULL,
    plan_hash    text        NOT NULL,
    -- plan is the frozen plan the hash is of, as shown to the approver.
    plan         jsonb       NOT NULL,
    requested_by text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    status       text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'approved', 'rejected', 'expired')),
    decided_by   text        NOT NULL DEFAULT '',
    decided_at   timestamptz,
    reason       text        NOT NULL DEFAULT ''
);

CREATE INDEX approval_request_created ON approval_request (created_at DESC, id DESC);
CREATE INDEX approval_request_subjects ON approval_request USING gin (subject_ids) WHERE status = 'pending';
