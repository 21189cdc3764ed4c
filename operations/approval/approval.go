// Package approval is two-person approval (docs/change-safety.md
// "Two-person approval"): work over a threshold of the site's racks waits,
// with its frozen plan, until a second identity approves the hash of that
// plan. The work's owner (operation runs) asks it through the small
// interface it declares (rollout.Approver) and registers itself as a
// Subject to be recomputed, released or discarded; this package imports
// none of them.
package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/operations/approval/internal/dbsqlc"
)

// Errors of approvals; the handler maps ErrNotFound to NotFound,
// ErrInvalid to InvalidArgument and the others to FailedPrecondition.
var (
	ErrNotFound     = errors.New("approval request not found")
	ErrInvalid      = errors.New("invalid approval request")
	ErrDecided      = errors.New("approval request already decided")
	ErrExpired      = errors.New("approval request expired")
	ErrOwnRequest   = errors.New("the requester cannot approve their own request")
	ErrHashMismatch = errors.New("plan hash does not match the request")
	ErrStale        = errors.New("the plan changed since it was requested")
)

// Statuses of a request.
const (
	StatusPending  = "pending"
	StatusApproved = "approved"
	StatusRejected = "rejected"
	StatusExpired  = "expired"
)

// DefaultExpiry is how long a request waits for its approval.
const DefaultExpiry = 24 * time.Hour

// Threshold is when work needs approval: more than Percent % of the site's
// racks, or more than Racks racks (a zero part never triggers; both zero:
// approvals are off).
type Threshold struct {
	Percent int
	Racks   int
}

// DefaultThreshold is "10%,50".
var DefaultThreshold = Threshold{Percent: 10, Racks: 50}

// Off reports whether the threshold never triggers.
func (t Threshold) Off() bool { return t.Percent <= 0 && t.Racks <= 0 }

// String is the setting's form: "10%,50", "5", "0".
func (t Threshold) String() string {
	var parts []string
	if t.Percent > 0 {
		parts = append(parts, strconv.Itoa(t.Percent)+"%")
	}
	if t.Racks > 0 {
		parts = append(parts, strconv.Itoa(t.Racks))
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, ",")
}

// ParseThreshold reads FLOW_APPROVAL_THRESHOLD: "0" (off), or one or two
// comma-separated limits, a percentage of the site's racks ("10%", 1-100)
// and a rack count ("50").
func ParseThreshold(s string) (Threshold, error) {
	var t Threshold
	if strings.TrimSpace(s) == "0" {
		return t, nil
	}
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if v, ok := strings.CutSuffix(p, "%"); ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 100 || t.Percent != 0 {
				return t, fmt.Errorf("%q: a percentage is 1%%-100%%, given once", p)
			}
			t.Percent = n
			continue
		}
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || t.Racks != 0 {
			return t, fmt.Errorf("%q: want 0 (off), a rack count (50) and/or a percentage of the site's racks (10%%), such as 10%%,50", p)
		}
		t.Racks = n
	}
	return t, nil
}

// Subject is what waits for approval (an operation run): approval asks it
// to recompute its plan, to start once approved, and to withdraw once
// rejected. Each method works through tx.
type Subject interface {
	// ApprovalRecompute plans the request's subjects (ids) again from
	// input, answering the new plan hash and what changed against the
	// frozen plan ("" if nothing).
	ApprovalRecompute(ctx context.Context, tx pgx.Tx, ids []uuid.UUID, input json.RawMessage) (hash, changes string, err error)
	// ApprovalRelease starts subject id, approved as request approvalID
	// by by; ApprovalDiscard withdraws it (rejected or expired) saying
	// why.
	ApprovalRelease(ctx context.Context, tx pgx.Tx, id, approvalID uuid.UUID, by string) error
	ApprovalDiscard(ctx context.Context, tx pgx.Tx, id uuid.UUID, why string) error
}

// Request is an approval request.
type Request struct {
	ID          uuid.UUID
	Kind        string
	SubjectIDs  []uuid.UUID
	Summary     string
	Racks       int
	PlanHash    string
	Plan        json.RawMessage
	RequestedBy string
	CreatedAt   time.Time
	ExpiresAt   time.Time
	Status      string // an expired pending request reads StatusExpired
	DecidedBy   string
	DecidedAt   *time.Time
	Reason      string
}

