package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// ActionFunc is the code of an action: one call over one batch of targets.
// It does its I/O with no transaction open and must honour ctx, which is
// cancelled at the call timeout, the step deadline, the run timeout and when
// the run is cancelled. Actions run at least once per batch: a crash before
// the checkpoint commits runs the batch again, so an action that starts
// something long saves a handle with Call.SaveCheckpoint first and resumes
// from it.
//
// Returning a non-nil error fails the call; it is retried by the step's
// RetryPolicy unless wrapped with Permanent. Returning a Result ends the call
// successfully (see Result).
type ActionFunc[P any] func(ctx context.Context, call Call[P]) (Result, error)

// Result is a successful call's answer. The zero Result means the batch is
// done.
type Result struct {
	// PollAfter, when positive, runs the action again on the same batch after
	// this long (a durable River snooze; no attempt is used). The checkpoint
	// is kept.
	PollAfter time.Duration
	// Sleep, when positive, marks the batch done and waits this long (durably)
	// before the next batch or the step's end.
	Sleep time.Duration
	// Failed names the targets of the batch the call failed for good, with
	// why (a batch call that failed for some devices only): the batch is done
	// for the others. The failed targets are recorded with the step, later
	// steps of its chain skip them, and the step fails once its chain has
	// ended (at once when every target of the step has failed). It is read
	// when the batch ends (PollAfter zero). A failure worth retrying is an
	// error instead; an action that knows it is on its last attempt
	// (Call.Attempt == Call.MaxAttempts) answers Failed.
	Failed map[string]string
}

// Progress is what an action reports while it works; the engine stores the
// latest one with the step so reports show it live, and clears it when the
// batch ends.
type Progress struct {
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	// Message says what the call is doing ("verifying power on, poll 3 of
	// 31"); Until, when set, is when that wait ends.
	Message string    `json:"message,omitempty"`
	Until   time.Time `json:"until,omitzero"`
	// Done lists the targets of the current batch the action has finished
	// for good (a verification that has seen them in the expected state).
	// Run counts them completed while the batch still runs.
	Done []string `json:"done,omitempty"`
}

// Call is one call of an action: its typed params, the batch of targets and
// the handles to save a checkpoint and progress.
type Call[P any] struct {
	RunID       RunID
	StepID      StepID
	Owner       string            // the run's Plan.Owner
	Labels      map[string]string // the run's Plan.Labels
	Stage       int               // 0-based stage index
	Step        string            // step name
	Params      P
	Targets     []string // this batch
	Batch       int      // 0-based batch index
	Batches     int
	Attempt     int // 1-based attempt at this batch
	MaxAttempts int // the step's retry policy: the last attempt is MaxAttempts
	// Deadline is the earliest of the step deadline and the run timeout.
	Deadline time.Time
	// OutcomeUnknown is set when an earlier call of this batch may have
	// reached the backend but its outcome was never recorded: its process
	// died or lost its lease during the call or before recording its
	// answer (the step's report lists each case). An action that is not
	// idempotent (a reset, an AC power cycle) checks the devices' state
	// before repeating it, where the backend can tell.
	OutcomeUnknown bool

	st *callState
}

// SaveCheckpoint stores v (JSON) as the checkpoint of the current batch, in
// its own short transaction, so a later call of the same batch — a poll, a
// retry, or a re-run after a crash — reads it back with Checkpoint. It returns
// ErrStepEnded if the step has ended or moved to another batch meanwhile.
func (c Call[P]) SaveCheckpoint(ctx context.Context, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("marshal checkpoint: %w", err)
	}
	if err := c.st.saveCheckpoint(ctx, b); err != nil {
		return err
	}
	c.st.checkpoint = b
	return nil
}

// Checkpoint decodes the current batch's checkpoint into v and reports
// whether there was one.
func (c Call[P]) Checkpoint(v any) (bool, error) {
	if len(c.st.checkpoint) == 0 {
		return false, nil
	}
	if err := json.Unmarshal(c.st.checkpoint, v); err != nil {
		return false, fmt.Errorf("decode checkpoint: %w", err)
	}
	return true, nil
}

// ReportProgress stores p as the step's progress in its own short
// transaction. It returns ErrStepEnded if the step has ended.
func (c Call[P]) ReportProgress(ctx context.Context, p Progress) error {
	return c.st.saveProgress(ctx, p)
}

// callState is the engine side of a Call.
type callState struct {
	checkpoint     []byte
	saveCheckpoint func(ctx context.Context, b []byte) error
	saveProgress   func(ctx context.Context, p Progress) error
}

