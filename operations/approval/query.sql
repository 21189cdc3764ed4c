-- name: ApprovalInsert :one
INSERT INTO approval_request (kind, subject_ids, summary, racks, plan_hash, plan, input, requested_by, expires_at)
VALUES (@kind, @subject_ids, @summary, @racks, @plan_hash, @plan, @input, @requested_by, @expires_at)
RETURNING *;

-- name: ApprovalGetByID :one
SELECT * FROM approval_request WHERE id = @id;

-- name: ApprovalLock :one
SELECT * FROM approval_request WHERE id = @id FOR UPDATE;

-- name: ApprovalList :many
-- Requests newest first: pending ones only unless include_decided.
SELECT * FROM approval_request WHERE @include_decided::boolean OR status = 'pending'
ORDER BY created_at DESC, id DESC LIMIT 500;

-- name: ApprovalDecide :exec
UPDATE approval_request SET status = @status, decided_by = @decided_by, decided_at = now(), reason = @reason
WHERE id = @id;

-- name: ApprovalDue :many
-- ApprovalDue lists the pending requests past their expiry, oldest first.
SELECT id FROM approval_request
WHERE status = 'pending' AND expires_at <= @now
ORDER BY expires_at
LIMIT 100;
