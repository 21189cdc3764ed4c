package baseline_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/firmware/baseline"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/nico"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/opstest"
	"github.com/nicoflow/flow/operations/rollout"
)

type testBundle struct {
	*opstest.Bundle
	svc  *baseline.Service
	runs *rollout.Service
	core *fakeDesired
}

type fakeDesired struct{ entries []nico.DesiredFirmware }

func (f *fakeDesired) DesiredFirmware(context.Context) ([]nico.DesiredFirmware, error) {
	return f.entries, nil
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	m := opstest.NewTasks(t, opstest.Config{})
	core := &fakeDesired{}
	return &testBundle{
		Bundle: m, core: core,
		svc:  baseline.NewService(baseline.Config{Inventory: m.Inv, Operations: m.Rules, Core: core, StaleAfter: time.Hour}),
		runs: rollout.NewService(rollout.Config{Pool: m.Pool, Tasks: m.Tasks, Inv: m.Inv, MaxCandidates: 100}),
	}
}

func (b *testBundle) tx(t *testing.T, fn func(tx pgx.Tx) error) error {
	t.Helper()
	return pgx.BeginFunc(context.Background(), b.Pool, fn)
}

var bmc20 = []baseline.Entry{{ComponentType: "compute", Component: "bmc", Version: "2.0"}}

func TestBaselineRevisions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	var got baseline.Baseline
	require.NoError(t, b.tx(t, func(tx pgx.Tx) (err error) {
		got, err = b.svc.Create(ctx, tx, "site", "first", bmc20, baseline.SourceManual, "alice", false)
		return err
	}))
	require.Equal(t, 1, got.Revision.Revision)
	require.Equal(t, "alice", got.CreatedBy)
	require.Zero(t, got.ActiveRevision)

	err := b.tx(t, func(tx pgx.Tx) error {
		_, err := b.svc.Create(ctx, tx, "site", "", bmc20, baseline.SourceManual, "bob", false)
		return err
	})
	require.ErrorIs(t, err, baseline.ErrExists)

	_, err = b.svc.Get(ctx, b.Pool, baseline.Ref{})
	require.ErrorIs(t, err, baseline.ErrNoActive)

	two := append([]baseline.Entry{{ComponentType: "nvswitch", Component: "nvos", Version: "25.02"}}, bmc20...)
	require.NoError(t, b.tx(t, func(tx pgx.Tx) (err error) {
		got, err = b.svc.Update(ctx, tx, "site", 1, "second", two, baseline.SourceManual, "bob", false)
		return err
	}))
	require.Equal(t, 2, got.Revision.Revision)
	require.Len(t, got.Entries, 2)

	// A second edit based on revision 1 is refused and writes nothing.
	err = b.tx(t, func(tx pgx.Tx) error {
		_, err := b.svc.Update(ctx, tx, "site", 1, "stale", bmc20, baseline.SourceManual, "carol", false)
		return err
	})
	require.ErrorIs(t, err, baseline.ErrStale)
	require.Contains(t, err.Error(), "revision 2")
	// Bad entries: nothing written either.
	err = b.tx(t, func(tx pgx.Tx) error {
		_, err := b.svc.Update(ctx, tx, "site", 2, "", []baseline.Entry{{ComponentType: "compute", Component: "bmc", Version: ""}}, baseline.SourceManual, "carol", false)
		return err
	})
	require.ErrorIs(t, err, baseline.ErrInvalid)
	require.Contains(t, err.Error(), "entries[0].version")
	got, err = b.svc.Get(ctx, b.Pool, baseline.Ref{Name: "site"})
	require.NoError(t, err)
	require.Equal(t, 2, got.LatestRevision)
	require.Len(t, got.History, 2)
	require.Equal(t, "bob", got.History[0].CreatedBy)
	require.Equal(t, "alice", got.History[1].CreatedBy)

	err = b.tx(t, func(tx pgx.Tx) error {
		_, err := b.svc.Activate(ctx, tx, baseline.Ref{Name: "site", Revision: 7}, "alice")
		return err
	})
	require.ErrorIs(t, err, baseline.ErrNotFound)
	err = b.tx(t, func(tx pgx.Tx) error {
		_, err := b.svc.Activate(ctx, tx, baseline.Ref{Name: "nope"}, "alice")
		return err
	})
	require.ErrorIs(t, err, baseline.ErrNotFound)
	_, err = b.svc.Get(ctx, b.Pool, baseline.Ref{})
	require.ErrorIs(t, err, baseline.ErrNoActive, "a failed activation activates nothing")

	require.NoError(t, b.tx(t, func(tx pgx.Tx) (err error) {
		got, err = b.svc.Activate(ctx, tx, baseline.Ref{Name: "site", Revision: 1}, "dave")
		return err
	}))
	require.Equal(t, 1, got.ActiveRevision)
	require.Equal(t, "dave", got.ActivatedBy)
	active, err := b.svc.Get(ctx, b.Pool, baseline.Ref{})
	require.NoError(t, err)
	require.Equal(t, 1, active.Revision.Revision, "the active revision, not the newest")
	require.Len(t, active.Entries, 1)

	list, err := b.svc.List(ctx, b.Pool)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, 2, list[0].Revision.Revision)
	require.Equal(t, 1, list[0].ActiveRevision)

	for _, name := range []string{"", "-x", "a b", uuid.NewString()} {
		err = b.tx(t, func(tx pgx.Tx) error {
			_, err := b.svc.Create(ctx, tx, name, "", bmc20, baseline.SourceManual, "", false)
			return err
		})
		require.ErrorIs(t, err, baseline.ErrInvalid, name)
	}
}

