package engine

import (
	"fmt"
	"math"
	"time"
)

// MaxStepDeadline is the longest deadline a step may have: a computed
// budget (timeout × attempts × batches) above it, or one that would not fit
// a time.Duration at all, makes the plan invalid instead of wrapping round
// to a negative deadline.
const MaxStepDeadline = 366 * 24 * time.Hour

// CheckPlan reports whether Start would accept plan: the same checks of
// stages, steps, registered actions and their params, call timeouts
// (shorter than the rescue window), retry policies and step deadlines, with
// nothing written. It returns the *PlanError Start would return. Callers
// that store rules for later runs (operation rules) call it at store time,
// so a stored rule always runs.
func (e *Engine) CheckPlan(plan Plan) error {
	if len(plan.Stages) == 0 {
		return &PlanError{Stage: -1, Step: -1, Err: ErrEmptyPlan}
	}
	if plan.Timeout < 0 {
		return &PlanError{Stage: -1, Step: -1, Err: fmt.Errorf("%w: negative run timeout", ErrInvalidTimeout)}
	}
	for i, stage := range plan.Stages {
		if len(stage.Steps) == 0 {
			return &PlanError{Stage: i, Step: -1, Err: ErrEmptyStage}
		}
		for j, st := range stage.Steps {
			if _, _, err := e.compileStep(stage, st); err != nil {
				return &PlanError{Stage: i, Step: j, Err: err}
			}
		}
	}
	return nil
}

// stepBudget is spec §8.3's step deadline, (timeout·attempts + max
// interval·(attempts−1))·batches + slack, computed without overflow; ok is
// false when it exceeds MaxStepDeadline.
func stepBudget(timeout time.Duration, r RetryPolicy, batches int) (time.Duration, bool) {
	attempts := float64(r.MaxAttempts)
	per := float64(timeout)*attempts + float64(r.MaxInterval)*(attempts-1)
	total := per*float64(batches) + float64(stepBudgetSlack)
	if math.IsNaN(total) || total > float64(MaxStepDeadline) {
		return 0, false
	}
	return time.Duration(total), true
}
