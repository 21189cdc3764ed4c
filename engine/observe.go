package engine

import (
	"context"
	"encoding/json"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/riverqueue/river"
)

// Observer is told what the engine did, for metrics and logs: each action
// call as it returns, and each step end, stage start and run end once the
// transaction that recorded it has committed (never for one that rolled
// back). Calls come from the engine's goroutines and must return quickly.
type Observer interface {
	CallEnded(ctx context.Context, ev CallEvent)
	StepEnded(ctx context.Context, ev StepEvent)
	StageStarted(ctx context.Context, ev StageEvent)
	RunEnded(ctx context.Context, run RunSummary)
	// CheckpointCommitted reports one checkpoint transaction: how many
	// steps it committed, how long it took and its error.
	CheckpointCommitted(steps int, d time.Duration, err error)
}

// ChainObserver, when the Observer implements it, is told of each step a
// job goes on with after its first ("Chained steps" in docs/engine.md),
// before the step is worked: the context it returns is the step's (a
// tracing span of its own, say, where the job's span covers its first
// step), and end is called once the job is done with the step.
type ChainObserver interface {
	StepHandedOn(ctx context.Context, run RunID, step StepID) (stepCtx context.Context, end func())
}

// StepInfo names a step in events: its run's labels (Plan.Labels), its
// run, stage and step, and its action.
type StepInfo struct {
	Labels    map[string]string
	RunID     RunID
	StepID    StepID
	Stage     int // 0-based
	StageName string
	Step      string
	Action    string
}

// CallEvent is one action call that returned.
type CallEvent struct {
	StepInfo
	Batch, Batches       int // 0-based batch
	Attempt, MaxAttempts int // 1-based attempt of the batch
	Duration             time.Duration
	// Err is the call's error (nil: it answered).
	Err error
}

// StepEvent is a step that ended: completed, failed or cancelled.
type StepEvent struct {
	StepInfo
	State State
	Error string
	// Calls is how many calls the step's last batch took (0 when unknown).
	Calls int
	// Duration is from the step's start (its stage's) to its end.
	Duration time.Duration
}

// StageEvent is a stage that started after the first (the first starts
// with its run), once the stage before it ended well.
type StageEvent struct {
	Labels    map[string]string
	RunID     RunID
	Stage     int    // 0-based
	StageName string // Stage.Name
	Ended     string // the name of the stage that ended
}

// Keys of a job's River metadata besides the run's labels.
const (
	metaRunID  = "run_id"
	metaStepID = "step_id"
	metaStage  = "stage"
	metaStep   = "step"
	metaAction = "action"
	// metaLabels is the key of the run's labels in the run's metadata.
	metaLabels = "labels"
)

// tagUnsafe are the characters River refuses in a tag.
var tagUnsafe = regexp.MustCompile(`[^\w\-]+`)

// jobOpts are the River insert options of a step's job: its metadata names
// the run's labels, the run, stage, step and action, and its tags are the
// labels' values and the action (what River UI lists and filters by).
func jobOpts(labels map[string]string, run RunID, step StepID, stageName, stepName, action string) *river.InsertOpts {
	meta := make(map[string]string, len(labels)+5)
	var tags []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		meta[k] = labels[k]
		tags = appendTag(tags, labels[k])
	}
	meta[metaRunID] = strconv.FormatInt(int64(run), 10)
	meta[metaStepID] = strconv.FormatInt(int64(step), 10)
	meta[metaStage], meta[metaStep], meta[metaAction] = stageName, stepName, action
	tags = appendTag(tags, action)
	b, _ := json.Marshal(meta)
	priority, queue := priorityNormal, QueueName
	if labels[LabelPriority] == PriorityUrgent {
		priority, queue = priorityUrgent, UrgentQueue
	}
	return &river.InsertOpts{Metadata: b, Tags: tags, Priority: priority, Queue: queue}
}

// withTrace adds the W3C trace context trace to the job metadata of opts.
func withTrace(opts *river.InsertOpts, trace map[string]string) *river.InsertOpts {
	if len(trace) == 0 {
		return opts
	}
	var meta map[string]string
	_ = json.Unmarshal(opts.Metadata, &meta)
	if meta == nil {
		meta = map[string]string{}
	}
	maps.Copy(meta, trace)
	opts.Metadata, _ = json.Marshal(meta)
	return opts
}

// appendTag appends v as a River tag (2 to 255 characters of letters,
// digits, _ and -), made safe.
func appendTag(tags []string, v string) []string {
	t := tagUnsafe.ReplaceAllString(v, "_")
	if len(t) > 255 {
		t = t[:255]
	}
	for len(t) > 0 && t[len(t)-1] == '-' {
		t = t[:len(t)-1]
	}
	for len(t) > 0 && t[0] == '-' {
		t = t[1:]
	}
	if len(t) < 3 {
		return tags
	}
	return append(tags, t)
}

// jobLabels returns the run's labels from a step job's metadata: every
// string the engine did not add itself.
func jobLabels(metadata []byte) map[string]string {
	var m map[string]json.RawMessage
	if json.Unmarshal(metadata, &m) != nil {
		return nil
	}
	labels := make(map[string]string, len(m))
	for k, v := range m {
		switch {
		case k == metaRunID, k == metaStepID, k == metaStage, k == metaStep, k == metaAction:
			continue // the engine's own
		case k == "traceparent", k == "tracestate", strings.Contains(k, ":"), strings.HasSuffix(k, "_at"):
			continue // trace context a middleware added, River's own keys (cancel_attempted_at, river:log…)
		case len(v) == 0 || v[0] != '"':
			continue // not a string: River's own (snoozes…)
		}
		var s string
		if json.Unmarshal(v, &s) == nil {
			labels[k] = s
		}
	}
	return labels
}

// runLabels returns the labels stored in a run's metadata.
func runLabels(metadata []byte) map[string]string {
	var m struct {
		Labels map[string]string `json:"labels"`
	}
	_ = json.Unmarshal(metadata, &m)
	return m.Labels
}

// stepInfo names row's step for events, with its run's labels (from its
// job's metadata: jobLabels).
func stepInfo(labels map[string]string, row stepRow, spec *stepSpec) StepInfo {
	return StepInfo{
		Labels: labels, RunID: RunID(row.RunID), StepID: StepID(row.ID),
		Stage: int(row.StageIndex), StageName: spec.StageName, Step: spec.Name, Action: spec.Action,
	}
}

// LogAttrs returns the step's labels and names as slog key-value pairs:
// the labels first (task_id, rack, operation…), then stage, step, action
// and the engine's run and step IDs.
func (s StepInfo) LogAttrs() []any {
	attrs := make([]any, 0, 2*len(s.Labels)+12)
	for _, k := range slices.Sorted(maps.Keys(s.Labels)) {
		attrs = append(attrs, k, s.Labels[k])
	}
	return append(attrs, "stage", s.StageName, "step", s.Step, "action", s.Action, "run_id", int64(s.RunID), "step_id", int64(s.StepID))
}

type nopObserver struct{}

func (nopObserver) CallEnded(context.Context, CallEvent)          {}
func (nopObserver) StepEnded(context.Context, StepEvent)          {}
func (nopObserver) StageStarted(context.Context, StageEvent)      {}
func (nopObserver) RunEnded(context.Context, RunSummary)          {}
func (nopObserver) CheckpointCommitted(int, time.Duration, error) {}