func TestImport(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.AddRack(t, 0)
	_, _, err := b.svc.Import(ctx, b.Pool)
	require.ErrorIs(t, err, baseline.ErrNothingToImport, "Core holds nothing")
	b.core.entries = []nico.DesiredFirmware{
		{Vendor: "Wiwynn", Model: "GB200 Compute Tray", Components: map[string]string{"BMC": "2.0", "UEFI": "1.5", "Frobnicator": "9"}},
		{Vendor: "NVIDIA", Model: "GB200 NVLink Switch Tray", Components: map[string]string{"nvos": "NVOS 25.02", "bmc": "latest"}},
	}
	entries, warnings, err := b.svc.Import(ctx, b.Pool)
	require.NoError(t, err)
	got := map[string]string{}
	for _, e := range entries {
		got[e.ComponentType+"/"+e.Component] = e.Version
	}
	require.Equal(t, "2.0", got["compute/bmc"])
	require.Equal(t, "1.5", got["compute/bios"], "uefi is the bios")
	require.Len(t, warnings, 2, "%v", warnings)
	require.Contains(t, fmt.Sprint(warnings), "Frobnicator")
	require.Contains(t, fmt.Sprint(warnings), "latest")
}

// site stores n demo racks; racks 2k and 2k+1 share NVLink domain k for k
// < domains. It returns the racks with their components.
func (b *testBundle) site(t *testing.T, n, domains int) []inventory.Rack {
	t.Helper()
	ctx := context.Background()
	var racks []inventory.Rack
	for i := range n {
		r := b.AddRack(t, i)
		r, err := b.Inv.Rack(ctx, b.Pool, r.ID, true)
		require.NoError(t, err)
		racks = append(racks, r)
	}
	for k := range domains {
		require.NoError(t, b.tx(t, func(tx pgx.Tx) error {
			id, err := b.Inv.CreateNVLDomain(ctx, tx, inventory.NVLDomain{Name: fmt.Sprintf("dom-%d", k)})
			if err != nil {
				return err
			}
			return b.Inv.AttachRacks(ctx, tx, inventory.NVLDomainRef{ID: id}, []inventory.RackRef{{ID: racks[2*k].ID}, {ID: racks[2*k+1].ID}})
		}))
	}
	return racks
}

// record stores installed versions: every compute tray at bmc "2.0" but
// those in odd (component → version, "" unreported).
func (b *testBundle) record(t *testing.T, racks []inventory.Rack, odd map[uuid.UUID]string) {
	t.Helper()
	ctx := context.Background()
	var readings []inventory.FirmwareReading
	var absent []uuid.UUID
	for _, r := range racks {
		for _, c := range r.Components {
			if c.Type != inventory.ComponentTypeCompute {
				continue
			}
			v, isOdd := odd[c.ID]
			switch {
			case !isOdd:
				v = "2.0"
			case v == "":
				absent = append(absent, c.ID)
				continue
			}
			readings = append(readings, inventory.FirmwareReading{ComponentID: c.ID, Versions: inventory.SubVersions{"bmc": {v}}})
		}
	}
	require.NoError(t, b.tx(t, func(tx pgx.Tx) error {
		_, err := b.Inv.RecordFirmware(ctx, tx, inventory.ComponentTypeCompute, time.Now(), readings, absent)
		return err
	}))
}

