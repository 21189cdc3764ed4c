package firmware

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/nicoflow/flow/backend"
	"github.com/nicoflow/flow/engine"
	"github.com/nicoflow/flow/inventory"
)

// This file holds the firmware steps (spec §8.6): FirmwareControl starts an
// update once and polls it through durable polls (engine.Result.PollAfter),
// keeping the start in its checkpoint so a re-run resumes the saved job
// instead of starting again; VerifyVersions (verify.go) then reads the
// installed versions back and compares them with the target;
// VerifyFirmwareConsistency checks that a type's components agree on their
// version.

// Host is what the firmware steps need from the operation that runs them,
// whose action params are P: operations implements it for its rule actions
// and registers the steps with the engine.
type Host[P any] interface {
	// Begin marks the task running on its first call and returns the
	// component manager and target of the call's batch.
	Begin(ctx context.Context, call engine.Call[P]) (*backend.Manager, backend.Target, error)
	// Job describes the call: its task and component type.
	Job(call engine.Call[P]) Job
	// Polling returns FirmwareControl's poll policy: the status poll
	// interval in effect and the bound on polling after the start.
	Polling(call engine.Call[P]) (Polling, error)
	// Verifying returns VerifyVersions' policy: how often a component not
	// yet at its target is read again, and the grace after the first read
	// during which it may still reach it (0: one read).
	Verifying(call engine.Call[P]) (Polling, error)
	// ReadinessGate answers how long to wait before the disruptive start
	// call (0: go ahead).
	ReadinessGate(ctx context.Context, call engine.Call[P]) (time.Duration, error)
	// Request returns the task's firmware request for the call's component
	// type, its authentication data still sealed.
	Request(ctx context.Context, call engine.Call[P]) (Request, error)
	// TypeTarget returns the whole target of the call's component type in
	// the task (for steps that run once per step rather than per batch) and
	// how many components it holds.
	TypeTarget(ctx context.Context, call engine.Call[P]) (backend.Target, int, error)
}

// Job describes one firmware step call.
type Job struct {
	TaskID uuid.UUID
	// ComponentType is the rule's type name ("Compute", "NVSwitch",
	// "PowerShelf"), which also selects per-type versions and credentials.
	ComponentType string
	// BatchSize is the step's max_parallel (0: one batch).
	BatchSize int
}

// Polling is FirmwareControl's poll policy.
type Polling struct {
	Interval, Timeout time.Duration
}

// Request is a task's firmware request: Version is the request's target
// version as given (possibly a JSON object keyed by component type), and
// Auth its sealed authentication data (nil: none).
type Request struct {
	backend.FirmwareRequest
	Auth *Envelope
}

// Steps are the firmware steps of operations whose action params are P.
type Steps[P any] struct {
	host   Host[P]
	keys   *Keyring
	logger *slog.Logger
}

// NewSteps returns the firmware steps over h. Keys may be nil (no
// data-encryption key: updates of tasks with credentials fail).
func NewSteps[P any](h Host[P], keys *Keyring, logger *slog.Logger) *Steps[P] {
	return &Steps[P]{host: h, keys: keys, logger: logger}
}

// phase says how far a FirmwareControl batch got.
type phase string

const (
	// phaseStarting is saved before the start call: a re-run that finds it
	// cannot know whether the call reached the device, so it compares the
	// device's job status with the snapshot taken before the call.
	phaseStarting phase = "starting"
	// phaseStarted is saved once the start call returned: re-runs only poll.
	phaseStarted phase = "started"
)

// checkpoint is a FirmwareControl batch's checkpoint. It holds no
// credential.
type checkpoint struct {
	Phase    phase                            `json:"phase"`
	Before   map[string]backend.FirmwareState `json:"before,omitempty"`
	Deadline time.Time                        `json:"deadline"`
}

