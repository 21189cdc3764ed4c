package engine

import (
	"time"

	"github.com/nicoflow/flow/engine/internal/dbsqlc"
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
	_, err := e.compilePlan(plan, 0, &dbsqlc.RunInsertManyParams{}, map[planStep]*stepSpec{})
	return err
}
