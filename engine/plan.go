package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
)

// Defaults applied to a Step whose fields are zero (spec/execution.md §8.5).
const (
	DefaultCallTimeout        = 20 * time.Minute
	DefaultMaxAttempts        = 3
	DefaultInitialInterval    = time.Second
	DefaultBackoffCoefficient = 2.0
	DefaultMaxInterval        = time.Minute
)

// stepBudgetSlack is added to a computed step deadline (spec §8.3: "plus 2 m").
const stepBudgetSlack = 2 * time.Minute

// Plan is what a run executes: stages in order, the steps of a stage in
// parallel. Start copies the plan into the run, so later changes to the
// caller's rules never affect a run already started.
type Plan struct {
	// Owner is the caller's opaque reference (a task ID, say). It is stored
	// with the run and handed to the end-of-run hook.
	Owner string
	// Metadata is optional caller JSON stored with the run and handed to the
	// end-of-run hook. It must not hold secrets. Nil stores {}.
	Metadata json.RawMessage
	// Labels name the run for people (task_id, rack, operation, say): they
	// are stored in the run's metadata under "labels", copied into the
	// River metadata and tags of each of its jobs, and handed to the
	// Observer and the end-of-run hook. They must not hold secrets; keys
	// must not end in "_at" or contain ':' (River's own metadata keys).
	Labels map[string]string
	// Trace, if set, is the W3C trace context (traceparent, tracestate) the
	// run's first jobs carry, for a caller that starts runs of different
	// traces in one StartMany; otherwise the jobs carry ctx's.
	Trace map[string]string
	// Timeout bounds the whole run, measured from Start. The deadline is
	// computed once and stored; a run still going at the deadline fails.
	// Zero means no run timeout.
	Timeout time.Duration
	// Stages run in order; there must be at least one.
	Stages []Stage
	// Urgent runs' jobs go to a queue of their own, UrgentQueue, worked
	// by workers of their own (Config.UrgentWorkers), and are fetched
	// first there (River priority 1; every other run's are 2), so a leak
	// response is not queued behind a site-wide wave started before it. The run's
	// labels carry it (LabelPriority), so every later job of the run,
	// rescheduled ones included, keeps it.
	Urgent bool
}

// LabelPriority is the run label an urgent run carries (value
// PriorityUrgent); it shows as the tag "urgent" in River UI.
const (
	LabelPriority  = "priority"
	PriorityUrgent = "urgent"
)

// Job priorities (River: 1 is fetched first).
const (
	priorityUrgent = 1
	priorityNormal = 2
)

// Stage is a set of steps that run in parallel. The stage ends when all its
// steps have ended, or at the first failed step unless WaitAll is set.
type Stage struct {
	Name string
	// WaitAll lets the other steps of the stage finish when one fails
	// (firmware stages); otherwise the first failed step ends the run and
	// cancels its siblings.
	WaitAll bool
	// Steps run in parallel; there must be at least one.
	Steps []Step
}

// Step runs one registered action over its targets, in batches of at most
// MaxParallel targets, batches in order.
type Step struct {
	Name string
	// Action is the kind of a registered action (see Register).
	Action string
	// Params are the action's parameters: a value of the action's params
	// type, or its JSON (json.RawMessage or []byte). Start checks that they
	// decode into the registered type (unknown fields are rejected) and, if
	// the type has a Validate() error method, that it passes.
	Params any
	// Targets are opaque identifiers handed to the action. An empty list
	// calls the action once with no targets (a sleep, say).
	Targets []string
	// MaxParallel is the batch size: 0 or ≥ len(Targets) means one batch.
	MaxParallel int
	// Timeout bounds each call of the action. Zero means DefaultCallTimeout.
	Timeout time.Duration
	// Retry is the retry policy of each call; zero fields take defaults.
	Retry RetryPolicy
	// Deadline bounds the whole step, counted from when its stage starts.
	// It is computed once and stored. Zero computes it as spec §8.3 does:
	// (timeout·attempts + max interval·(attempts−1))·batches + 2 min.
	Deadline time.Duration
	// Chain, when set, links this step to the steps of later stages with
	// the same Chain (the actions of one caller-level step, say): each runs
	// only over the targets no earlier step of the chain has failed
	// (Result.Failed), and a step with failed targets, its own or its
	// chain's, fails when it is the chain's last step or has no target
	// left; otherwise it completes and the chain goes on without them.
	Chain string
	// Holds are the resources the step takes before its first call, for
	// the rest of its run (see Hold): it waits while they are taken.
	Holds []Hold
}

