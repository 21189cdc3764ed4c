package baseline

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/rollout"
)

// ApplyInput asks for a plan that brings the site to a baseline.
type ApplyInput struct {
	Ref     Ref
	RunName string
	// CanaryRacks is the first wave's size in racks, rounded up to whole
	// NVLink domains (0: 1); Waves is how many waves follow (0: 2).
	CanaryRacks       int
	Waves             int
	MaxConcurrent     int // 0: 10
	MaxFailures       int // failure-count gate per wave; 0: 1
	DryRun            bool
	IncludeDowngrades bool
	// AllowOverlap creates the run even when its racks overlap an
	// unfinished run's (rollout.ErrRunOverlap otherwise).
	AllowOverlap bool
	CreatedBy    string
}

// Wave is one planned wave: its racks, and the NVLink domains they make up
// whole.
type Wave struct {
	Racks   []ApplyRack
	Domains []string
}

// ApplyRack is one rack of a plan.
type ApplyRack struct {
	ID   uuid.UUID
	Name string
}

// ApplyPlan is what Apply planned (and, unless a dry run, created).
type ApplyPlan struct {
	Baseline Baseline
	RunID    uuid.UUID // uuid.Nil: nothing created
	Waves    []Wave
	Racks    int
	Devices  int
	// TargetVersion is the per-type map of sub-component versions every
	// rack's task installs: {"compute": {"bmc": "2.0"}, ...}.
	TargetVersion string
	// Message says what was done, or why nothing was.
	Message string
}

// RunCreator creates an operation run; rollout.Service satisfies it.
type RunCreator interface {
	Create(ctx context.Context, tx pgx.Tx, in rollout.CreateRunInput) (uuid.UUID, error)
}