// Config holds what Service needs.
type Config struct {
	Pool      *pgxpool.Pool
	Threshold Threshold
	Expiry    time.Duration // ≤ 0: DefaultExpiry
	// SiteRacks counts the site's live racks (for a percentage threshold).
	SiteRacks func(ctx context.Context, dbtx db.DBTX) (int, error)
	Logger    *slog.Logger
	Now       func() time.Time // nil: time.Now
	// OnChange, if set, hears of each request when it is made and when it
	// is decided (approved, rejected, expired), in the transaction that
	// records it (app emits flow.approval.requested and .decided).
	OnChange ChangeFunc
}

// ChangeFunc is told of request r, as it now is, through tx.
type ChangeFunc func(ctx context.Context, tx pgx.Tx, r Request) error

// changed tells Config.OnChange of request id, read back through tx (its
// decision's time is the database's).
func (s *Service) changed(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
	if s.cfg.OnChange == nil {
		return nil
	}
	row, err := s.q.ApprovalGetByID(ctx, tx, id)
	if err != nil {
		return fmt.Errorf("read approval request %s: %w", id, err)
	}
	return s.cfg.OnChange(ctx, tx, s.fromRow(row))
}

// Service records and decides approval requests.
type Service struct {
	cfg      Config
	q        *dbsqlc.Queries
	subjects map[string]Subject
}

