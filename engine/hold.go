package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/engine/internal/dbsqlc"
)

// Hold is a named resource a step takes before its first call, for the
// rest of its run (docs/engine.md "Resources"). A resource with a capacity
// (SetCapacity) admits a run while what the running runs hold of it, plus
// what the runs waiting ahead want, plus Amount stays within the capacity
// (a run alone is always admitted, whatever its amount); otherwise the step
// waits: its job is snoozed (no worker is held, no attempt used, its step
// deadline and run timeout move with the wait), its progress says why, and
// it is woken when a run holding the resource ends. Runs are admitted first
// come, first served. A run takes a resource once: its later steps naming
// it go on at once. A resource without a capacity is recorded, never
// waited for.
type Hold struct {
	Resource string  `json:"resource"`
	Amount   float64 `json:"amount"`
	// Label and Unit word the wait: "waiting for <Label>: 4 of 4 <Unit> in
	// progress".
	Label string `json:"label,omitempty"`
	Unit  string `json:"unit,omitempty"`
}

// ErrInvalidHold is wrapped by the errors of a step's bad holds.
var ErrInvalidHold = errors.New("invalid hold")

// ErrInvalidCapacity is SetCapacity's error for a name or capacity it
// refuses.
var ErrInvalidCapacity = errors.New("invalid resource capacity")

// holdRecheck is how long a waiting step sleeps when nothing wakes it
// first (a release it missed: its job was still running its check).
const holdRecheck = 15 * time.Second

func checkHolds(hs []Hold) error {
	seen := map[string]bool{}
	for _, h := range hs {
		if h.Resource == "" {
			return fmt.Errorf("%w: empty resource name", ErrInvalidHold)
		}
		if seen[h.Resource] {
			return fmt.Errorf("%w: resource %q named twice", ErrInvalidHold, h.Resource)
		}
		seen[h.Resource] = true
		if h.Amount < 0 || h.Amount != h.Amount {
			return fmt.Errorf("%w: amount %v of %q", ErrInvalidHold, h.Amount, h.Resource)
		}
	}
	return nil
}

// SetCapacity sets resource name's capacity (> 0), through dbtx. Runs
// already holding it keep their holds; admissions from then on obey it.
func (e *Engine) SetCapacity(ctx context.Context, dbtx db.DBTX, name string, capacity float64) error {
	if name == "" || !(capacity > 0) {
		return fmt.Errorf("%w: %q %v", ErrInvalidCapacity, name, capacity)
	}
	return e.q.ResourceSet(ctx, dbtx, dbsqlc.ResourceSetParams{Name: name, Capacity: capacity})
}

// DeleteCapacity removes resource name's capacity: nothing waits for it
// any more (the waiting steps go on at their next check, woken here).
// It reports whether there was one.
func (e *Engine) DeleteCapacity(ctx context.Context, tx pgx.Tx, name string) (bool, error) {
	n, err := e.q.ResourceDelete(ctx, tx, name)
	if err != nil || n == 0 {
		return false, err
	}
	return true, e.wake(ctx, tx, name, 1<<20)
}

// WakeWaiters wakes the steps waiting for resource name (after its capacity
// grew, say), through tx.
func (e *Engine) WakeWaiters(ctx context.Context, tx pgx.Tx, name string) error {
	return e.wake(ctx, tx, name, 1<<20)
}

// ResourceUse is a resource's capacity (0: none) and what running runs hold
// of it (Used: the sum of their amounts; Holders: how many), with how many
// runs wait for it.
type ResourceUse struct {
	Name     string
	Capacity float64
	Used     float64
	Holders  int
	Waiting  int
}

