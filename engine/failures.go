package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/riverqueue/river"

	"github.com/nicoflow/flow/engine/internal/dbsqlc"
)

// Per-target failures.
//
// A call may fail some targets of its batch only (Result.Failed). Those are
// stored with the step (engine_step.failed_targets); the other targets go
// on. Steps of one chain (Step.Chain) skip the targets an earlier step of
// the chain failed, and the failure surfaces, as the step's failure, at the
// chain's last step, or as soon as a step has no target left.

// chainFailure is an earlier step of a step's chain that failed targets.
type chainFailure struct {
	Step   string            `json:"step"`
	Failed map[string]string `json:"failed"`
}

// stepFailures are the failed targets a worker knows of when it works a
// step: the step's own (earlier batches) and its chain's.
type stepFailures struct {
	own   map[string]string
	chain []chainFailure
}

// emptyJSON reports whether b is an empty JSON object or array (or nothing),
// so the common case decodes nothing.
func emptyJSON(b []byte) bool {
	return len(b) <= 2
}

func decodeFailures(row stepRow) (stepFailures, error) {
	var f stepFailures
	if !emptyJSON(row.FailedTargets) {
		if err := json.Unmarshal(row.FailedTargets, &f.own); err != nil {
			return f, fmt.Errorf("decode failed targets: %w", err)
		}
	}
	if !emptyJSON(row.ChainFailures) {
		if err := json.Unmarshal(row.ChainFailures, &f.chain); err != nil {
			return f, fmt.Errorf("decode chain failures: %w", err)
		}
	}
	return f, nil
}

// excluded reports whether an earlier step of the chain failed target.
func (f stepFailures) excluded(target string) bool {
	for _, c := range f.chain {
		if _, ok := c.Failed[target]; ok {
			return true
		}
	}
	return false
}

// callable returns the targets of a batch the chain has not failed.
func (f stepFailures) callable(batch []string) []string {
	if len(f.chain) == 0 {
		return batch
	}
	out := make([]string, 0, len(batch))
	for _, t := range batch {
		if !f.excluded(t) {
			out = append(out, t)
		}
	}
	return out
}

// batchFailures keeps the entries of failed that name targets of the call.
func batchFailures(failed map[string]string, targets []string) map[string]string {
	if len(failed) == 0 {
		return nil
	}
	out := make(map[string]string, len(failed))
	for _, t := range targets {
		if msg, ok := failed[t]; ok {
			if msg == "" {
				msg = "failed"
			}
			out[t] = msg
		}
	}
	return out
}

func failuresJSON(failed map[string]string) []byte {
	if len(failed) == 0 {
		return []byte("{}")
	}
	b, _ := json.Marshal(failed)
	return b
}

// endStep ends a step whose batches are all done: completed, unless targets
// failed (in this step, last holding the last call's, or earlier in its
// chain) and the step ends its chain or has no target left, in which case
// it fails naming them.
func (e *Engine) endStep(ctx context.Context, job *river.Job[RunStepArgs], row stepRow, spec *stepSpec, f stepFailures, last map[string]string, calls *int32) error {
	own := f.own
	if len(last) > 0 {
		own = maps.Clone(own)
		if own == nil {
			own = map[string]string{}
		}
		maps.Copy(own, last)
	}
	if len(own) == 0 && len(f.chain) == 0 {
		return e.finishStep(ctx, job, row, spec, StateCompleted, "", calls, last)
	}
	left := 0
	for _, t := range spec.Targets {
		if _, ok := own[t]; !ok && !f.excluded(t) {
			left++
		}
	}
	if spec.Chain == "" || spec.ChainEnd || (len(spec.Targets) > 0 && left == 0) {
		if int(row.BatchIndex) < spec.batches() {
			// Move the cursor past the last batch first, so the step reads
			// as every batch called, some targets failed (not as a failed
			// batch). A crash before the checkpoint lands back here.
			actx, cancel := bounded(ctx)
			n, err := e.q.StepAdvanceBatch(actx, e.pool, dbsqlc.StepAdvanceBatchParams{ID: row.ID, BatchIndex: row.BatchIndex, FailedTargets: failuresJSON(last), ExecToken: row.ExecToken})
			cancel()
			if err != nil {
				return fmt.Errorf("advance batch: %w", err)
			} else if n == 0 {
				return nil // ended or advanced elsewhere
			}
			calls, last = nil, nil
		}
		return e.finishStep(ctx, job, row, spec, StateFailed, failureSummary(spec, own, f.chain), calls, last)
	}
	return e.finishStep(ctx, job, row, spec, StateCompleted, "", calls, last)
}

// maxListedFailures bounds the targets a failure message names.
const maxListedFailures = 5

// failureSummary is the error of a step that failed for some targets:
// "1 of 9 target(s) failed: t4: reason", its own first, then the chain's
// ("… failed in step S: …").
func failureSummary(spec *stepSpec, own map[string]string, chain []chainFailure) string {
	var parts []string
	if len(own) > 0 {
		parts = append(parts, FailedTargetsMessage(own, len(spec.Targets), "target"))
	}
	for _, c := range chain {
		parts = append(parts, fmt.Sprintf("%d target(s) failed in step %s: %s", len(c.Failed), c.Step, listFailures(c.Failed)))
	}
	return strings.Join(parts, "; ")
}

// FailedTargetsMessage says which of a step's targets failed and why, in
// the caller's noun: "1 of 9 target(s) failed: t4: reason" (at most five
// named; a reason that names its target already is not prefixed with it).
func FailedTargetsMessage(failed map[string]string, targets int, noun string) string {
	return fmt.Sprintf("%d of %d %s(s) failed: %s", len(failed), targets, noun, listFailures(failed))
}

func listFailures(failed map[string]string) string {
	keys := slices.Sorted(maps.Keys(failed))
	var b strings.Builder
	for i, k := range keys {
		if i == maxListedFailures {
			fmt.Fprintf(&b, " (and %d more)", len(keys)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		if namesTarget(failed[k], k) {
			b.WriteString(failed[k]) // it names its target already
		} else {
			fmt.Fprintf(&b, "%s: %s", k, failed[k])
		}
	}
	return b.String()
}

// namesTarget reports whether msg names target as a word of its own.
func namesTarget(msg, target string) bool {
	isWord := func(r byte) bool {
		return r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
	}
	for i := 0; target != ""; {
		j := strings.Index(msg[i:], target)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(target)
		if (start == 0 || !isWord(msg[start-1])) && (end == len(msg) || !isWord(msg[end])) {
			return true
		}
		i = start + 1
	}
	return false
}