// Apply plans an operation run over exactly the racks with devices below
// the baseline (and above it, with IncludeDowngrades), in waves that keep
// each NVLink domain whole (every rack of a domain in one wave, so no gate
// is evaluated on a half-upgraded domain), the canary wave first, each
// wave gated by a failure count. Each rack's task upgrades the component
// types that differ to the baseline's versions, given to Core as a JSON
// map per type. Devices whose sub-components need versions that disagree
// with the versions the plan picked (several models with different
// entries) are left for a later apply, and the message says how many.
// With nothing to do it creates nothing and says so. It writes only
// through tx (the run and its first tasks); the caller commits.
func (s *Service) Apply(ctx context.Context, tx pgx.Tx, runs RunCreator, in ApplyInput) (ApplyPlan, error) {
	switch {
	case in.CanaryRacks < 0:
		return ApplyPlan{}, invalid("canary_racks", "must not be negative")
	case in.Waves < 0 || in.Waves > 100:
		return ApplyPlan{}, invalid("waves", "must be between 0 and 100")
	case in.MaxConcurrent < 0:
		return ApplyPlan{}, invalid("max_concurrent", "must not be negative")
	case in.MaxFailures < 0:
		return ApplyPlan{}, invalid("max_failures", "must not be negative")
	}
	in.CanaryRacks = cmp.Or(in.CanaryRacks, 1)
	in.Waves = cmp.Or(in.Waves, 2)
	in.MaxConcurrent = cmp.Or(in.MaxConcurrent, 10)
	in.MaxFailures = cmp.Or(in.MaxFailures, 1)
	b, err := s.Get(ctx, tx, in.Ref)
	if err != nil {
		return ApplyPlan{}, err
	}
	plan := ApplyPlan{Baseline: b}
	states, err := s.Evaluate(ctx, tx, b, Query{})
	if err != nil {
		return ApplyPlan{}, err
	}
	wanted := func(st string) bool { return st == StateUpgrade || in.IncludeDowngrades && st == StateDowngrade }
	// The version each (type, sub-component) goes to: the one most target
	// devices need.
	votes := map[[2]string]map[string]int{}
	for _, st := range states {
		if !wanted(st.State) {
			continue
		}
		t := typeOf(st.Device.Type)
		for _, d := range st.Differences {
			if wanted(d.State) {
				k := [2]string{t, d.Component}
				if votes[k] == nil {
					votes[k] = map[string]int{}
				}
				votes[k][d.Desired]++
			}
		}
	}
	chosen := majority(votes)
	type rackPlan struct {
		id           uuid.UUID
		name, domain string
		domainKey    string
		types        map[string]bool
		devices      map[string]int // targeted devices by type
	}
	racks := map[uuid.UUID]*rackPlan{}
	deferred := 0
	var skipped [3]int // unknown, updating, downgrade (not asked for)
	for _, st := range states {
		switch {
		case st.State == StateUnknown:
			skipped[0]++
		case st.State == StateUpdating:
			skipped[1]++
		case st.State == StateDowngrade && !in.IncludeDowngrades:
			skipped[2]++
		}
		if !wanted(st.State) || st.Device.RackID == nil {
			continue
		}
		t := typeOf(st.Device.Type)
		agrees := true
		for _, d := range st.Differences {
			if wanted(d.State) && chosen[t][d.Component] != d.Desired {
				agrees = false
			}
		}
		if !agrees {
			deferred++
			continue
		}
		rp := racks[*st.Device.RackID]
		if rp == nil {
			rp = &rackPlan{id: *st.Device.RackID, name: st.Device.RackName, types: map[string]bool{}, devices: map[string]int{}}
			if st.Device.DomainID != nil {
				rp.domainKey, rp.domain = st.Device.DomainID.String(), cmp.Or(st.Device.DomainName, st.Device.DomainID.String())
			} else {
				rp.domainKey = "rack:" + rp.id.String()
			}
			racks[rp.id] = rp
		}
		rp.types[t] = true
		rp.devices[t]++
		plan.Devices++
	}
	// Each rack's task runs the firmware rule in force for it: component
	// types that rule has no step for (power shelves, under the built-in
	// rule) cannot be upgraded by the run, so they are left out and said.
	undriven := map[string]int{}
	if len(racks) > 0 {
		ids := make([]uuid.UUID, 0, len(racks))
		for id := range racks {
			ids = append(ids, id)
		}
		rules, err := s.cfg.Operations.ResolveRules(ctx, tx, operations.OperationTypeFirmwareControl, operations.CodeUpgrade, ids)
		if err != nil {
			return ApplyPlan{}, err
		}
		for id, rp := range racks {
			rule, ok := rules[id]
			for t := range rp.types {
				if ok && rule.Rule.Definition.HasStepFor([]operations.ComponentType{operations.ComponentType(inventoryType(t))}) {
					continue
				}
				undriven[t] += rp.devices[t]
				plan.Devices -= rp.devices[t]
				delete(rp.types, t)
			}
			if len(rp.types) == 0 {
				delete(racks, id)
			}
		}
	}
	plan.Racks = len(racks)
	// Versions only for the types some rack's task upgrades.
	for t := range chosen {
		used := false
		for _, rp := range racks {
			used = used || rp.types[t]
		}
		if !used {
			delete(chosen, t)
		}
	}
	skippedNote := ""
	if skipped != [3]int{} {
		skippedNote = fmt.Sprintf(" (not targeted: %d unknown, %d already updating, %d above the baseline)", skipped[0], skipped[1], skipped[2])
	}
	for _, t := range Types {
		if n := undriven[t]; n > 0 {
			skippedNote += fmt.Sprintf("; %d %s devices below the baseline are left out: the firmware rule in force has no %s step (give it one: docs/operation-rules.md)", n, t, inventoryType(t))
		}
	}
	if len(racks) == 0 {
		what := "no device is below"
		if len(undriven) > 0 {
			what = "no device the firmware rules upgrade is below"
		}
		plan.Message = fmt.Sprintf("nothing to do: %s baseline %s revision %d%s; no run created", what, b.Name, b.Revision.Revision, skippedNote)
		return plan, nil
	}
	// Group racks by NVLink domain (a rack with none is its own group),
	// then fill waves with whole groups: the canary first, the rest split
	// into in.Waves waves of about equal racks.
	groups := map[string][]*rackPlan{}
	for _, rp := range racks {
		groups[rp.domainKey] = append(groups[rp.domainKey], rp)
	}
	keys := slices.Collect(mapKeys(groups))
	for _, k := range keys {
		slices.SortFunc(groups[k], func(a, b *rackPlan) int {
			return cmp.Or(strings.Compare(a.name, b.name), strings.Compare(a.id.String(), b.id.String()))
		})
	}
	// Domains by name first, then the racks in none, by name.
	slices.SortFunc(keys, func(a, b string) int {
		da, db := groups[a][0].domain, groups[b][0].domain
		none := func(d string) int {
			if d == "" {
				return 1
			}
			return 0
		}
		return cmp.Or(cmp.Compare(none(da), none(db)), strings.Compare(da, db), strings.Compare(groups[a][0].name, groups[b][0].name))
	})
	var waves [][]*rackPlan
	var cur []*rackPlan
	i := 0
	for ; i < len(keys) && len(cur) < in.CanaryRacks; i++ {
		cur = append(cur, groups[keys[i]]...)
	}
	waves = append(waves, cur)
	left := 0
	for _, k := range keys[i:] {
		left += len(groups[k])
	}
	if left > 0 {
		per := (left + in.Waves - 1) / in.Waves
		cur = nil
		for _, k := range keys[i:] {
			if len(cur) > 0 && len(cur)+len(groups[k]) > per && len(waves) < in.Waves {
				waves = append(waves, cur)
				cur = nil
			}
			cur = append(cur, groups[k]...)
		}
		waves = append(waves, cur)
	}
	targetVersion, err := json.Marshal(chosen)
	if err != nil {
		return ApplyPlan{}, err
	}
	plan.TargetVersion = string(targetVersion)
	var rackTargets []inventory.RackTarget
	var waveIDs [][]uuid.UUID
	for _, w := range waves {
		var ids []uuid.UUID
		pw := Wave{}
		seenDomain := map[string]bool{}
		for _, rp := range w {
			ids = append(ids, rp.id)
			pw.Racks = append(pw.Racks, ApplyRack{ID: rp.id, Name: rp.name})
			if rp.domain != "" && !seenDomain[rp.domain] {
				seenDomain[rp.domain] = true
				pw.Domains = append(pw.Domains, rp.domain)
			}
			var types []inventory.ComponentType
			for _, t := range Types {
				if rp.types[t] {
					types = append(types, inventoryType(t))
				}
			}
			rackTargets = append(rackTargets, inventory.RackTarget{Rack: inventory.RackRef{ID: rp.id}, Types: types})
		}
		waveIDs = append(waveIDs, ids)
		plan.Waves = append(plan.Waves, pw)
	}
	deferredNote := ""
	if deferred > 0 {
		deferredNote = fmt.Sprintf("; %d devices need versions that differ from this plan's (other models): apply again when it ends", deferred)
	}
	if in.DryRun {
		plan.Message = fmt.Sprintf("dry run: would upgrade %d devices on %d racks in %d waves to baseline %s revision %d%s%s",
			plan.Devices, plan.Racks, len(plan.Waves), b.Name, b.Revision.Revision, skippedNote, deferredNote)
		return plan, nil
	}
	name := cmp.Or(strings.TrimSpace(in.RunName), fmt.Sprintf("baseline-%s-r%d", b.Name, b.Revision.Revision))
	tv := plan.TargetVersion
	id, err := runs.Create(ctx, tx, rollout.CreateRunInput{
		Name:        name,
		Description: fmt.Sprintf("brings %d racks to firmware baseline %s revision %d", plan.Racks, b.Name, b.Revision.Revision),
		Selector:    rollout.Selector{Percentage: 100},
		Options: rollout.RunOptions{
			MaxConcurrent: in.MaxConcurrent,
			Gates:         []rollout.Gate{{Kind: rollout.GateFailureCount, Scope: rollout.GateScopeCurrentPhase, Threshold: in.MaxFailures}},
			AutoAdvance:   true,
		},
		Template:     rollout.RunTemplate{TargetVersion: &tv, Description: "firmware baseline " + b.Name},
		Targets:      &inventory.TargetSpec{Racks: rackTargets},
		Waves:        waveIDs,
		CreatedBy:    in.CreatedBy,
		AllowOverlap: in.AllowOverlap,
	})
	if errors.Is(err, rollout.ErrRunOverlap) {
		return ApplyPlan{}, fmt.Errorf("%w (to apply anyway: flow baseline apply --allow-overlap)", err)
	} else if err != nil {
		return ApplyPlan{}, err
	}
	plan.RunID = id
	plan.Message = fmt.Sprintf("operation run %s (%s) upgrades %d devices on %d racks in %d waves to baseline %s revision %d%s%s",
		id, name, plan.Devices, plan.Racks, len(plan.Waves), b.Name, b.Revision.Revision, skippedNote, deferredNote)
	return plan, nil
}

