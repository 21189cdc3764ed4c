package operations

// BuildReport exposes buildReport to the report tests.
var BuildReport = buildReport

// QueuedSubmits is how many submissions wait in h's queue.
func QueuedSubmits(h *TaskHandler) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.pending)
}
