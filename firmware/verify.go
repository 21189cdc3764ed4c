package firmware

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nicoflow/flow/backend"
	"github.com/nicoflow/flow/engine"
	"github.com/nicoflow/flow/inventory"
)

// This file holds the verification of a firmware update (docs/firmware.md,
// "Verified upgrades"): once the backend has reported the update completed,
// VerifyVersions reads the installed versions back and fails the devices
// still not at the target.

// primaryComponents are the sub-components a plain target version with no
// sub-targets is verified on: the one the type's default bundle is known
// by (Core installs the whole bundle; PSM the PMC).
var primaryComponents = map[inventory.ComponentType]string{
	inventory.ComponentTypeCompute:    "bmc",
	inventory.ComponentTypeNVSwitch:   "bmc",
	inventory.ComponentTypePowerShelf: "pmc",
}

// Expected returns the version each sub-component of component type t
// (as the rules spell it, "Compute") must have once a firmware request for
// version and sub-targets components has completed, by lowercase
// sub-component name. The type's target version (VersionFor) decides:
//
//   - a JSON object maps sub-components to versions ({"bmc":"2.0",
//     "bios":"3.1"}): each at its version (narrowed to the sub-targets,
//     when some are named); a value that is not a string counts as its
//     JSON text;
//   - a plain string with sub-targets named: each named one at it;
//   - a plain string with none named (the backend's default bundle): the
//     type's primary sub-component at it (compute and NVLink switch "bmc",
//     power shelf "pmc");
//   - an empty target version (the backend decides): nothing, so nothing
//     can be verified.
func Expected(version, t string, components []string) map[string]string {
	v := strings.TrimSpace(VersionFor(version, t))
	if v == "" {
		return nil
	}
	named := make([]string, 0, len(components))
	for _, c := range components {
		named = append(named, strings.ToLower(strings.TrimSpace(c)))
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(v), &obj); err == nil && obj != nil {
		out := map[string]string{}
		for k, raw := range obj {
			k = strings.ToLower(strings.TrimSpace(k))
			if len(named) > 0 && !slices.Contains(named, k) {
				continue
			}
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				s = string(raw)
			}
			out[k] = strings.TrimSpace(s)
		}
		return out
	}
	if len(named) > 0 {
		out := make(map[string]string, len(named))
		for _, c := range named {
			out[c] = v
		}
		return out
	}
	ct, _ := inventory.ParseComponentType(t)
	if p, ok := primaryComponents[ct]; ok {
		return map[string]string{p: v}
	}
	return nil
}

// Mismatches compares one device's installed firmware (sub-component →
// every instance's version, as backend.Installed holds it) with want
// (Expected) by CompareVersions, and says what is not at its target, one
// entry per sub-component in name order: "bmc installed 1.0, target 2.0";
// every instance must be at the target ("nic installed 1.0 and 2.0, target
// 2.0"); a sub-component not reported, or whose version cannot be ordered
// against the target, is not at it and says so. Nil means all are.
func Mismatches(want map[string]string, installed map[string][]string) []string {
	var out []string
	for _, c := range slices.Sorted(maps.Keys(want)) {
		target := want[c]
		got := installed[c]
		if len(got) == 0 {
			out = append(out, fmt.Sprintf("%s not reported, target %s", c, target))
			continue
		}
		at, comparable := true, true
		for _, v := range got {
			n, ok := CompareVersions(v, target)
			comparable = comparable && ok
			at = at && ok && n == 0
		}
		if at {
			continue
		}
		msg := fmt.Sprintf("%s installed %s, target %s", c, strings.Join(got, " and "), target)
		if !comparable {
			msg += " (not comparable)"
		}
		out = append(out, msg)
	}
	return out
}

// describe lists want as "bios 3.1, bmc 2.0".
func describe(want map[string]string) string {
	parts := make([]string, 0, len(want))
	for _, c := range slices.Sorted(maps.Keys(want)) {
		parts = append(parts, c+" "+want[c])
	}
	return strings.Join(parts, ", ")
}

// verifyCheckpoint is a VerifyVersions batch's checkpoint: when its grace
// ends (computed at its first read, kept across restarts), the reads so
// far and the components already seen at their target (not read again).
type verifyCheckpoint struct {
	Deadline time.Time `json:"deadline"`
	Reads    int       `json:"reads"`
	Verified []string  `json:"verified,omitempty"`
}

// NotVerified is the report line of a verification with nothing to
// compare: the task gave no target version, so the backend chose it.
const NotVerified = "installed firmware not verified: the task gave no target version (the backend chose it)"