// RetryPolicy says how often and how soon a failed call is retried. A call
// that answers PollAfter or Sleep is not a failure and uses no attempt.
type RetryPolicy struct {
	MaxAttempts        int           // calls per batch, first included; 0 means 3
	InitialInterval    time.Duration // wait before the first retry; 0 means 1s
	BackoffCoefficient float64       // growth of the wait per retry; 0 means 2
	MaxInterval        time.Duration // cap on the wait; 0 means 1 min
}

// withDefaults fills zero fields.
func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts == 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.InitialInterval == 0 {
		p.InitialInterval = DefaultInitialInterval
	}
	if p.BackoffCoefficient == 0 {
		p.BackoffCoefficient = DefaultBackoffCoefficient
	}
	if p.MaxInterval == 0 {
		p.MaxInterval = DefaultMaxInterval
	}
	return p
}

// backoff returns the wait after the failed-th failed call (1-based).
func (p RetryPolicy) backoff(failed int) time.Duration {
	d := float64(p.InitialInterval) * math.Pow(p.BackoffCoefficient, float64(failed-1))
	if d > float64(p.MaxInterval) || math.IsInf(d, 0) || math.IsNaN(d) {
		return p.MaxInterval
	}
	return time.Duration(d)
}

// Errors returned by Start for a bad plan, wrapped in a *PlanError that says
// where. Nothing is written when Start fails.
var (
	ErrEmptyPlan          = errors.New("plan has no stages")
	ErrEmptyStage         = errors.New("stage has no steps")
	ErrUnknownAction      = errors.New("unknown action kind")
	ErrInvalidParams      = errors.New("invalid action params")
	ErrInvalidMaxParallel = errors.New("max_parallel must be ≥ 0")
	ErrInvalidTimeout     = errors.New("invalid timeout")
	ErrInvalidRetry       = errors.New("invalid retry policy")
	ErrInvalidMetadata    = errors.New("metadata is not a JSON object")
)

// PlanError says which stage and step of a plan is bad. Stage and Step are
// 0-based; Step is -1 for an error about the stage or the plan, and Stage is
// -1 for an error about the plan itself. errors.Is matches the wrapped
// sentinel (ErrUnknownAction…).
type PlanError struct {
	Stage, Step int
	// Plan is the plan's index among StartMany's plans (0 for Start's).
	Plan int
	Err  error
}

// Error returns "stage S step T: <reason>", with the 0-based indexes.
func (e *PlanError) Error() string {
	switch {
	case e.Stage < 0:
		return e.Err.Error()
	case e.Step < 0:
		return fmt.Sprintf("stage %d: %v", e.Stage, e.Err)
	}
	return fmt.Sprintf("stage %d step %d: %v", e.Stage, e.Step, e.Err)
}

// Unwrap returns the sentinel.
func (e *PlanError) Unwrap() error { return e.Err }

// stepSpec is the frozen form of a Step stored in engine_step.spec.
type stepSpec struct {
	StageName   string          `json:"stage_name"`
	WaitAll     bool            `json:"wait_all"`
	Name        string          `json:"name"`
	Action      string          `json:"action"`
	Params      json.RawMessage `json:"params"`
	Targets     []string        `json:"targets"`
	MaxParallel int             `json:"max_parallel"`
	TimeoutMS   int64           `json:"timeout_ms"`
	MaxAttempts int             `json:"max_attempts"`
	InitialMS   int64           `json:"initial_interval_ms"`
	Coefficient float64         `json:"backoff_coefficient"`
	MaxMS       int64           `json:"max_interval_ms"`
	Chain       string          `json:"chain,omitempty"`
	ChainEnd    bool            `json:"chain_end,omitempty"`
	Holds       []Hold          `json:"holds,omitempty"`
}

func (s *stepSpec) timeout() time.Duration { return time.Duration(s.TimeoutMS) * time.Millisecond }

func (s *stepSpec) retry() RetryPolicy {
	return RetryPolicy{
		MaxAttempts:        s.MaxAttempts,
		InitialInterval:    time.Duration(s.InitialMS) * time.Millisecond,
		BackoffCoefficient: s.Coefficient,
		MaxInterval:        time.Duration(s.MaxMS) * time.Millisecond,
	}
}

// batches returns the number of batches: at least one.
func (s *stepSpec) batches() int {
	n := len(s.Targets)
	if n == 0 || s.MaxParallel == 0 || s.MaxParallel >= n {
		return 1
	}
	return (n + s.MaxParallel - 1) / s.MaxParallel
}

// batch returns the targets of batch i.
func (s *stepSpec) batch(i int) []string {
	if s.batches() == 1 {
		return s.Targets
	}
	lo := i * s.MaxParallel
	return s.Targets[lo:min(lo+s.MaxParallel, len(s.Targets))]
}

