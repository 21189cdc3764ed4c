package approval_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/approval"
	"github.com/nicoflow/flow/operations/opstest"
)

func TestParseThreshold(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want approval.Threshold
		err  bool
	}{
		{in: "10%,50", want: approval.Threshold{Percent: 10, Racks: 50}},
		{in: "5", want: approval.Threshold{Racks: 5}},
		{in: "25%", want: approval.Threshold{Percent: 25}},
		{in: "0", want: approval.Threshold{}},
		{in: "0%", err: true},
		{in: "101%", err: true},
		{in: "five", err: true},
		{in: "5,6", err: true},
	} {
		got, err := approval.ParseThreshold(tt.in)
		if tt.err {
			require.Error(t, err, tt.in)
			continue
		}
		require.NoError(t, err, tt.in)
		require.Equal(t, tt.want, got, tt.in)
		require.Equal(t, tt.in, got.String())
	}
}

// subject records what approval asked of it.
type subject struct{ released, discarded []uuid.UUID }

func (s *subject) ApprovalRecompute(context.Context, pgx.Tx, []uuid.UUID, json.RawMessage) (string, string, error) {
	return "h1", "", nil
}

func (s *subject) ApprovalRelease(_ context.Context, _ pgx.Tx, id, _ uuid.UUID, _ string) error {
	s.released = append(s.released, id)
	return nil
}

func (s *subject) ApprovalDiscard(_ context.Context, _ pgx.Tx, id uuid.UUID, _ string) error {
	s.discarded = append(s.discarded, id)
	return nil
}

// TestThresholdAndExpiry: the site share and the count each trigger; an
// expired request cannot be approved (and nothing is released), only
// rejected.
func TestThresholdAndExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	now := time.Now()
	svc := approval.NewService(approval.Config{
		Pool: pool, Threshold: approval.DefaultThreshold, Expiry: time.Hour, Now: func() time.Time { return now },
		SiteRacks: func(context.Context, db.DBTX) (int, error) { return 100, nil },
	})
	sub := &subject{}
	svc.Register("operation_run", sub)
	var id uuid.UUID
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for racks, want := range map[int]bool{10: false, 11: true, 50: true} {
			got, err := svc.Required(ctx, tx, racks)
			require.NoError(t, err)
			require.Equal(t, want, got, "%d of 100 racks", racks)
		}
		var err error
		id, err = svc.Request(ctx, tx, "operation_run", []uuid.UUID{uuid.New()}, 11, "run", "alice", "h1", json.RawMessage(`{}`), json.RawMessage(`{}`))
		return err
	}))
	now = now.Add(2 * time.Hour)
	_, err := svc.Approve(ctx, id, "h1", "bob")
	require.ErrorIs(t, err, approval.ErrExpired)
	require.Empty(t, sub.released)
	r, err := svc.Get(ctx, pool, id)
	require.NoError(t, err)
	require.Equal(t, approval.StatusExpired, r.Status)
	_, err = svc.Reject(ctx, id, "", "bob")
	require.ErrorIs(t, err, approval.ErrInvalid, "a reason is required")
	r, err = svc.Reject(ctx, id, "too late", "bob")
	require.NoError(t, err)
	require.Equal(t, approval.StatusExpired, r.Status)
	require.Len(t, sub.discarded, 1)
	_, err = svc.Approve(ctx, id, "h1", "bob")
	require.ErrorIs(t, err, approval.ErrExpired)
}

// held is a task manager whose approver holds submissions over one rack
// (one hour's expiry, on a fake clock), and alice's power-on of two racks,
// held: its tasks (ids) and its request (reqs[0]).
type held struct {
	m    *opstest.Bundle
	svc  *approval.Service
	now  *time.Time
	a    inventory.Rack
	ids  []uuid.UUID
	reqs []approval.Request
}

func heldSubmission(t *testing.T) *held {
	t.Helper()
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	h := &held{m: opstest.NewTasks(t, opstest.Config{}), now: &now}
	a, b := h.m.AddRack(t, 0), h.m.AddRack(t, 1)
	h.a = a
	h.svc = approval.NewService(approval.Config{Pool: h.m.Pool, Threshold: approval.Threshold{Racks: 1}, Expiry: time.Hour, Now: clock})
	h.m.Tasks.SetClock(clock)
	h.m.Tasks.SetApprover(h.svc)
	h.svc.Register(operations.ApprovalKindSubmission, h.m.Tasks)
	both := opstest.PowerOn(a)
	both.Targets.Racks = append(both.Targets.Racks, opstest.PowerOn(b).Targets.Racks...)
	both.SubmittedBy = "alice"
	var err error
	h.ids, err = h.m.Submit(t, both)
	require.NoError(t, err)
	require.Len(t, h.ids, 2)
	h.reqs, err = h.svc.List(context.Background(), h.m.Pool, false)
	require.NoError(t, err)
	require.Len(t, h.reqs, 1)
	return h
}

// TestSubmissionApprovalExpires: a bulk submission over the threshold
// waits for approval; a single-rack one does not; once the request
// expires (a fake clock), the next sweep ends its tasks saying so, and the
// request can no longer be approved.
func TestSubmissionApprovalExpires(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := heldSubmission(t)
	m, svc, ids, reqs, a := b.m, b.svc, b.ids, b.reqs, b.a
	require.Equal(t, operations.ApprovalKindSubmission, reqs[0].Kind)
	require.ElementsMatch(t, ids, reqs[0].SubjectIDs)
	tasks, err := m.Tasks.Get(ctx, ids)
	require.NoError(t, err)
	for _, task := range tasks {
		require.Equal(t, operations.TaskWaiting, task.Status)
		require.Contains(t, task.Message, "awaiting approval of request "+reqs[0].ID.String())
	}

	one, err := m.Submit(t, opstest.PowerOn(a))
	require.NoError(t, err)
	tasks, err = m.Tasks.Get(ctx, one)
	require.NoError(t, err)
	require.Equal(t, operations.TaskPending, tasks[0].Status, "one rack is under the threshold, and a held task blocks no unqueued work")

	*b.now = b.now.Add(time.Hour + time.Second)
	n, err := svc.ExpireDue(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	tasks, err = m.Tasks.Get(ctx, ids)
	require.NoError(t, err)
	for _, task := range tasks {
		require.Equal(t, operations.TaskTerminated, task.Status)
		require.Contains(t, task.Message, "approval request "+reqs[0].ID.String()+" expired at 2026-12-04T13:00:00Z")
	}
	got, err := svc.Get(ctx, m.Pool, reqs[0].ID)
	require.NoError(t, err)
	require.Equal(t, approval.StatusExpired, got.Status)
	require.Equal(t, "flow", got.DecidedBy)
	n, err = svc.ExpireDue(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "once")
	_, err = svc.Approve(ctx, reqs[0].ID, reqs[0].PlanHash, "bob")
	require.ErrorIs(t, err, approval.ErrExpired)
}

// TestSubmissionTasksExpireWithoutTheSweep: the tasks' own deadline (the
// request's expiry) ends them at the queue sweep too, saying why.
func TestSubmissionTasksExpireWithoutTheSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := heldSubmission(t)
	m, ids, reqs := b.m, b.ids, b.reqs
	*b.now = b.now.Add(time.Hour + time.Second)
	require.NoError(t, m.Tasks.Sweep(ctx))
	tasks, err := m.Tasks.Get(ctx, ids)
	require.NoError(t, err)
	for _, task := range tasks {
		require.Equal(t, operations.TaskTerminated, task.Status)
		require.Contains(t, task.Message, "approval request "+reqs[0].ID.String()+" was not approved in time")
	}
}