// NewService returns an approval service; Register each kind's Subject.
func NewService(cfg Config) *Service {
	if cfg.Expiry <= 0 {
		cfg.Expiry = DefaultExpiry
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Service{cfg: cfg, q: dbsqlc.New(), subjects: map[string]Subject{}}
}

// Expiry is how long a request waits for its decision.
func (s *Service) Expiry() time.Duration { return s.cfg.Expiry }

// Register makes sub the subject of requests of kind.
func (s *Service) Register(kind string, sub Subject) { s.subjects[kind] = sub }

// Required reports whether work over racks racks needs approval.
func (s *Service) Required(ctx context.Context, tx pgx.Tx, racks int) (bool, error) {
	t := s.cfg.Threshold
	if t.Off() {
		return false, nil
	}
	if t.Racks > 0 && racks > t.Racks {
		return true, nil
	}
	if t.Percent > 0 && s.cfg.SiteRacks != nil {
		site, err := s.cfg.SiteRacks(ctx, tx)
		if err != nil {
			return false, fmt.Errorf("count the site's racks: %w", err)
		}
		return racks*100 > t.Percent*site, nil
	}
	return false, nil
}

// Request records, through tx, a pending request that subjects (of kind)
// wait on, and logs it. view is the plan shown to approvers, hash its
// plan hash, input what the subject recomputes it from.
func (s *Service) Request(ctx context.Context, tx pgx.Tx, kind string, subjects []uuid.UUID, racks int, summary, requestedBy, hash string, view, input json.RawMessage) (uuid.UUID, error) {
	row, err := s.q.ApprovalInsert(ctx, tx, dbsqlc.ApprovalInsertParams{
		Kind: kind, SubjectIds: subjects, Summary: summary, Racks: int32(racks), PlanHash: hash, Plan: view, Input: input,
		RequestedBy: requestedBy, ExpiresAt: s.cfg.Now().Add(s.cfg.Expiry),
	})
	if err != nil {
		return uuid.Nil, fmt.Errorf("insert approval request: %w", err)
	}
	if s.cfg.OnChange != nil {
		// The inserted row is the request as it is: no read back.
		if err := s.cfg.OnChange(ctx, tx, s.fromRow(row)); err != nil {
			return uuid.Nil, err
		}
	}
	s.cfg.Logger.InfoContext(ctx, "approval requested", "approval_id", row.ID, "kind", kind, "identity", requestedBy,
		"racks", racks, "plan_hash", hash, "summary", summary, "expires_at", row.ExpiresAt)
	return row.ID, nil
}

func (s *Service) fromRow(row dbsqlc.ApprovalRequest) Request {
	r := Request{ID: row.ID, Kind: row.Kind, SubjectIDs: row.SubjectIds, Summary: row.Summary, Racks: int(row.Racks),
		PlanHash: row.PlanHash, Plan: row.Plan, RequestedBy: row.RequestedBy, CreatedAt: row.CreatedAt, ExpiresAt: row.ExpiresAt,
		Status: row.Status, DecidedBy: row.DecidedBy, DecidedAt: row.DecidedAt, Reason: row.Reason}
	if r.Status == StatusPending && !s.cfg.Now().Before(r.ExpiresAt) {
		r.Status = StatusExpired
	}
	return r
}

// Get returns request id, or ErrNotFound.
func (s *Service) Get(ctx context.Context, dbtx db.DBTX, id uuid.UUID) (Request, error) {
	row, err := s.q.ApprovalGetByID(ctx, dbtx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return Request{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	} else if err != nil {
		return Request{}, fmt.Errorf("get approval request %s: %w", id, err)
	}
	return s.fromRow(row), nil
}

// List returns the pending requests (every request when all), newest
// first, at most 500.
func (s *Service) List(ctx context.Context, dbtx db.DBTX, all bool) ([]Request, error) {
	rows, err := s.q.ApprovalList(ctx, dbtx, all)
	if err != nil {
		return nil, fmt.Errorf("list approval requests: %w", err)
	}
	out := make([]Request, 0, len(rows))
	for _, row := range rows {
		out = append(out, s.fromRow(row))
	}
	return out, nil
}

// decide locks request id in a new transaction and runs fn on it while it
// is pending and unexpired; the request is then decided as fn says.
func (s *Service) decide(ctx context.Context, id uuid.UUID, by, verb string, fn func(tx pgx.Tx, r Request, sub Subject) (status, reason string, err error)) (Request, error) {
	err := db.BeginFunc(ctx, s.cfg.Pool, func(ctx context.Context, tx pgx.Tx) error {
		row, err := s.q.ApprovalLock(ctx, tx, id)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: %s", ErrNotFound, id)
		} else if err != nil {
			return fmt.Errorf("lock approval request %s: %w", id, err)
		}
		r := s.fromRow(row)
		switch r.Status {
		case StatusPending:
		case StatusExpired:
			return fmt.Errorf("%w: request %s expired at %s; create the work again", ErrExpired, id, r.ExpiresAt.UTC().Format(time.RFC3339))
		default:
			return fmt.Errorf("%w: request %s was %s by %s at %s", ErrDecided, id, r.Status, r.DecidedBy, r.DecidedAt.UTC().Format(time.RFC3339))
		}
		sub := s.subjects[r.Kind]
		if sub == nil {
			return fmt.Errorf("approval request %s: no subject registered for kind %q", id, r.Kind)
		}
		status, reason, err := fn(tx, r, sub)
		if err != nil {
			return err
		}
		if err := s.q.ApprovalDecide(ctx, tx, dbsqlc.ApprovalDecideParams{ID: id, Status: status, DecidedBy: by, Reason: reason}); err != nil {
			return err
		}
		return s.changed(ctx, tx, id)
	})
	if err != nil {
		s.cfg.Logger.WarnContext(ctx, "approval refused", "approval_id", id, "identity", by, "action", verb, "error", err.Error())
		return Request{}, err
	}
	r, err := s.Get(ctx, s.cfg.Pool, id)
	if err == nil {
		s.cfg.Logger.InfoContext(ctx, "approval decided", "approval_id", id, "identity", by, "action", verb, "status", r.Status,
			"requested_by", r.RequestedBy, "plan_hash", r.PlanHash, "reason", r.Reason)
	}
	return r, err
}

// Approve approves request id as identity by, who saw the plan of hash:
// the plan is recomputed and the subjects start, in one transaction.
// Errors (nothing changes): ErrNotFound, ErrExpired, ErrDecided,
// ErrOwnRequest, ErrHashMismatch (hash is not the request's), ErrStale
// (the site changed the plan since; the message names what changed), or
// the subject's error.
func (s *Service) Approve(ctx context.Context, id uuid.UUID, hash, by string) (Request, error) {
	hash = strings.TrimSpace(hash)
	if hash == "" {
		return Request{}, fmt.Errorf("%w: plan_hash: the hash of the plan you approve is required (flow approval show %s)", ErrInvalid, id)
	}
	return s.decide(ctx, id, by, "approve", func(tx pgx.Tx, r Request, sub Subject) (string, string, error) {
		if by == r.RequestedBy {
			return "", "", fmt.Errorf("%w: %s requested %s; a second identity with the operator or admin role approves it", ErrOwnRequest, by, id)
		}
		if hash != r.PlanHash {
			return "", "", fmt.Errorf("%w: %s is not the plan hash of request %s (%s): re-read its plan with flow approval show %s", ErrHashMismatch, hash, id, r.PlanHash, id)
		}
		input, err := s.q.ApprovalGetByID(ctx, tx, id)
		if err != nil {
			return "", "", err
		}
		now, changes, err := sub.ApprovalRecompute(ctx, tx, r.SubjectIDs, input.Input)
		if err != nil {
			return "", "", fmt.Errorf("%w: %v", ErrStale, err)
		}
		if now != r.PlanHash {
			if changes == "" {
				changes = "the work's configuration plans differently"
			}
			return "", "", fmt.Errorf("%w: request %s's plan is now %s, not %s: %s; reject it and create the work again", ErrStale, id, now, r.PlanHash, changes)
		}
		for _, subj := range r.SubjectIDs {
			if err := sub.ApprovalRelease(ctx, tx, subj, id, by); err != nil {
				return "", "", err
			}
		}
		return StatusApproved, "", nil
	})
}

// ExpireDue withdraws the work of every pending request past its expiry
// (a run is cancelled, a submission's tasks end), each in its own
// transaction, and records the request expired; it returns how many. The
// leader's operation-run sweep calls it (every 30 s).
func (s *Service) ExpireDue(ctx context.Context) (int, error) {
	ids, err := s.q.ApprovalDue(ctx, s.cfg.Pool, s.cfg.Now())
	if err != nil {
		return 0, fmt.Errorf("list expired approval requests: %w", err)
	}
	n := 0
	for _, id := range ids {
		expired := false
		err := db.BeginFunc(ctx, s.cfg.Pool, func(ctx context.Context, tx pgx.Tx) error {
			row, err := s.q.ApprovalLock(ctx, tx, id)
			if err != nil {
				return err
			}
			r := s.fromRow(row)
			if r.Status != StatusExpired {
				return nil // decided meanwhile
			}
			if sub := s.subjects[r.Kind]; sub != nil {
				why := fmt.Sprintf("approval request %s expired at %s before a second identity approved it", id, r.ExpiresAt.UTC().Format(time.RFC3339))
				for _, subj := range r.SubjectIDs {
					if err := sub.ApprovalDiscard(ctx, tx, subj, why); err != nil {
						return err
					}
				}
			}
			expired = true
			if err := s.q.ApprovalDecide(ctx, tx, dbsqlc.ApprovalDecideParams{ID: id, Status: StatusExpired, DecidedBy: "flow", Reason: "expired"}); err != nil {
				return err
			}
			return s.changed(ctx, tx, id)
		})
		if err != nil {
			return n, fmt.Errorf("expire approval request %s: %w", id, err)
		}
		if expired {
			n++
			s.cfg.Logger.InfoContext(ctx, "approval expired", "approval_id", id)
		}
	}
	return n, nil
}

// Reject rejects request id as identity by with reason (required): its
// subjects are withdrawn (a run is cancelled). The requester may reject
// (withdraw) their own; an expired request may be rejected too.
func (s *Service) Reject(ctx context.Context, id uuid.UUID, reason, by string) (Request, error) {
	reason = strings.TrimSpace(reason)
	if reason == "" {
		return Request{}, fmt.Errorf("%w: reason: say why it is rejected", ErrInvalid)
	}
	expiredOK := func(tx pgx.Tx, r Request, sub Subject) (string, string, error) {
		for _, subj := range r.SubjectIDs {
			if err := sub.ApprovalDiscard(ctx, tx, subj, fmt.Sprintf("approval request %s rejected by %s: %s", id, by, reason)); err != nil {
				return "", "", err
			}
		}
		return StatusRejected, reason, nil
	}
	r, err := s.Get(ctx, s.cfg.Pool, id)
	if err == nil && r.Status == StatusExpired {
		// An expired request is withdrawn all the same.
		err = db.BeginFunc(ctx, s.cfg.Pool, func(ctx context.Context, tx pgx.Tx) error {
			if sub := s.subjects[r.Kind]; sub != nil {
				if _, _, err := expiredOK(tx, r, sub); err != nil {
					return err
				}
			}
			if err := s.q.ApprovalDecide(ctx, tx, dbsqlc.ApprovalDecideParams{ID: id, Status: StatusExpired, DecidedBy: by, Reason: reason}); err != nil {
				return err
			}
			return s.changed(ctx, tx, id)
		})
		if err != nil {
			return Request{}, err
		}
		return s.Get(ctx, s.cfg.Pool, id)
	}
	return s.decide(ctx, id, by, "reject", expiredOK)
}
