package operations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/nicoflow/flow/operations/ruledef"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/engine"
	"github.com/nicoflow/flow/operations/internal/dbsqlc"
)

// Leak safety (docs/event-rules.md "What happens on a leak"): a leak
// response pre-empts the work on the components it covers, and nothing
// energises a component whose leak is open.

// ErrLeakOpen means the request would energise a component whose coolant
// leak is open (NICo Core still reports it, and no admin override).
var ErrLeakOpen = errors.New("component has an open coolant leak")

// ErrRackIsolated means the request would energise a rack that an
// EnergiseGuard refuses (a rack isolated after a severe or critical leak,
// or on a coolant loop with one); it matches ErrLeakOpen too, so every
// path maps it as a leak refusal (FailedPrecondition).
var ErrRackIsolated error = isolatedError{}

type isolatedError struct{}

func (isolatedError) Error() string        { return "rack is isolated after a severe coolant leak" }
func (isolatedError) Is(target error) bool { return target == ErrLeakOpen }

// EnergiseGuard refuses energising whole racks, beyond their components'
// own leaks (operations/isolation implements it; app sets it).
type EnergiseGuard interface {
	// Refusal returns why an energising operation code may not run on rack
	// rackID now ("" when it may), reading through dbtx only.
	Refusal(ctx context.Context, dbtx db.DBTX, rackID uuid.UUID, code OperationCode) (string, error)
}

// SetEnergiseGuard makes every later submission and promotion that would
// energise a rack ask g (nil: none). Call it before serving.
func (t *Tasks) SetEnergiseGuard(g EnergiseGuard) { t.rackGuard = g }

// rackRefusal asks the guard about rack (none for leak responses and
// operations that energise nothing).
func (t *Tasks) rackRefusal(ctx context.Context, dbtx db.DBTX, rack uuid.UUID, code OperationCode, energises bool) (string, error) {
	if t.rackGuard == nil || !energises {
		return "", nil
	}
	return t.rackGuard.Refusal(ctx, dbtx, rack, code)
}

// LeakTrigger marks a task as a leak response (Payload.Leak): the leak
// event it answers and when the leak was first observed (Unix
// nanoseconds), for the leak-response metrics.
type LeakTrigger struct {
	EventID    string `json:"event_id"`
	ObservedAt int64  `json:"observed_at"`
}

// energisingCodes are the operation codes that put power on a component.
var energisingCodes = map[OperationCode]bool{
	CodePowerOn: true, CodeForcePowerOn: true, CodeRestart: true, CodeForceRestart: true,
	CodeWarmReset: true, CodeColdReset: true, CodeBringUp: true,
}

// Energises reports whether an operation of type t, code code under rule
// def may put power on its components: power on, restarts and resets
// (an AC cycle is a restart), bring-up, every firmware operation (a
// firmware step may power the tray on or reset it), and any rule whose
// PowerControl step names an energising operation.
func Energises(t OperationType, code OperationCode, def ruledef.Definition) bool {
	if energisingCodes[code] || t == OperationTypeBringUp || t == OperationTypeFirmwareControl {
		return true
	}
	for _, s := range def.Steps {
		for _, a := range s.Actions() {
			if a.Name != ruledef.ActionPowerControl {
				continue
			}
			if pp, _ := a.PowerControlParams(); energisingCodes[pp.Operation] {
				return true
			}
		}
	}
	return false
}

// checkLeaks refuses plan p of req when it would energise a targeted
// component with an open, not overridden leak, naming the component and
// the leak.
func (t *Tasks) checkLeaks(ctx context.Context, tx pgx.Tx, req Request, p rackPlan) error {
	if req.preview {
		return nil // a preview lists the leaks per rack instead (Preview)
	}
	why, err := t.rackRefusal(ctx, tx, p.rack.ID, req.Code, req.Payload.Leak == nil && Energises(req.Type, req.Code, p.rule.Rule.Definition))
	if err != nil {
		return err
	} else if why != "" {
		return fmt.Errorf("%w: rack %s: %s would energise it: %s", ErrRackIsolated, rackLabel(p.rack), req.Code, why)
	}
	refused, err := t.leaksHeld(ctx, tx, req, p)
	if err != nil || len(refused) == 0 {
		return err
	}
	return fmt.Errorf("%w: rack %s: %s would energise %s; it stays off until NICo Core stops reporting the leak (or `flow leak override COMPONENT --reason ...`)",
		ErrLeakOpen, rackLabel(p.rack), req.Code, strings.Join(refused, ", "))
}

// leaksHeld returns the open, not overridden leaks (sorted) of the
// components plan p of req would energise.
func (t *Tasks) leaksHeld(ctx context.Context, tx pgx.Tx, req Request, p rackPlan) ([]string, error) {
	if req.Payload.Leak != nil || len(p.ids) == 0 || !Energises(req.Type, req.Code, p.rule.Rule.Definition) {
		return nil, nil
	}
	leaks, err := t.inv.OpenLeaks(ctx, tx, p.ids)
	if err != nil {
		return nil, err
	}
	var refused []string
	for _, l := range leaks {
		if !l.Overridden() {
			refused = append(refused, l.String())
		}
	}
	slices.Sort(refused)
	return refused, nil
}