func compute(r inventory.Rack, i int) uuid.UUID {
	n := 0
	for _, c := range r.Components {
		if c.Type == inventory.ComponentTypeCompute {
			if n == i {
				return c.ID
			}
			n++
		}
	}
	panic("no such tray")
}

func TestComplianceAndApply(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	racks := b.site(t, 6, 2) // dom-0: racks 0, 1; dom-1: racks 2, 3; racks 4, 5 in none
	b.record(t, racks, map[uuid.UUID]string{
		compute(racks[1], 0): "1.0", // below
		compute(racks[3], 2): "1.9", // below
		compute(racks[5], 0): "3.0", // above
	})
	// Never reported: a tray of rack 4 has no versions at all.
	require.NoError(t, b.tx(t, func(tx pgx.Tx) error {
		_, err := b.svc.Create(ctx, tx, "site", "", bmc20, baseline.SourceManual, "alice", true)
		return err
	}))
	_, err := b.Pool.Exec(ctx, `DELETE FROM component_firmware WHERE component_id = $1`, compute(racks[4], 1))
	require.NoError(t, err)

	rep, err := b.svc.Compliance(ctx, b.Pool, baseline.Query{GroupBy: []string{baseline.GroupRack, baseline.GroupDomain, baseline.GroupRow, baseline.GroupHall}})
	require.NoError(t, err)
	require.Equal(t, 6*35, rep.Site.Total)
	require.Equal(t, baseline.Counts{Total: 210, Compliant: 6*18 - 4, Upgrade: 2, Downgrade: 1, Unknown: 1, NotCovered: 6 * 17}, rep.Site)
	require.Len(t, rep.Devices, baseline.DefaultLimit)
	byRack := map[string]string{}
	domains := 0
	for _, g := range rep.Groups {
		switch g.Kind {
		case baseline.GroupRack:
			byRack[g.Name] = g.Counts.State()
		case baseline.GroupDomain:
			domains++
			require.Equal(t, 70, g.Counts.Total, "two racks of 35")
		case baseline.GroupRow:
			require.Equal(t, "hall-0 / 00", g.Name)
			require.Equal(t, rep.Site, g.Counts, "one row holds the site")
		case baseline.GroupHall:
			require.Equal(t, "hall-0", g.Name)
			require.Equal(t, baseline.StateUpgrade, g.Counts.State(), "a hall is as urgent as its most urgent device")
		}
	}
	require.Equal(t, map[string]string{"demo-0000": "compliant", "demo-0001": "upgrade", "demo-0002": "compliant", "demo-0003": "upgrade",
		"demo-0004": "unknown", "demo-0005": "downgrade"}, byRack)
	require.Equal(t, 2, domains)

	rep, err = b.svc.Compliance(ctx, b.Pool, baseline.Query{States: []string{baseline.StateUpgrade}, Limit: 1})
	require.NoError(t, err)
	require.Equal(t, 2, rep.Total)
	require.Len(t, rep.Devices, 1)
	require.Equal(t, "1.0", rep.Devices[0].Differences[0].Installed[0])
	require.Equal(t, "2.0", rep.Devices[0].Differences[0].Desired)
	rep, err = b.svc.Compliance(ctx, b.Pool, baseline.Query{States: []string{baseline.StateUpgrade}, Limit: 1, Offset: 1})
	require.NoError(t, err)
	require.Equal(t, "1.9", rep.Devices[0].Differences[0].Installed[0])
	rep, err = b.svc.Compliance(ctx, b.Pool, baseline.Query{Type: baseline.TypeCompute, RackIDs: []uuid.UUID{racks[5].ID}})
	require.NoError(t, err)
	require.Equal(t, baseline.Counts{Total: 18, Compliant: 17, Downgrade: 1}, rep.Site)
	_, err = b.svc.Compliance(ctx, b.Pool, baseline.Query{States: []string{"green"}})
	require.ErrorIs(t, err, baseline.ErrInvalid)

	var plan baseline.ApplyPlan
	require.NoError(t, b.tx(t, func(tx pgx.Tx) (err error) {
		plan, err = b.svc.Apply(ctx, tx, b.runs, baseline.ApplyInput{DryRun: true, Waves: 1})
		return err
	}))
	require.Equal(t, uuid.Nil, plan.RunID)
	require.Equal(t, 2, plan.Racks)
	require.Equal(t, 2, plan.Devices)
	require.Equal(t, `{"compute":{"bmc":"2.0"}}`, plan.TargetVersion)
	require.Len(t, plan.Waves, 2)
	require.Equal(t, []string{"dom-0"}, plan.Waves[0].Domains, "the canary is the first domain, whole")
	require.Contains(t, plan.Message, "1 unknown")

	// Domains stay whole: with every tray of racks 0-3 below, the canary
	// of one rack takes its whole domain (2 racks).
	b.record(t, racks, map[uuid.UUID]string{
		compute(racks[0], 0): "1.0", compute(racks[1], 0): "1.0", compute(racks[2], 0): "1.0", compute(racks[3], 0): "1.0",
		compute(racks[4], 0): "1.0", compute(racks[5], 0): "1.0",
	})
	require.NoError(t, b.tx(t, func(tx pgx.Tx) (err error) {
		plan, err = b.svc.Apply(ctx, tx, b.runs, baseline.ApplyInput{CanaryRacks: 1, Waves: 2})
		return err
	}))
	require.NotEqual(t, uuid.Nil, plan.RunID)
	require.Equal(t, 6, plan.Racks)
	require.Len(t, plan.Waves, 3)
	require.Len(t, plan.Waves[0].Racks, 2)
	for _, w := range plan.Waves {
		for _, d := range w.Domains {
			n := 0
			for _, r := range w.Racks {
				if r.Name == "demo-0000" || r.Name == "demo-0001" {
					n += map[bool]int{true: 1}[d == "dom-0"]
				}
				if r.Name == "demo-0002" || r.Name == "demo-0003" {
					n += map[bool]int{true: 1}[d == "dom-1"]
				}
			}
			require.Equal(t, 2, n, "domain %s whole in its wave", d)
		}
	}
	// A second apply while the first run is unfinished overlaps it:
	// refused, naming it, unless asked.
	err = b.tx(t, func(tx pgx.Tx) error {
		_, err := b.svc.Apply(ctx, tx, b.runs, baseline.ApplyInput{})
		return err
	})
	require.ErrorIs(t, err, rollout.ErrRunOverlap)
	require.Contains(t, err.Error(), "flow baseline apply --allow-overlap")
	run, err := b.runs.Run(ctx, b.Pool, plan.RunID)
	require.NoError(t, err)
	require.Equal(t, 3, run.TotalPhases)
	require.Equal(t, `{"compute":{"bmc":"2.0"}}`, *run.Template.TargetVersion)
	// The canary's racks have tasks now: their trays are updating.
	rep, err = b.svc.Compliance(ctx, b.Pool, baseline.Query{States: []string{baseline.StateUpdating}})
	require.NoError(t, err)
	require.Equal(t, 2*18, rep.Total)

	// Nothing to do: no run, and it says so.
	b.record(t, racks, nil)
	_, err = b.Pool.Exec(ctx, `UPDATE task SET status = 'terminated', run_id = NULL, queue_expires_at = NULL`)
	require.NoError(t, err)
	require.NoError(t, b.tx(t, func(tx pgx.Tx) (err error) {
		plan, err = b.svc.Apply(ctx, tx, b.runs, baseline.ApplyInput{})
		return err
	}))
	require.Equal(t, uuid.Nil, plan.RunID)
	require.Contains(t, plan.Message, "nothing to do")
}

