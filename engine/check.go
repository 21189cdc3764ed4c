package engine

import (
	"fmt"
	"time"
)

// MaxStepDeadline is the longest deadline or call timeout a step may have:
// far beyond any real operation, well inside what a time.Duration and
// PostgreSQL's timestamps hold. A computed budget (timeout × attempts ×
// batches) above it makes the plan invalid instead of wrapping round to a
// negative deadline.
const MaxStepDeadline = 366 * 24 * time.Hour

// CheckPlan reports whether Start would accept plan: the same checks of
// stages, steps, registered actions and their params, call timeouts,
// retry policies and step deadlines, with
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
