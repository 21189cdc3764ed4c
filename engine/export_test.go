package engine

import "context"

// CheckpointStats returns the steps checkpointed, those committed together
// with others, and how many failed groups were retried step by step.
func CheckpointStats(e *Engine) (steps, grouped, split int64) {
	return e.stats.steps.Load(), e.stats.grouped.Load(), e.stats.split.Load()
}

// KeptOutcomes returns how many outcomes the engine kept because their
// first write failed with the database unavailable, and how many of those
// it then recorded.
func KeptOutcomes(e *Engine) (kept, committed int64) {
	return e.stats.kept.Load(), e.stats.keptCommitted.Load()
}

// LoseCheckpointAnswers makes the next n checkpoints that commit answer as
// if the connection had dropped before their commit's reply reached the
// engine (their outcomes are recorded; the engine does not know it).
func LoseCheckpointAnswers(e *Engine, n int64) { e.loseAnswers.Store(n) }

// SweepStats returns how many heartbeat sweeps probed for dead processes
// and how many candidate scans dead-process sweeps made.
func SweepStats(e *Engine) (probes, scans int64) {
	return e.sweepStats.probes.Load(), e.sweepStats.scans.Load()
}

// SweepTick runs one heartbeat's sweep: a full pass when full, else a
// probe and a sweep only if it finds a dead process.
func SweepTick(e *Engine, full bool) (SweepResult, error) {
	return e.sweepTick(context.Background(), full)
}

// BusyCheckpoints returns how many steps a group's checkpoint left out
// because another transaction held their run (committed alone after).
func BusyCheckpoints(e *Engine) int64 { return e.stats.busy.Load() }