// Preempt terminates, through tx, every unfinished task on rack rackID
// that covers one of components (waiting ones end at once, pending and
// running ones have their runs terminated, running calls see their context
// cancelled), except other leak responses, with reason as their message
// (their report says it). It returns the tasks it terminated. Call it
// before submitting the leak response in the same transaction; the
// response itself is then admitted whatever the rack runs
// (Request.Preempt).
func (t *Tasks) Preempt(ctx context.Context, tx pgx.Tx, rackID uuid.UUID, components []uuid.UUID, reason string) ([]uuid.UUID, error) {
	rows, err := t.q.TaskActiveOnRack(ctx, tx, rackID)
	if err != nil {
		return nil, fmt.Errorf("read the rack's tasks: %w", err)
	}
	covered := map[uuid.UUID]bool{}
	for _, id := range components {
		covered[id] = true
	}
	var victims []dbsqlc.Task
	for _, r := range rows {
		if isLeakResponse(r) || !slices.ContainsFunc(r.ComponentIDs, func(id uuid.UUID) bool { return covered[id] }) {
			continue
		}
		victims = append(victims, r)
	}
	if len(victims) == 0 {
		return nil, nil
	}
	// Lock the runs first, in run-ID order, as a checkpoint ending a run
	// does (the run, then its task, then the rack): no deadlock with one.
	var runs []int64
	for _, v := range victims {
		if v.RunID != nil {
			runs = append(runs, *v.RunID)
		}
	}
	slices.Sort(runs)
	for _, id := range runs {
		if err := t.engine.Lock(ctx, tx, engine.RunID(id)); err != nil && !errors.Is(err, engine.ErrRunNotFound) {
			return nil, err
		}
	}
	// Waiting ones first, so no run's end promotes one of them.
	slices.SortStableFunc(victims, func(a, b dbsqlc.Task) int {
		aw, bw := a.Status == string(TaskWaiting), b.Status == string(TaskWaiting)
		switch {
		case aw && !bw:
			return -1
		case bw && !aw:
			return 1
		}
		return 0
	})
	msg := firstLine(reason)
	var out []uuid.UUID
	for _, v := range victims {
		row, err := t.q.TaskGetByIDForUpdate(ctx, tx, v.ID)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		} else if err != nil {
			return nil, err
		}
		switch {
		case TaskStatus(row.Status).Finished():
			continue
		case row.Status == string(TaskWaiting):
			if err := t.finishWaiting(ctx, tx, row, TaskTerminated, msg); err != nil {
				return nil, err
			}
		case row.RunID != nil:
			// The engine ends the run and calls RunsEnded in tx, which
			// records the termination with msg.
			if err := t.engine.CancelWithReason(ctx, tx, engine.RunID(*row.RunID), msg); err != nil {
				return nil, fmt.Errorf("terminate task %s: %w", row.ID, err)
			}
		default:
			continue
		}
		out = append(out, row.ID)
		if t.logger != nil {
			// The audit log's line for a termination no caller asked for.
			t.logger.LogAttrs(ctx, slog.LevelInfo, "audit",
				slog.String("identity", "flow:leak-response"),
				slog.String("method", "operations.Preempt"),
				slog.Any("targets", []string{"task_id=" + row.ID.String(), "rack_id=" + rackID.String()}),
				slog.String("outcome", "terminated"),
				slog.String("reason", msg))
		}
	}
	return out, nil
}

// isLeakResponse reports whether task row is a leak response.
func isLeakResponse(row dbsqlc.Task) bool {
	var p struct {
		Leak *LeakTrigger `json:"leak"`
	}
	return json.Unmarshal(row.Information, &p) == nil && p.Leak != nil
}

// leakHold returns why waiting task row may not start: it would energise
// a component it covers whose leak is open (and not overridden); "" when
// it may. A power-off (the legacy path's leak answer, say) may.
func (t *Tasks) leakHold(ctx context.Context, tx pgx.Tx, row dbsqlc.Task) (string, error) {
	if isLeakResponse(row) || len(row.ComponentIDs) == 0 {
		return "", nil
	}
	var def ruledef.Definition
	_ = json.Unmarshal(row.Rule, &def)
	if !Energises(OperationType(row.OperationType), OperationCode(row.OperationCode), def) {
		return "", nil
	}
	if why, err := t.rackRefusal(ctx, tx, row.RackID, OperationCode(row.OperationCode), true); err != nil || why != "" {
		return firstLine(fmt.Sprintf("Refused: %s: %s", ErrRackIsolated, why)), err
	}
	leaks, err := t.inv.OpenLeaks(ctx, tx, row.ComponentIDs)
	if err != nil {
		return "", err
	}
	var open []string
	for _, l := range leaks {
		if !l.Overridden() {
			open = append(open, l.String())
		}
	}
	if len(open) == 0 {
		return "", nil
	}
	slices.Sort(open)
	return firstLine(fmt.Sprintf("Refused: %s: %s", ErrLeakOpen, strings.Join(open, ", "))), nil
}