// CheckStep reports whether st's timing and retry settings can ever run,
// without the registry (the action and its params are Start's to check):
// max_parallel, the call timeout, the step deadline (given or computed),
// and the retry policy. Start calls it for every step; callers that store
// step settings for later (rules) call it when the settings are created, so
// a step that could never run is refused then, never at submit. Leases
// rescue a dead process's steps, so no process setting bounds timeouts.
// The error wraps ErrInvalidMaxParallel, ErrInvalidTimeout or
// ErrInvalidRetry.
func CheckStep(st Step) error {
	_, _, err := stepTiming(st)
	return err
}

// maxStepBudget bounds a step's deadline (MaxStepDeadline).
const maxStepBudget = MaxStepDeadline

// stepTiming checks st's timing and returns its call timeout and deadline
// budget.
func stepTiming(st Step) (timeout, budget time.Duration, err error) {
	if st.MaxParallel < 0 {
		return 0, 0, ErrInvalidMaxParallel
	}
	if st.Timeout < 0 || st.Deadline < 0 {
		return 0, 0, fmt.Errorf("%w: negative", ErrInvalidTimeout)
	}
	timeout = st.Timeout
	if timeout == 0 {
		timeout = DefaultCallTimeout
	}
	if timeout < time.Millisecond {
		return 0, 0, fmt.Errorf("%w: call timeout %s is under 1ms", ErrInvalidTimeout, timeout)
	}
	if timeout > maxStepBudget {
		return 0, 0, fmt.Errorf("%w: call timeout %s is over %s", ErrInvalidTimeout, timeout, maxStepBudget)
	}
	r := st.Retry
	if r.MaxAttempts < 0 || r.InitialInterval < 0 || r.BackoffCoefficient < 0 || r.MaxInterval < 0 ||
		(r.BackoffCoefficient != 0 && r.BackoffCoefficient < 1) {
		return 0, 0, ErrInvalidRetry
	}
	r = r.withDefaults()
	budget = st.Deadline
	if budget == 0 {
		// (timeout·attempts + max interval·(attempts−1))·batches + slack,
		// in float64 so that a huge policy is refused, not wrapped around.
		spec := stepSpec{Targets: st.Targets, MaxParallel: st.MaxParallel}
		per := float64(timeout)*float64(r.MaxAttempts) + float64(r.MaxInterval)*float64(r.MaxAttempts-1)
		b := per*float64(spec.batches()) + float64(stepBudgetSlack)
		if b > float64(maxStepBudget) {
			return 0, 0, fmt.Errorf("%w: step deadline (call timeout %s × %d attempts + retry waits, × %d batches) is over %s",
				ErrInvalidTimeout, timeout, r.MaxAttempts, spec.batches(), maxStepBudget)
		}
		budget = time.Duration(b)
	}
	if budget < time.Millisecond {
		return 0, 0, fmt.Errorf("%w: step deadline %s is under 1ms", ErrInvalidTimeout, budget)
	}
	if budget > maxStepBudget {
		return 0, 0, fmt.Errorf("%w: step deadline %s is over %s", ErrInvalidTimeout, budget, maxStepBudget)
	}
	return timeout, budget, nil
}

// compileStep validates st against the registry and returns its frozen spec
// and deadline budget.
func (e *Engine) compileStep(stage Stage, st Step) (stepSpec, time.Duration, error) {
	a, ok := e.actions[st.Action]
	if !ok {
		return stepSpec{}, 0, fmt.Errorf("%w %q", ErrUnknownAction, st.Action)
	}
	timeout, budget, err := stepTiming(st)
	if err != nil {
		return stepSpec{}, 0, err
	}
	if err := checkHolds(st.Holds); err != nil {
		return stepSpec{}, 0, err
	}
	r := st.Retry.withDefaults()
	params, err := a.check(st.Params)
	if err != nil {
		return stepSpec{}, 0, err
	}
	targets := st.Targets
	if targets == nil {
		targets = []string{}
	}
	spec := stepSpec{
		StageName:   stage.Name,
		WaitAll:     stage.WaitAll,
		Name:        st.Name,
		Action:      st.Action,
		Params:      params,
		Targets:     targets,
		MaxParallel: st.MaxParallel,
		TimeoutMS:   timeout.Milliseconds(),
		MaxAttempts: r.MaxAttempts,
		InitialMS:   r.InitialInterval.Milliseconds(),
		Coefficient: r.BackoffCoefficient,
		MaxMS:       r.MaxInterval.Milliseconds(),
		Chain:       st.Chain,
		Holds:       st.Holds,
	}
	return spec, budget, nil
}