// VerifyVersions is the verification Flow adds after every FirmwareControl
// action (operations' planner puts it in every firmware rule step): it
// reads the installed firmware of the batch's components back from their
// backend (Manager.InstalledFirmware: Core, or PSM for the shelves it
// manages) and compares it with the task's target (Expected, Mismatches).
// A component not at its target is read again every Polling.Interval
// (durably: engine.Result.PollAfter) until Polling.Timeout, the grace for
// a backend that lags behind its own "completed" (0: one read), has passed
// since the first read; then it fails, naming the sub-component, the
// target and the installed version. Components seen at their target are
// kept in the checkpoint and not read again, and the action starts
// nothing: a re-run after a crash repeats only reads. Read errors are
// tolerated until the grace ends, then retried by the step's policy. With
// no target version there is nothing to compare: the step reports so and
// ends.
func (s *Steps[P]) VerifyVersions(ctx context.Context, call engine.Call[P]) (engine.Result, error) {
	m, target, err := s.host.Begin(ctx, call)
	if err != nil {
		return engine.Result{}, err
	}
	j := s.host.Job(call)
	p, err := s.host.Verifying(call)
	if err != nil {
		return engine.Result{}, engine.Permanent(err)
	}
	r, err := s.host.Request(ctx, call)
	if err != nil {
		return engine.Result{}, err
	}
	want := Expected(r.Version, j.ComponentType, r.Components)
	if len(want) == 0 {
		if perr := call.ReportProgress(ctx, engine.Progress{Completed: len(call.Targets), Message: NotVerified}); errors.Is(perr, engine.ErrStepEnded) {
			return engine.Result{}, perr
		}
		return engine.Result{}, nil
	}
	var st verifyCheckpoint
	if ok, err := call.Checkpoint(&st); err != nil {
		return engine.Result{}, err
	} else if !ok {
		st.Deadline = time.Now().Add(p.Timeout)
	}
	st.Reads++
	source := "Core"
	if m.Impl == backend.ImplPSM {
		source = "PSM"
	}
	keys := targetKeys(target)
	var left []string
	for _, k := range keys {
		if !slices.Contains(st.Verified, k) {
			left = append(left, k)
		}
	}
	failed := map[string]string{}
	if len(left) > 0 {
		installed, err := m.InstalledFirmware(ctx, narrow(target, left))
		if errors.Is(err, backend.ErrNotConfigured) || errors.Is(err, backend.ErrUnsupported) {
			return engine.Result{}, engine.Permanent(err)
		}
		if err != nil {
			if !time.Now().Before(st.Deadline) {
				return engine.Result{}, fmt.Errorf("read installed %s firmware: %w", j.ComponentType, err)
			}
			s.logger.WarnContext(ctx, "installed firmware read failed", "task_id", j.TaskID, "step", call.Step, "error", err)
			return s.verifyAgain(ctx, call, p, st, len(keys), want, source)
		}
		byKey := make(map[string]backend.Installed, len(installed))
		for k, in := range installed {
			byKey[strings.ToLower(k)] = in
		}
		for _, k := range left {
			in, ok := byKey[strings.ToLower(k)]
			switch {
			case !ok:
				failed[k] = "installed firmware not reported"
			case in.Err != nil:
				failed[k] = "installed firmware unreadable: " + in.Err.Error()
			default:
				if mm := Mismatches(want, in.Components); len(mm) > 0 {
					failed[k] = strings.Join(mm, "; ")
				} else {
					st.Verified = append(st.Verified, k)
				}
			}
		}
	}
	if len(failed) == 0 {
		msg := fmt.Sprintf("installed firmware read back from %s: %d of %d at target (%s)", source, len(keys), len(keys), describe(want))
		if perr := call.ReportProgress(ctx, engine.Progress{Completed: len(keys), Done: keys, Message: msg}); errors.Is(perr, engine.ErrStepEnded) {
			return engine.Result{}, perr
		}
		return engine.Result{}, nil
	}
	if time.Now().Before(st.Deadline) {
		return s.verifyAgain(ctx, call, p, st, len(keys), want, source)
	}
	s.logger.WarnContext(ctx, "firmware not at target after its update completed", "task_id", j.TaskID, "step", call.Step, "components", len(failed))
	return engine.Result{Failed: failed}, nil
}

// verifyAgain saves the verification's checkpoint and reads again after
// the poll interval, or at the end of the grace if that comes first.
func (s *Steps[P]) verifyAgain(ctx context.Context, call engine.Call[P], p Polling, st verifyCheckpoint, total int, want map[string]string, source string) (engine.Result, error) {
	if err := call.SaveCheckpoint(ctx, st); err != nil {
		return engine.Result{}, err
	}
	progress := engine.Progress{
		Completed: len(st.Verified), Done: st.Verified, Until: st.Deadline,
		Message: fmt.Sprintf("verifying installed firmware (%s) through %s: %d of %d at target, read %d", describe(want), source, len(st.Verified), total, st.Reads),
	}
	if perr := call.ReportProgress(ctx, progress); errors.Is(perr, engine.ErrStepEnded) {
		return engine.Result{}, perr
	}
	return engine.Result{PollAfter: max(min(p.Interval, time.Until(st.Deadline)+time.Millisecond), time.Millisecond)}, nil
}

// targetKeys returns the identifiers t names.
func targetKeys(t backend.Target) []string {
	if len(t.MACs) > 0 {
		return t.MACs
	}
	return t.IDs
}

// narrow returns the target of keys, named as t names its components.
func narrow(t backend.Target, keys []string) backend.Target {
	if len(t.MACs) > 0 {
		return backend.Target{MACs: keys}
	}
	return backend.Target{IDs: keys}
}