// RackTarget returns the versions the active baseline wants on rack's
// compute trays and NVLink switches, as a target version (one JSON object
// per component type: {"compute":{"bmc":"2.0"},"nvswitch":{"nvos":"25.02"}}),
// or "" when no baseline is active or none of its entries applies. Where
// the rack's devices of one type need different versions of a
// sub-component, the version most of them need is taken. Ingest tasks that
// upgrade firmware (FLOW_INGEST_FIRMWARE_UPGRADE) install it, so newly
// ingested racks land on the baseline (operations.Tasks.SetIngestFirmwareTarget).
func (s *Service) RackTarget(ctx context.Context, dbtx db.DBTX, rack uuid.UUID) (string, error) {
	b, err := s.Get(ctx, dbtx, Ref{})
	if errors.Is(err, ErrNoActive) {
		return "", nil
	} else if err != nil {
		return "", err
	}
	devs, err := s.cfg.Inventory.FirmwareDevices(ctx, dbtx, inventory.FirmwareDeviceFilter{RackIDs: []uuid.UUID{rack}})
	if err != nil {
		return "", err
	}
	ev := NewEvaluator(b.Entries, s.cfg.Now(), 0)
	votes := map[[2]string]map[string]int{}
	for i := range devs {
		t := typeOf(devs[i].Type)
		if t != TypeCompute && t != TypeNVSwitch {
			continue
		}
		for sub, v := range ev.Desired(&devs[i]) {
			k := [2]string{t, sub}
			if votes[k] == nil {
				votes[k] = map[string]int{}
			}
			votes[k][v]++
		}
	}
	if len(votes) == 0 {
		return "", nil
	}
	out, err := json.Marshal(majority(votes))
	return string(out), err
}

// majority picks, per (type, sub-component), the version with the most
// votes (the lowest-sorting one on a tie).
func majority(votes map[[2]string]map[string]int) map[string]map[string]string {
	chosen := map[string]map[string]string{}
	for k, vs := range votes {
		best, n := "", -1
		for _, v := range slices.Sorted(mapKeys(vs)) {
			if vs[v] > n {
				best, n = v, vs[v]
			}
		}
		if chosen[k[0]] == nil {
			chosen[k[0]] = map[string]string{}
		}
		chosen[k[0]][k[1]] = best
	}
	return chosen
}