// VersionFor extracts component type t's target version from the request's
// (spec §11.1): a JSON object keyed by compute / nvswitch / powershelf (any
// spelling inventory.ParseComponentType takes) gives this type's value
// (strings unquoted, anything else as raw JSON), or "" when the object names
// other types but not this one; any other value passes unchanged.
func VersionFor(version, t string) string {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(version), &obj); err != nil {
		return version
	}
	want, _ := inventory.ParseComponentType(t)
	typed := false
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		v := obj[k]
		kt, ok := inventory.ParseComponentType(k)
		if !ok || !slices.Contains(versionedTypes, kt) {
			continue
		}
		typed = true
		if kt != want {
			continue
		}
		var s string
		if err := json.Unmarshal(v, &s); err == nil {
			return s
		}
		return string(v)
	}
	if typed {
		return ""
	}
	return version
}

// versionedTypes are the types a per-type target version may name.
var versionedTypes = []inventory.ComponentType{inventory.ComponentTypeCompute, inventory.ComponentTypeNVSwitch, inventory.ComponentTypePowerShelf}

// startRequest builds the start request of the job's component type,
// opening its sealed credentials. Key errors are permanent: no retry can
// give this server the key.
func (s *Steps[P]) startRequest(r Request, j Job) (backend.FirmwareRequest, error) {
	fr := r.FirmwareRequest
	fr.Version = VersionFor(fr.Version, j.ComponentType)
	if r.Auth == nil {
		return fr, nil
	}
	if s.keys == nil {
		return fr, engine.Permanent(ErrNoKey)
	}
	data, err := s.keys.Open(r.Auth)
	if err != nil {
		return fr, engine.Permanent(err)
	}
	token, err := data.For(j.ComponentType)
	if err != nil {
		return fr, engine.Permanent(err)
	}
	fr.AccessToken = token
	return fr, nil
}

// jobStarted reports whether the device status after a possibly lost start
// call shows a job the call started: some component's state moved from the
// snapshot taken before it. Unchanged terminal states are ambiguous (a fast
// job may have run to the same end); the caller then starts again, which
// Core treats as a re-application of the same version.
func jobStarted(before map[string]backend.FirmwareState, now []backend.FirmwareStatus) bool {
	for _, s := range now {
		if s.State != before[s.Key] && !(before[s.Key] == "" && s.State == backend.FirmwareUnknown) {
			return true
		}
	}
	return false
}

func statusMap(sts []backend.FirmwareStatus) map[string]backend.FirmwareState {
	out := make(map[string]backend.FirmwareState, len(sts))
	for _, s := range sts {
		out[s.Key] = s.State
	}
	return out
}

// permanentIf marks errors that no retry can cure.
func permanentIf(err error) error {
	if errors.Is(err, backend.ErrNotConfigured) || errors.Is(err, backend.ErrUnsupported) {
		return engine.Permanent(err)
	}
	return err
}

