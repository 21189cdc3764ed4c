package rollout

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// RunChange is a change of an operation run's status or current phase, as
// one save records it.
type RunChange struct {
	RunID      uuid.UUID
	Name       string
	FromStatus RunStatus
	Status     RunStatus
	Reason     RunReason
	Message    string
	// FromPhase and Phase are the current phase index before and after.
	FromPhase, Phase int
}

// RunChangeFunc hears of a run's change inside the transaction that saves
// it (notifications); an error rolls that transaction back. It must only
// write through tx and must not do network I/O.
type RunChangeFunc func(ctx context.Context, tx pgx.Tx, c RunChange) error

// OnRunChange registers fn (nil: none). Call it before serving.
func (r *Service) OnRunChange(fn RunChangeFunc) { r.onChange = fn }

// changed tells onChange of st's change since it was locked, if any.
func (r *Service) changed(ctx context.Context, tx pgx.Tx, st *runState) error {
	if r.onChange == nil || (st.row.Status == st.from.Status && st.row.CurrentPhaseIndex == st.from.CurrentPhaseIndex) {
		return nil
	}
	return r.onChange(ctx, tx, RunChange{
		RunID: st.row.ID, Name: st.row.Name, FromStatus: RunStatus(st.from.Status), Status: RunStatus(st.row.Status),
		Reason: RunReason(st.row.StatusReason), Message: st.row.StatusMessage,
		FromPhase: int(st.from.CurrentPhaseIndex), Phase: int(st.row.CurrentPhaseIndex),
	})
}
