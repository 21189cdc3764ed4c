package engine

// CheckpointStats returns the steps checkpointed, those committed together
// with others, and how many failed groups were retried step by step.
func CheckpointStats(e *Engine) (steps, grouped, split int64) {
	return e.stats.steps.Load(), e.stats.grouped.Load(), e.stats.split.Load()
}