// Control is the FirmwareControl step: it starts a firmware update on the
// batch once, then polls its status until every job has ended or
// poll_timeout passed (spec §8.6); with some failed and some completed,
// only the failed components fail (engine.Result.Failed), with all failed
// the batch does. The start is recorded in the
// checkpoint, so a re-run after a crash resumes polling and never starts
// the same update twice.
func (s *Steps[P]) Control(ctx context.Context, call engine.Call[P]) (engine.Result, error) {
	m, target, err := s.host.Begin(ctx, call)
	if err != nil {
		return engine.Result{}, err
	}
	j := s.host.Job(call)
	p, err := s.host.Polling(call)
	if err != nil {
		return engine.Result{}, engine.Permanent(err)
	}
	var st checkpoint
	if _, err := call.Checkpoint(&st); err != nil {
		return engine.Result{}, err
	}
	if st.Phase == "" {
		if wait, err := s.host.ReadinessGate(ctx, call); err != nil || wait > 0 {
			return engine.Result{PollAfter: wait}, err
		}
	}
	var components []string
	if st.Phase != phaseStarted {
		r, err := s.host.Request(ctx, call)
		if err != nil {
			return engine.Result{}, err
		}
		fr, err := s.startRequest(r, j)
		if err != nil {
			return engine.Result{}, fmt.Errorf("failed to start firmware update: %w", err)
		}
		components = fr.Components
		start := true
		if st.Phase == phaseStarting {
			// A previous run may have crashed after the start call reached
			// the device and before its checkpoint committed.
			now, err := m.FirmwareStatus(ctx, target, components)
			if err != nil {
				return engine.Result{}, permanentIf(fmt.Errorf("read %s firmware status before restart: %w", j.ComponentType, err))
			}
			start = !jobStarted(st.Before, now)
			if !start {
				s.logger.InfoContext(ctx, "firmware update already started; resuming polling", "task_id", j.TaskID, "step", call.Step)
			}
		} else {
			before, err := m.FirmwareStatus(ctx, target, components)
			if err != nil && errors.Is(err, backend.ErrNotConfigured) {
				return engine.Result{}, engine.Permanent(err)
			}
			st = checkpoint{Phase: phaseStarting, Before: statusMap(before)}
			if err := call.SaveCheckpoint(ctx, st); err != nil {
				return engine.Result{}, err
			}
		}
		if start {
			if err := m.StartFirmware(ctx, target, fr); err != nil {
				return engine.Result{}, permanentIf(fmt.Errorf("failed to start firmware update: %w", err))
			}
		}
		st = checkpoint{Phase: phaseStarted, Deadline: time.Now().Add(p.Timeout)}
		if err := call.SaveCheckpoint(ctx, st); err != nil {
			return engine.Result{}, err
		}
	} else if j.ComponentType == "PowerShelf" {
		// PSM narrows its status query to the requested sub-targets.
		r, err := s.host.Request(ctx, call)
		if err != nil {
			return engine.Result{}, err
		}
		components = r.Components
	}
	return s.poll(ctx, call, j, p, m, target, components, st.Deadline)
}

// unknownJobGrace is how long after its start a component may go without
// a firmware job at the backend (it may take a moment to show one) before
// its update counts as lost.
func unknownJobGrace(p Polling) time.Duration { return max(3*p.Interval, time.Second) }

// errJobUnknown is the reason of a component whose started update the
// backend no longer knows (a backend restarted without its jobs).
const errJobUnknown = "the backend reports no firmware update job for this component (the started job is unknown to it, lost in a backend restart?)"

// poll is one status poll of a started update. Read errors are tolerated
// until the deadline. A component the backend (NICo Core) reports no job
// for, well after the start, has lost its update: it fails with that
// reason instead of being polled until the deadline.
func (s *Steps[P]) poll(ctx context.Context, call engine.Call[P], j Job, p Polling, m *backend.Manager, target backend.Target, components []string, deadline time.Time) (engine.Result, error) {
	sts, err := m.FirmwareStatus(ctx, target, components)
	if errors.Is(err, backend.ErrNotConfigured) || errors.Is(err, backend.ErrUnsupported) {
		return engine.Result{}, engine.Permanent(err)
	}
	if err == nil {
		if m.Impl != backend.ImplPSM && time.Since(deadline.Add(-p.Timeout)) >= unknownJobGrace(p) {
			// Core answers for every requested component: unknown is "no
			// job" (PSM only answers for what it has, so an empty reply
			// there means nothing pending).
			for i, fs := range sts {
				if fs.State == backend.FirmwareUnknown {
					sts[i].State, sts[i].Message = backend.FirmwareFailed, cmp.Or(fs.Message, errJobUnknown)
				}
			}
		}
		completed := 0
		var failed, finished []string
		for _, fs := range sts {
			switch fs.State {
			case backend.FirmwareCompleted:
				completed++
				finished = append(finished, fs.Key)
			case backend.FirmwareFailed:
				// Each failed component once, with its reason when the
				// backend gave one.
				failed = append(failed, strings.TrimSuffix(fs.Key+": "+fs.Message, ": "))
			}
		}
		done := call.Batch * j.BatchSize
		progress := engine.Progress{
			Completed: done + completed, Failed: len(failed), Done: finished, Until: deadline,
			Message: fmt.Sprintf("updating firmware, %d of %d completed", completed, len(sts)),
		}
		if perr := call.ReportProgress(ctx, progress); errors.Is(perr, engine.ErrStepEnded) {
			return engine.Result{}, perr
		}
		// A failed job is final, but the others are followed to their end
		// (an update is not abandoned half-way because another failed).
		if len(failed) > 0 && (completed+len(failed) == len(sts) || !time.Now().Before(deadline)) {
			if res, ok := partialFailure(call.Targets, sts, completed, j, p); ok {
				return res, nil
			}
			slices.Sort(failed)
			return engine.Result{}, engine.Permanent(errors.New("firmware update failed for components: " + strings.Join(failed, "; ")))
		}
		if completed == len(sts) {
			return engine.Result{}, nil
		}
	} else {
		s.logger.WarnContext(ctx, "firmware status read failed", "task_id", j.TaskID, "step", call.Step, "error", err)
	}
	if !time.Now().Before(deadline) {
		return engine.Result{}, engine.Permanent(fmt.Errorf("%s firmware update timed out after %s", j.ComponentType, p.Timeout))
	}
	return engine.Result{PollAfter: min(p.Interval, time.Until(deadline)+time.Millisecond)}, nil
}