// Resources reads the use of the named resources, in name order.
func (e *Engine) Resources(ctx context.Context, dbtx db.DBTX, names []string) ([]ResourceUse, error) {
	rows, err := e.q.ResourceUse(ctx, dbtx, names)
	if err != nil {
		return nil, err
	}
	out := make([]ResourceUse, len(rows))
	for i, r := range rows {
		out[i] = ResourceUse{Name: r.Name, Capacity: r.Capacity, Used: r.Used, Holders: int(r.Holders), Waiting: int(r.Waiting)}
	}
	return out, nil
}

// admit takes the holds of row's step for its run, or records that it
// waits. wait is the reason when it must wait ("" when admitted); extended
// reports that the step deadline moved (the caller reloads the step).
func (e *Engine) admit(ctx context.Context, row stepRow, spec *stepSpec) (wait string, extended bool, err error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	names := make([]string, len(spec.Holds))
	for i, h := range spec.Holds {
		names[i] = h.Resource
	}
	held, err := e.q.HoldHeld(ctx, e.pool, dbsqlc.HoldHeldParams{RunID: row.RunID, Names: names})
	if err != nil {
		return "", false, fmt.Errorf("read holds: %w", err)
	}
	if len(held) == len(names) {
		return "", false, nil // the run holds them all (a later step, a poll)
	}
	err = pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		wait, extended = "", false
		caps, err := e.q.ResourceLock(ctx, tx, names)
		if err != nil {
			return fmt.Errorf("lock resources: %w", err)
		}
		capacity := make(map[string]float64, len(caps))
		for _, c := range caps {
			capacity[c.Name] = c.Capacity
		}
		waits, err := e.q.WaitGet(ctx, tx, row.ID)
		if err != nil {
			return fmt.Errorf("read waits: %w", err)
		}
		// The wait so far (not yet added to the deadlines), and where this
		// step stands in the queue.
		var since, counted, now time.Time
		for _, w := range waits {
			if since.IsZero() || w.Since.Time.Before(since) {
				since = w.Since.Time
			}
			if counted.IsZero() || w.CountedUntil.Time.Before(counted) {
				counted = w.CountedUntil.Time
			}
			now = w.Now.Time
		}
		var resources []string
		var amounts []float64
		for _, h := range spec.Holds {
			if slices.Contains(held, h.Resource) {
				continue
			}
			resources, amounts = append(resources, h.Resource), append(amounts, h.Amount)
			c, ok := capacity[h.Resource]
			if !ok || wait != "" {
				continue
			}
			used, err := e.q.HoldUsed(ctx, tx, dbsqlc.HoldUsedParams{Resource: h.Resource, RunID: row.RunID})
			if err != nil {
				return fmt.Errorf("read use of %s: %w", h.Resource, err)
			}
			place := pgtype.Timestamptz{Time: since, Valid: true}
			if since.IsZero() {
				place = pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}
			}
			ahead, err := e.q.WaitAhead(ctx, tx, dbsqlc.WaitAheadParams{Resource: h.Resource, RunID: row.RunID, Since: place, StepID: row.ID})
			if err != nil {
				return fmt.Errorf("read waits for %s: %w", h.Resource, err)
			}
			alone := used.Holders == 0 && ahead.Waiters == 0
			if !alone && used.Used+ahead.Ahead+h.Amount > c+1e-9 {
				wait = waitReason(h, used.Used, c, ahead.Waiters)
			}
		}
		if len(waits) > 0 && now.After(counted) {
			ms := now.Sub(counted).Milliseconds()
			run, err := e.q.StepExtendDeadline(ctx, tx, dbsqlc.StepExtendDeadlineParams{ID: row.ID, WaitMs: ms})
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("extend step deadline: %w", err)
			} else if err == nil {
				if err := e.q.RunExtendTimeout(ctx, tx, dbsqlc.RunExtendTimeoutParams{IDs: []int64{run}, Ms: []int64{ms}}); err != nil {
					return fmt.Errorf("extend run timeout: %w", err)
				}
				extended = true
			}
		}
		if wait != "" {
			return e.q.WaitUpsert(ctx, tx, dbsqlc.WaitUpsertParams{StepID: row.ID, Resources: resources, RunID: row.RunID, Amounts: amounts})
		}
		if err := e.q.HoldInsert(ctx, tx, dbsqlc.HoldInsertParams{Resources: resources, RunID: row.RunID, Amounts: amounts}); err != nil {
			return fmt.Errorf("insert holds: %w", err)
		}
		if len(waits) > 0 {
			// Admitted after a wait: its reason goes from the report.
			b, _ := json.Marshal(Progress{})
			if _, err := e.q.StepSaveProgress(ctx, tx, dbsqlc.StepSaveProgressParams{ID: row.ID, Progress: b, ExecToken: row.ExecToken}); err != nil {
				return err
			}
			return e.q.WaitDeleteStep(ctx, tx, row.ID)
		}
		return nil
	})
	return wait, extended, err
}

