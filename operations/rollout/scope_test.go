package rollout

import (
	"context"
	"flag"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/inventory"
)

// TestDefaultScopeCandidates: the default scope, resolved in bulk, gives
// the candidates (and so the plans) the scope gave when it was resolved as
// a spec naming every rack ListRacks lists, over a mixed inventory: a rack
// without components, racks left without matching ones by a type filter, a
// deleted rack, a deleted component, racks without a location, in several
// rooms, and names whose bytewise order is not a locale's. The cap and the
// empty inventory give the same errors.
func TestDefaultScopeCandidates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	inv := inventory.NewService()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	// One transaction, rolled back at the end: the subtests share it, so
	// they run one after another.
	t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(ctx)) })

	emptyRun := NewService(Config{Pool: pool, Inv: inv})
	_, err = emptyRun.candidates(ctx, tx, CreateRunInput{})
	require.ErrorIs(t, err, ErrRunInvalid)
	require.Contains(t, err.Error(), "the inventory has no racks")

	var racks []inventory.Rack
	for i := range 24 {
		r := inventory.DemoRack(i * 7) // rooms hall-0 and hall-1, several positions
		switch i {
		case 3:
			r.Components = nil
		case 5:
			r.Components = r.Components[:1] // one power shelf: no compute tray
		case 9:
			r.Location = inventory.Location{}
		case 10:
			r.Location = inventory.Location{}
			r.Name = "Demo-upper" // before "demo-…" bytewise, after it in en_US
		case 11:
			r.Name = "demo-0000" // shares the name of rack 0
		}
		r.ID, err = inv.CreateRack(ctx, tx, r)
		require.NoError(t, err)
		racks = append(racks, r)
	}
	require.NoError(t, inv.DeleteRack(ctx, tx, racks[13].ID))
	withComps, err := inv.Rack(ctx, tx, racks[15].ID, true)
	require.NoError(t, err)
	require.NoError(t, inv.DeleteComponent(ctx, tx, withComps.Components[2].ID))

	spec := func(types []inventory.ComponentType) *inventory.TargetSpec {
		s, err := listedScope(ctx, tx, inv, types)
		require.NoError(t, err)
		require.Len(t, s.Racks, 23)
		return s
	}
	svc := NewService(Config{Pool: pool, Inv: inv, MaxCandidates: 100})
	for _, tt := range []struct {
		name  string
		types []inventory.ComponentType
		n     int // candidates
	}{
		{name: "Every", n: 22},
		{name: "Compute", types: []inventory.ComponentType{inventory.ComponentTypeCompute}, n: 21},
		{name: "SwitchesAndShelves", types: []inventory.ComponentType{inventory.ComponentTypeNVSwitch, inventory.ComponentTypePowerShelf}, n: 22},
		{name: "NoneMatch", types: []inventory.ComponentType{inventory.ComponentTypeCDU}, n: 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want, err := svc.candidates(ctx, tx, CreateRunInput{Targets: spec(tt.types)})
			require.NoError(t, err)
			got, err := svc.candidates(ctx, tx, CreateRunInput{FilterTypes: tt.types})
			require.NoError(t, err)
			require.Equal(t, want, got)
			require.Len(t, got, tt.n)
			if tt.n == 0 {
				return
			}
			for _, o := range []RunOptions{
				{Ordering: Ordering{Kind: OrderingRandom, Seed: "order"}, Phases: PhasePlan{Kind: PhasesEqual, Count: 3}},
				{Ordering: Ordering{Kind: OrderingPhysicalLocation, Strategy: StrategyRowByRow}, Phases: PhasePlan{Kind: PhasesPercentage, Percentages: []int{10, 90}}},
				{Ordering: Ordering{Kind: OrderingPhysicalLocation, Strategy: StrategyOnePerRowRoundRobin}, Phases: PhasePlan{Kind: PhasesEqual, Count: 1}},
			} {
				sel := Selector{Percentage: 60, Seed: "select"}
				wantPlan, wantPhases, err := PlanTargets(want, sel, o)
				require.NoError(t, err)
				gotPlan, gotPhases, err := PlanTargets(got, sel, o)
				require.NoError(t, err)
				require.Equal(t, wantPlan, gotPlan)
				require.Equal(t, wantPhases, gotPhases)
			}
		})
	}

	t.Run("Cap", func(t *testing.T) {
		capped := NewService(Config{Pool: pool, Inv: inv, MaxCandidates: 21})
		_, want := capped.candidates(ctx, tx, CreateRunInput{Targets: spec(nil)})
		require.ErrorIs(t, want, ErrRunInvalid)
		_, err := capped.candidates(ctx, tx, CreateRunInput{})
		require.ErrorIs(t, err, ErrRunInvalid)
		require.Equal(t, want.Error(), err.Error())
		require.Contains(t, err.Error(), "22 targets, more than the limit of 21")
	})
}