// partialFailure is the answer of a batch whose updates ended, some
// failed and some completed: the failed ones (and, past the deadline, the
// unfinished ones) fail alone and the completed ones go on through the rest
// of their rule step. ok is false when none completed, or when a status
// names no target of the call: the batch then fails whole.
func partialFailure(targets []string, sts []backend.FirmwareStatus, completed int, j Job, p Polling) (engine.Result, bool) {
	if completed == 0 {
		return engine.Result{}, false
	}
	failed := map[string]string{}
	for _, fs := range sts {
		if !slices.Contains(targets, fs.Key) {
			return engine.Result{}, false
		}
		switch fs.State {
		case backend.FirmwareCompleted:
		case backend.FirmwareFailed:
			failed[fs.Key] = cmp.Or(fs.Message, "firmware update failed")
		default:
			failed[fs.Key] = fmt.Sprintf("%s firmware update timed out after %s", j.ComponentType, p.Timeout)
		}
	}
	return engine.Result{Failed: failed}, true
}

// VerifyConsistency is the VerifyFirmwareConsistency step: every component
// of the step's type must report the same firmware version (spec §8.6;
// NVSwitch in the built-in bring-up rule).
func (s *Steps[P]) VerifyConsistency(ctx context.Context, call engine.Call[P]) (engine.Result, error) {
	m, _, err := s.host.Begin(ctx, call)
	if err != nil {
		return engine.Result{}, err
	}
	j := s.host.Job(call)
	target, n, err := s.host.TypeTarget(ctx, call)
	if err != nil {
		return engine.Result{}, err
	}
	if n == 0 {
		return engine.Result{}, engine.Permanent(errors.New("no targets"))
	}
	versions, err := m.FirmwareVersions(ctx, target)
	if err != nil {
		return engine.Result{}, permanentIf(err)
	}
	keys := target.IDs
	if len(target.MACs) > 0 {
		keys = target.MACs
	}
	seen := map[string][]string{}
	var missing []string
	for _, k := range keys {
		v, ok := versions[k]
		if !ok {
			missing = append(missing, k)
			continue
		}
		seen[v] = append(seen[v], k)
	}
	if len(missing) > 0 {
		return engine.Result{}, fmt.Errorf("firmware version unknown for %s components: [%s]", j.ComponentType, strings.Join(missing, " "))
	}
	if len(seen) > 1 {
		var parts []string
		for v, ks := range seen {
			parts = append(parts, fmt.Sprintf("%s on %d", v, len(ks)))
		}
		slices.Sort(parts)
		return engine.Result{}, fmt.Errorf("firmware versions of %s components differ: %s", j.ComponentType, strings.Join(parts, ", "))
	}
	return engine.Result{}, nil
}