// TestComplianceStaleness: a device Core stopped reporting is judged by
// its last versions for FLOW_FIRMWARE_UNREPORTED_AFTER, then unknown; a
// device still reported is seen at its type's last read however old its
// row.
func TestComplianceStaleness(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	racks := b.site(t, 1, 0)
	b.record(t, racks, nil)
	require.NoError(t, b.tx(t, func(tx pgx.Tx) error {
		_, err := b.svc.Create(ctx, tx, "site", "", bmc20, baseline.SourceManual, "alice", true)
		return err
	}))
	count := func() baseline.Counts {
		t.Helper()
		r, err := b.svc.Compliance(ctx, b.Pool, baseline.Query{Type: baseline.TypeCompute})
		require.NoError(t, err)
		return r.Site
	}
	require.Equal(t, baseline.Counts{Total: 18, Compliant: 18}, count())
	// Rows written long ago but read again just now: still compliant.
	_, err := b.Pool.Exec(ctx, `UPDATE component_firmware SET seen_at = now() - interval '3 hours'`)
	require.NoError(t, err)
	require.Equal(t, baseline.Counts{Total: 18, Compliant: 18}, count())
	// One tray unreported 10 minutes: its last versions still count; 2
	// hours: unknown, with the reason.
	tray := compute(racks[0], 4)
	_, err = b.Pool.Exec(ctx, `UPDATE component_firmware SET reported = false, seen_at = now() - interval '10 minutes' WHERE component_id = $1`, tray)
	require.NoError(t, err)
	require.Equal(t, baseline.Counts{Total: 18, Compliant: 18}, count())
	_, err = b.Pool.Exec(ctx, `UPDATE component_firmware SET seen_at = now() - interval '2 hours' WHERE component_id = $1`, tray)
	require.NoError(t, err)
	require.Equal(t, baseline.Counts{Total: 18, Compliant: 17, Unknown: 1}, count())
	r, err := b.svc.Compliance(ctx, b.Pool, baseline.Query{States: []string{baseline.StateUnknown}})
	require.NoError(t, err)
	require.Len(t, r.Devices, 1)
	require.Equal(t, tray, r.Devices[0].Device.ID)
	require.Contains(t, r.Devices[0].Reason, "not reported by Core since")
}