// callInfo is a Call without its typed params.
type callInfo struct {
	RunID       RunID
	StepID      StepID
	Owner       string
	Labels      map[string]string
	Stage       int
	Step        string
	Targets     []string
	Batch       int
	Batches     int
	Attempt     int
	MaxAttempts int
	Deadline    time.Time
	// OutcomeUnknown: see Call.OutcomeUnknown.
	OutcomeUnknown bool
	st             *callState
}

// action is a registered action with its params type erased.
type action struct {
	check func(params any) (json.RawMessage, error)
	run   func(ctx context.Context, params json.RawMessage, info callInfo) (Result, error)
}

// Register adds the action kind to e, with params of type P. Call it (in
// app, never in init) before Start is used with that kind and before the
// River client starts. It panics if kind is empty or already registered,
// which is a programming error.
//
//	engine.Register(e, "power.control", func(ctx context.Context, call engine.Call[PowerParams]) (engine.Result, error) {
//		return engine.Result{}, power.Set(ctx, call.Targets, call.Params.State)
//	})
func Register[P any](e *Engine, kind string, fn ActionFunc[P]) {
	if kind == "" {
		panic("Register with empty kind")
	}
	if _, dup := e.actions[kind]; dup {
		panic("action kind registered twice: " + kind)
	}
	e.actions[kind] = &action{
		check: func(params any) (json.RawMessage, error) {
			var raw []byte
			switch p := params.(type) {
			case nil:
				raw = []byte("{}")
			case json.RawMessage:
				raw = p
			case []byte:
				raw = p
			default:
				b, err := json.Marshal(p)
				if err != nil {
					return nil, fmt.Errorf("%w: %v", ErrInvalidParams, err)
				}
				raw = b
			}
			var v P
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&v); err != nil {
				return nil, fmt.Errorf("%w for %q: %v", ErrInvalidParams, kind, err)
			}
			if val, ok := any(&v).(interface{ Validate() error }); ok {
				if err := val.Validate(); err != nil {
					return nil, fmt.Errorf("%w for %q: %v", ErrInvalidParams, kind, err)
				}
			}
			// Store the typed struct's own JSON, so what runs is what was checked.
			b, err := json.Marshal(v)
			if err != nil {
				return nil, fmt.Errorf("%w: %v", ErrInvalidParams, err)
			}
			return b, nil
		},
		run: func(ctx context.Context, params json.RawMessage, info callInfo) (Result, error) {
			var v P
			if err := json.Unmarshal(params, &v); err != nil {
				return Result{}, Permanent(fmt.Errorf("decode params: %w", err))
			}
			return fn(ctx, Call[P]{
				RunID: info.RunID, StepID: info.StepID, Owner: info.Owner, Labels: info.Labels, Stage: info.Stage, Step: info.Step,
				Params: v, Targets: info.Targets, Batch: info.Batch, Batches: info.Batches,
				Attempt: info.Attempt, MaxAttempts: info.MaxAttempts, Deadline: info.Deadline, OutcomeUnknown: info.OutcomeUnknown, st: info.st,
			})
		},
	}
}

// permanentError marks an error that must not be retried.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent wraps err so the call is not retried: the step fails at once.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

func isPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// SleepKind is the kind of the built-in durable sleep action (RegisterSleep).
const SleepKind = "engine.sleep"

// SleepParams are the params of SleepKind: how long to wait, as a Go
// duration string ("90s", "5m").
type SleepParams struct {
	Duration string `json:"duration"`
}

// Validate checks that Duration parses and is positive.
func (p *SleepParams) Validate() error {
	d, err := time.ParseDuration(p.Duration)
	if err != nil {
		return err
	}
	if d <= 0 {
		return errors.New("duration must be positive")
	}
	return nil
}

// RegisterSleep registers SleepKind: a durable timer (a scheduled River job,
// no goroutine waits) that ends the step after the duration.
func RegisterSleep(e *Engine) {
	Register(e, SleepKind, func(ctx context.Context, call Call[SleepParams]) (Result, error) {
		d, err := time.ParseDuration(call.Params.Duration)
		if err != nil {
			return Result{}, Permanent(err)
		}
		return Result{Sleep: d}, nil
	})
}

// ActionKinds returns the kinds of the registered actions, sorted.
func (e *Engine) ActionKinds() []string {
	kinds := make([]string, 0, len(e.actions))
	for k := range e.actions {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	return kinds
}
