package engine

import (
	"sync"
	"time"
)

// Orphaned step jobs (docs/engine.md, "Orphaned jobs").
//
// River marks a job running and attempted by a client in the statement
// that fetches it; the client works it once the answer arrives. When the
// answer is lost (the primary froze or failed over after the fetch had
// committed and replicated, but before the answer reached the client: issue
// 46, a freeze of the primary in make ha-test), the job stays running,
// attempted by a live process that never heard of it. Its lease keeps
// renewing, so the dead-process sweep never takes it; its step was never
// claimed, so no call of it is in flight anywhere. River itself never
// rescues a step job, and the hung-call rule waited for the step's timeout
// plus the rescue window (30 min by default).
//
// River's completer makes orphans too: it gives up recording a job's end
// after three failed tries (about 7 to 37 s, logged "Too many errors;
// giving up"), which an outage or a freeze outlasts; the job stays running
// though its Work returned (make ha-test logged it 11 times in one run).
//
// Only the process a job was handed to knows whether it is working it, so
// each process looks for its own orphans: a step job attempted by this
// process longer ago than orphanAfter, that this process is not working
// and did not work within orphanAfter, whose step is unclaimed or was
// claimed longer ago than orphanAfter (by an execution of this process
// that has returned: no call is in flight; its outcome is recorded as
// unknown), is rescheduled like a dead process's (a new token, a fresh
// job, the orphan ended). Every heartbeat asks a cheap question first
// (orphanProbeSQL: this process's running step jobs only) and sweeps when
// it finds one, so an orphan is rescheduled within orphanAfter plus a
// heartbeat; a full pass finds them too. A late answer to a lost fetch
// cannot run the step twice: its claim names the orphaned job, which the
// step no longer belongs to, and a claim that committed first is recent,
// which the release refuses (the two serialize on the step's row).
//
// The window only spares work: rescheduling a job River was about to
// start costs a fresh job, never a second call. It was a minute, found
// by a full pass (every 30 s): 79 s in make ha-test, during which the
// step's rack queued its next five scheduled tasks and refused the
// schedule's next eleven firings (MaxWaitingPerRack; issue 46, fault 16).

// maxOrphanAfter bounds how long a fetched step job may go unworked by
// the process it was handed to before that process reschedules it: River
// starts working a job within milliseconds of the fetch's answer, so ten
// seconds is far past any wait that is not a lost answer.
const maxOrphanAfter = 10 * time.Second

// orphanAfter is how long a job fetched by this process may go unworked
// before its own sweep reschedules it: maxOrphanAfter, or the rescue
// window when that is shorter (tests).
func (e *Engine) orphanAfter() time.Duration {
	return min(maxOrphanAfter, e.cfg.RescueStuckJobsAfter)
}

// workingSet is the step jobs this process is working (Work has not
// returned) or finished working recently (River may not have recorded the
// end yet).
type workingSet struct {
	mu   sync.Mutex
	jobs map[int64]time.Time // job ID → when Work returned; zero while working
	busy map[int64]int       // job ID → Work calls in progress
}

// begin records that Work started on job id; the returned func records
// that it returned.
func (w *workingSet) begin(id int64) func() {
	w.mu.Lock()
	if w.jobs == nil {
		w.jobs, w.busy = map[int64]time.Time{}, map[int64]int{}
	}
	w.jobs[id] = time.Time{}
	w.busy[id]++
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		if w.busy[id]--; w.busy[id] <= 0 {
			delete(w.busy, id)
			w.jobs[id] = time.Now()
		}
		w.mu.Unlock()
	}
}

// recent returns the jobs being worked or that returned within d, and
// forgets the others.
func (w *workingSet) recent(d time.Duration) []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]int64, 0, len(w.jobs))
	for id, ended := range w.jobs {
		if ended.IsZero() || time.Since(ended) < d {
			out = append(out, id)
		} else {
			delete(w.jobs, id)
		}
	}
	return out
}