// TestIngestLandsOnTheBaseline: with FLOW_INGEST_FIRMWARE_UPGRADE on and a
// baseline active, an ingest task carries the baseline's versions for its
// rack's trays and switches; with none active, none (Core's desired).
func TestIngestLandsOnTheBaseline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	require.NoError(t, b.Rules.SetIngestFirmwareUpgrade(true))
	b.Tasks.SetIngestFirmwareTarget(b.svc.RackTarget)
	racks := b.site(t, 2, 0)
	ingest := func(r inventory.Rack) string {
		t.Helper()
		ids, err := b.Submit(t, operations.Request{Type: operations.OperationTypeBringUp, Code: operations.CodeIngest,
			Targets: inventory.TargetSpec{Racks: []inventory.RackTarget{{Rack: inventory.RackRef{ID: r.ID}}}}})
		require.NoError(t, err)
		var v string
		require.NoError(t, b.Pool.QueryRow(ctx, `SELECT coalesce(information->>'target_version', '') FROM task WHERE id = $1`, ids[0]).Scan(&v))
		return v
	}
	require.Empty(t, ingest(racks[0]), "no baseline active: the component manager's desired version")
	require.NoError(t, b.tx(t, func(tx pgx.Tx) error {
		_, err := b.svc.Create(ctx, tx, "site", "", []baseline.Entry{
			{ComponentType: "compute", Component: "bmc", Version: "2.0"},
			{ComponentType: "compute", Component: "bios", Version: "1.5", Model: "no such model"},
			{ComponentType: "nvswitch", Component: "nvos", Version: "25.02"},
			{ComponentType: "powershelf", Component: "pmc", Version: "3.1"},
		}, baseline.SourceManual, "alice", true)
		return err
	}))
	require.JSONEq(t, `{"compute":{"bmc":"2.0"},"nvswitch":{"nvos":"25.02"}}`, ingest(racks[1]))
}

// TestApplyLeavesOutWhatTheRuleCannotUpgrade: under the built-in firmware
// rule (no power-shelf step) shelves below the baseline are not targeted,
// and apply says so rather than planning tasks that would skip them.
func TestApplyLeavesOutWhatTheRuleCannotUpgrade(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	racks := b.site(t, 1, 0)
	b.record(t, racks, nil)
	var shelves []inventory.FirmwareReading
	for _, c := range racks[0].Components {
		if c.Type == inventory.ComponentTypePowerShelf {
			shelves = append(shelves, inventory.FirmwareReading{ComponentID: c.ID, Versions: inventory.SubVersions{"pmc": {"PS 3.0.0"}}})
		}
	}
	require.NoError(t, b.tx(t, func(tx pgx.Tx) error {
		if _, err := b.Inv.RecordFirmware(ctx, tx, inventory.ComponentTypePowerShelf, time.Now(), shelves, nil); err != nil {
			return err
		}
		_, err := b.svc.Create(ctx, tx, "site", "", append([]baseline.Entry{{ComponentType: "powershelf", Component: "pmc", Version: "PS 3.1.0"}}, bmc20...),
			baseline.SourceManual, "alice", true)
		return err
	}))
	var plan baseline.ApplyPlan
	require.NoError(t, b.tx(t, func(tx pgx.Tx) (err error) {
		plan, err = b.svc.Apply(ctx, tx, b.runs, baseline.ApplyInput{})
		return err
	}))
	require.Equal(t, uuid.Nil, plan.RunID)
	require.Contains(t, plan.Message, "nothing to do: no device the firmware rules upgrade is below baseline site revision 1")
	require.Contains(t, plan.Message, "8 powershelf devices below the baseline are left out")
	// With a tray below too, the plan upgrades the tray and gives Core no
	// shelf version.
	b.record(t, racks, map[uuid.UUID]string{compute(racks[0], 3): "1.0"})
	require.NoError(t, b.tx(t, func(tx pgx.Tx) (err error) {
		plan, err = b.svc.Apply(ctx, tx, b.runs, baseline.ApplyInput{DryRun: true})
		return err
	}))
	require.Equal(t, 1, plan.Devices)
	require.Equal(t, `{"compute":{"bmc":"2.0"}}`, plan.TargetVersion)
	require.Contains(t, plan.Message, "8 powershelf devices below the baseline are left out: the firmware rule in force has no PowerShelf step")
}