func waitReason(h Hold, used, capacity float64, ahead int64) string {
	label, unit := h.Label, h.Unit
	if label == "" {
		label = "resource " + h.Resource
	}
	if unit == "" {
		unit = "units"
	}
	msg := fmt.Sprintf("waiting for %s: %s of %s %s in progress", label, num(used), num(capacity), unit)
	if ahead > 0 {
		msg += fmt.Sprintf(", %d waiting ahead", ahead)
	}
	return msg
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// waitForHolds records why row's step waits (its progress) and snoozes its
// job until it is woken or holdRecheck passes.
func (e *Engine) waitForHolds(ctx context.Context, row stepRow, why string) error {
	b, _ := json.Marshal(Progress{Message: why})
	sctx, cancel := bounded(ctx)
	defer cancel()
	if _, err := e.q.StepSaveProgress(sctx, e.pool, dbsqlc.StepSaveProgressParams{ID: row.ID, Progress: b, ExecToken: row.ExecToken}); err != nil {
		return fmt.Errorf("save progress: %w", err)
	}
	e.unclaim(ctx, row)
	return river.JobSnooze(holdRecheck)
}

// releaseHolds releases the holds and waits of ended runs through tx and
// wakes the oldest waiters of each released resource (one per run that
// held it).
func (e *Engine) releaseHolds(ctx context.Context, tx pgx.Tx, runs []int64) error {
	released, err := e.q.HoldReleaseRuns(ctx, tx, runs)
	if err != nil {
		return fmt.Errorf("release holds: %w", err)
	}
	if err := e.q.WaitDeleteRuns(ctx, tx, runs); err != nil {
		return fmt.Errorf("delete waits: %w", err)
	}
	count := map[string]int{}
	for _, r := range released {
		count[r]++
	}
	names := make([]string, 0, len(count))
	for r := range count {
		names = append(names, r)
	}
	slices.Sort(names)
	for _, r := range names {
		if err := e.wake(ctx, tx, r, count[r]); err != nil {
			return err
		}
	}
	return nil
}

// wake makes the jobs of the n oldest steps waiting for resource available
// now (a snoozed job only: a running one is checking already).
func (e *Engine) wake(ctx context.Context, tx pgx.Tx, resource string, n int) error {
	jobs, err := e.q.WaitOldestJobs(ctx, tx, dbsqlc.WaitOldestJobsParams{Resource: resource, N: int32(min(n, 1<<20))})
	if err != nil {
		return fmt.Errorf("read waiters of %s: %w", resource, err)
	}
	for _, id := range jobs {
		j, err := e.client.JobGetTx(ctx, tx, id)
		if errors.Is(err, rivertype.ErrNotFound) {
			continue
		} else if err != nil {
			return fmt.Errorf("read job %d: %w", id, err)
		}
		if j.State != rivertype.JobStateScheduled {
			continue
		}
		if _, err := e.client.JobRetryTx(ctx, tx, id); err != nil && !errors.Is(err, rivertype.ErrNotFound) {
			return fmt.Errorf("wake job %d: %w", id, err)
		}
	}
	return nil
}