// listedScope is the spec the default scope was resolved as before it was
// resolved in bulk: every rack ListRacks lists, page by page, by ID, with
// types.
func listedScope(ctx context.Context, tx pgx.Tx, inv *inventory.Service, types []inventory.ComponentType) (*inventory.TargetSpec, error) {
	spec := &inventory.TargetSpec{}
	for offset := int32(0); ; offset += inventory.MaxPageLimit {
		racks, total, err := inv.ListRacks(ctx, tx, inventory.RackQuery{Page: inventory.Page{Offset: offset, Limit: inventory.MaxPageLimit}})
		if err != nil {
			return nil, err
		}
		for _, r := range racks {
			spec.Racks = append(spec.Racks, inventory.RackTarget{Rack: inventory.RackRef{ID: r.ID}, Types: types})
		}
		if len(racks) == 0 || offset+int32(len(racks)) >= total {
			return spec, nil
		}
	}
}

var scopeRacks = flag.Int("rollout.scope-racks", 300, "demo racks (35 components each) BenchmarkDefaultScopeCandidates plans over")

type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// BenchmarkDefaultScopeCandidates: the default scope's candidates over
// -rollout.scope-racks demo racks, resolved as a spec naming every listed
// rack (PerRack, the way before issue 29) and in bulk; statements and
// allocations per resolution do not depend on the machine's load.
//
//	go test ./operations/rollout -run '^$' -bench DefaultScopeCandidates -benchmem -rollout.scope-racks 3000
func BenchmarkDefaultScopeCandidates(b *testing.B) {
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(dbtest.NewDB(b))
	require.NoError(b, err)
	counter := &statementCounter{}
	pc.ConnConfig.Tracer = counter
	db.Tune(pc)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	require.NoError(b, err)
	b.Cleanup(pool.Close)
	inv := inventory.NewService()
	for i := range *scopeRacks {
		require.NoError(b, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := inv.CreateRack(ctx, tx, inventory.DemoRack(i))
			return err
		}))
	}
	svc := NewService(Config{Pool: pool, Inv: inv, MaxCandidates: *scopeRacks})
	for _, bb := range []struct {
		name string
		in   func(tx pgx.Tx) (CreateRunInput, error)
	}{
		{"PerRack", func(tx pgx.Tx) (CreateRunInput, error) {
			spec, err := listedScope(ctx, tx, inv, nil)
			return CreateRunInput{Targets: spec}, err
		}},
		{"Bulk", func(pgx.Tx) (CreateRunInput, error) { return CreateRunInput{}, nil }},
	} {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			before := counter.n.Load()
			for range b.N {
				require.NoError(b, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					in, err := bb.in(tx)
					if err != nil {
						return err
					}
					cands, err := svc.candidates(ctx, tx, in)
					if err == nil && len(cands) != *scopeRacks {
						b.Fatalf("%d candidates, want %d", len(cands), *scopeRacks)
					}
					return err
				}))
			}
			// BEGIN and COMMIT are two of each resolution's statements.
			b.ReportMetric(float64(counter.n.Load()-before)/float64(b.N)-2, "statements/op")
		})
	}
}