// TestComplianceSnapshotFollowsChanges: after each kind of change (the
// installed versions alone, the inventory alone, both, the baseline's
// revision, a versions row gone) the report built from the site's
// snapshot, which reads again only what changed, equals one measured
// afresh from every device (Service.Evaluate): each device's state, and
// the counts per rack by name.
func TestComplianceSnapshotFollowsChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	racks := b.site(t, 4, 1)
	b.record(t, racks, map[uuid.UUID]string{compute(racks[1], 0): "1.0"})
	var site baseline.Baseline
	require.NoError(t, b.tx(t, func(tx pgx.Tx) (err error) {
		site, err = b.svc.Create(ctx, tx, "site", "", bmc20, baseline.SourceManual, "alice", true)
		return err
	}))
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := b.Pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	check := func(step string) {
		t.Helper()
		bl, err := b.svc.Get(ctx, b.Pool, baseline.Ref{})
		require.NoError(t, err)
		want, err := b.svc.Evaluate(ctx, b.Pool, bl, baseline.Query{})
		require.NoError(t, err)
		wantStates, wantRacks := map[uuid.UUID]string{}, map[string]baseline.Counts{}
		for _, d := range want {
			wantStates[d.Device.ID] = d.State
			c := wantRacks[d.Device.RackName]
			c.Add(d.State)
			wantRacks[d.Device.RackName] = c
		}
		rep, err := b.svc.Compliance(ctx, b.Pool, baseline.Query{Limit: baseline.MaxLimit, GroupBy: []string{baseline.GroupRack}})
		require.NoError(t, err)
		gotStates, gotRacks := map[uuid.UUID]string{}, map[string]baseline.Counts{}
		for _, d := range rep.Devices {
			gotStates[d.Device.ID] = d.State
		}
		for _, g := range rep.Groups {
			gotRacks[g.Name] = g.Counts
		}
		require.Equal(t, len(want), rep.Total, step)
		require.Equal(t, wantStates, gotStates, step)
		require.Equal(t, wantRacks, gotRacks, step)
	}
	check("first")

	b.record(t, racks, map[uuid.UUID]string{compute(racks[1], 0): "1.0", compute(racks[2], 3): "3.0", compute(racks[3], 1): ""})
	check("installed versions")

	exec(`UPDATE rack SET name = 'a-renamed' WHERE id = $1`, racks[3].ID)
	exec(`UPDATE component SET deleted_at = now() WHERE id = $1`, compute(racks[2], 5))
	exec(`UPDATE component SET rack_id = $1 WHERE id = $2`, racks[0].ID, compute(racks[1], 0))
	check("inventory")

	b.record(t, racks, map[uuid.UUID]string{compute(racks[0], 2): "1.5"})
	exec(`UPDATE rack SET name = 'b-renamed' WHERE id = $1`, racks[1].ID)
	check("both")

	require.NoError(t, b.tx(t, func(tx pgx.Tx) error {
		_, err := b.svc.Update(ctx, tx, site.ID.String(), site.Revision.Revision, "", []baseline.Entry{{ComponentType: "compute", Component: "bmc", Version: "1.5"}}, baseline.SourceManual, "alice", true)
		return err
	}))
	check("baseline revision")

	exec(`DELETE FROM component_firmware WHERE component_id = $1`, compute(racks[0], 3))
	check("versions row gone")
}
