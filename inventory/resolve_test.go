package inventory_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/inventory"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

func TestResolveRack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ra := b.create(t, smallRack("ra", 1, 1))
	r1 := smallRack("twin", 2, 0)
	r1.ExternalId = ""
	r2 := smallRack("twin", 3, 0)
	r2.ExternalId = ""
	b.create(t, r1)
	b.create(t, r2)

	for _, tt := range []struct {
		name     string
		ref      inventory.RackRef
		err      error
		contains string
	}{
		{name: "ByID", ref: inventory.RackRef{ID: uuid.MustParse(ra)}},
		{name: "ByName", ref: inventory.RackRef{Name: "ra"}},
		{name: "ByExternalID", ref: inventory.RackRef{ExternalID: "ext-ra"}},
		{name: "Empty", ref: inventory.RackRef{}, err: inventory.ErrInvalidArgument, contains: "exactly one"},
		{name: "Two", ref: inventory.RackRef{Name: "ra", ExternalID: "ext-ra"}, err: inventory.ErrInvalidArgument, contains: "exactly one"},
		{name: "UnknownName", ref: inventory.RackRef{Name: "zz"}, err: inventory.ErrRackNotFound, contains: `rack name "zz"`},
		{name: "UnknownExternal", ref: inventory.RackRef{ExternalID: "e"}, err: inventory.ErrRackNotFound, contains: `rack external id "e"`},
		{name: "Ambiguous", ref: inventory.RackRef{Name: "twin"}, err: inventory.ErrAmbiguous, contains: `rack name "twin"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := b.svc.ResolveRack(b.ctx, b.pool, tt.ref)
			if tt.err != nil {
				require.ErrorIs(t, err, tt.err)
				require.Contains(t, err.Error(), tt.contains)
				return
			}
			require.NoError(t, err)
			require.Equal(t, ra, r.ID.String())
		})
	}
}

func TestResolveComponent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.create(t, smallRack("ra", 1, 2)) // c0 compute, c1 switch; MACs aa:00:00:01:02:0i
	// Two components sharing an external ID, of different types.
	shared := smallRack("rs", 2, 2)
	shared.Components[0].ComponentId = "shared"
	shared.Components[1].ComponentId = "shared"
	b.create(t, shared)

	for _, tt := range []struct {
		name     string
		ref      inventory.ComponentRef
		want     string // serial
		err      error
		contains string
	}{
		{name: "ExternalID", ref: inventory.ComponentRef{ExternalID: "machine-ra-1"}, want: "C-ra-1-1"},
		{name: "MACAnyFormat", ref: inventory.ComponentRef{ExternalID: "AA-00-00-01-02-00"}, want: "C-ra-1-0"},
		{name: "MACWithType", ref: inventory.ComponentRef{ExternalType: inventory.ComponentTypeCompute, ExternalID: "aa0000010200"}, want: "C-ra-1-0"},
		{name: "MACWrongType", ref: inventory.ComponentRef{ExternalType: inventory.ComponentTypeNVSwitch, ExternalID: "aa:00:00:01:02:00"}, err: inventory.ErrComponentNotFound, contains: `"aa:00:00:01:02:00" (type NVSwitch) not found`},
		{name: "TypeDisambiguates", ref: inventory.ComponentRef{ExternalType: inventory.ComponentTypeNVSwitch, ExternalID: "shared"}, want: "C-rs-2-1"},
		{name: "Ambiguous", ref: inventory.ComponentRef{ExternalID: "shared"}, err: inventory.ErrAmbiguous, contains: `component identifier "shared" is ambiguous`},
		{name: "Unknown", ref: inventory.ComponentRef{ExternalID: "x"}, err: inventory.ErrComponentNotFound, contains: `"x"`},
		{name: "UnknownID", ref: inventory.ComponentRef{ID: uuid.New()}, err: inventory.ErrComponentNotFound},
		{name: "Empty", ref: inventory.ComponentRef{}, err: inventory.ErrInvalidArgument},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := b.svc.ResolveComponent(b.ctx, b.pool, tt.ref)
			if tt.err != nil {
				require.ErrorIs(t, err, tt.err)
				require.Contains(t, err.Error(), tt.contains)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, c.SerialNumber)
			require.NotEmpty(t, c.BMCs)
		})
	}
}

func TestResolveTargets(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ra := b.create(t, smallRack("ra", 1, 4))
	rb := b.create(t, smallRack("rb", 2, 2))
	b.create(t, smallRack("rc", 3, 1))
	_, err := b.client.CreateNVLDomain(b.ctx, &flowv1.CreateNVLDomainRequest{NvlDomain: &flowv1.NVLDomain{Identifier: &flowv1.Identifier{Name: "d"}}})
	require.NoError(t, err)
	_, err = b.client.CreateNVLDomain(b.ctx, &flowv1.CreateNVLDomainRequest{NvlDomain: &flowv1.NVLDomain{Identifier: &flowv1.Identifier{Name: "empty"}}})
	require.NoError(t, err)
	_, err = b.client.AttachRacksToNVLDomain(b.ctx, &flowv1.AttachRacksToNVLDomainRequest{NvlDomainIdentifier: &flowv1.Identifier{Name: "d"}, RackIdentifiers: []*flowv1.Identifier{{Name: "ra"}, {Name: "rb"}}})
	require.NoError(t, err)
	loose, err := b.client.AddComponent(b.ctx, &flowv1.AddComponentRequest{Component: &flowv1.Component{Type: 1, Info: &flowv1.DeviceInfo{SerialNumber: "L1"}, ComponentId: "loose"}})
	require.NoError(t, err)
	require.Empty(t, loose.GetComponent().GetRackId())

	compute := []inventory.ComponentType{inventory.ComponentTypeCompute}
	for _, tt := range []struct {
		name     string
		spec     inventory.TargetSpec
		want     map[string][]string // rack name -> component names
		err      error
		contains string
	}{
		{name: "RackAll", spec: inventory.TargetSpec{Racks: []inventory.RackTarget{{Rack: inventory.RackRef{Name: "rb"}}}},
			want: map[string][]string{"rb": {"rb-c0", "rb-c1"}}},
		{name: "RackTypedMerged", spec: inventory.TargetSpec{Racks: []inventory.RackTarget{
			{Rack: inventory.RackRef{ID: uuid.MustParse(ra)}, Types: compute},
			{Rack: inventory.RackRef{Name: "ra"}, Types: []inventory.ComponentType{inventory.ComponentTypeNVSwitch}},
			{Rack: inventory.RackRef{ExternalID: "ext-rb"}, Types: compute},
		}}, want: map[string][]string{"ra": {"ra-c0", "ra-c1", "ra-c2", "ra-c3"}, "rb": {"rb-c0"}}},
		{name: "Domain", spec: inventory.TargetSpec{NVLDomains: []inventory.NVLDomainTarget{{Domain: inventory.NVLDomainRef{Name: "d"}, Types: compute}}},
			want: map[string][]string{"ra": {"ra-c0", "ra-c2"}, "rb": {"rb-c0"}}},
		{name: "ComponentsGroupedByRack", spec: inventory.TargetSpec{Components: []inventory.ComponentRef{
			{ExternalID: "machine-ra-3"}, {ExternalID: "machine-rb-0"}, {ExternalID: "AA:00:00:01:02:01"},
		}}, want: map[string][]string{"ra": {"ra-c1", "ra-c3"}, "rb": {"rb-c0"}}},
		{name: "NoKind", spec: inventory.TargetSpec{}, err: inventory.ErrInvalidArgument, contains: "exactly one"},
		{name: "TwoKinds", spec: inventory.TargetSpec{Racks: []inventory.RackTarget{{Rack: inventory.RackRef{Name: "ra"}}}, Components: []inventory.ComponentRef{{ExternalID: "x"}}}, err: inventory.ErrInvalidArgument},
		{name: "BadType", spec: inventory.TargetSpec{Racks: []inventory.RackTarget{{Rack: inventory.RackRef{Name: "ra"}, Types: []inventory.ComponentType{"Toaster"}}}}, err: inventory.ErrInvalidArgument, contains: "component_types[0]"},
		{name: "UnknownDomain", spec: inventory.TargetSpec{NVLDomains: []inventory.NVLDomainTarget{{Domain: inventory.NVLDomainRef{Name: "zz"}}}}, err: inventory.ErrNVLDomainNotFound, contains: `"zz"`},
		{name: "EmptyDomain", spec: inventory.TargetSpec{NVLDomains: []inventory.NVLDomainTarget{{Domain: inventory.NVLDomainRef{Name: "empty"}}}}, err: inventory.ErrRackNotFound, contains: "no racks"},
		{name: "RacklessComponent", spec: inventory.TargetSpec{Components: []inventory.ComponentRef{{ExternalID: "loose"}}}, err: inventory.ErrNoRack},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sels, err := b.svc.ResolveTargets(b.ctx, b.pool, tt.spec)
			if tt.err != nil {
				require.ErrorIs(t, err, tt.err)
				require.Contains(t, err.Error(), tt.contains)
				return
			}
			require.NoError(t, err)
			got := map[string][]string{}
			for _, s := range sels {
				names := []string{}
				for _, c := range s.Components {
					names = append(names, c.Name)
				}
				got[s.Rack.Name] = names
			}
			require.Equal(t, tt.want, got)
		})
	}
	_ = rb
}

// TestResolveInventory: the bulk scope of every live rack is what
// ResolveTargets resolves for a spec naming each live rack by ID with the
// same type filter (the default scope of an operation run used to be
// resolved so), over a mixed inventory: racks without components, a
// deleted rack, a deleted component, a rackless component, racks sharing
// a name, names whose bytewise order differs from a locale's, components
// sharing a name, racks in several locations.
func TestResolveInventory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ra := smallRack("ra", 1, 7)
	for i, name := range []string{"c10", "c9", "C1", "éa", "c-1", "dup", "dup"} {
		ra.Components[i].Info.Name = name
	}
	ra.Location = &flowv1.Location{Region: "r2", Datacenter: "d1", Room: "x", Position: "G10"}
	b.create(t, ra)
	upper := smallRack("Ra", 2, 1)
	upper.Location = &flowv1.Location{Region: "r2", Datacenter: "d1", Room: "x", Position: "G9"}
	b.create(t, upper)
	b.create(t, smallRack("rb", 3, 2))
	b.create(t, smallRack("empty", 4, 0))
	for tag := byte(5); tag <= 6; tag++ {
		twin := smallRack("twin", tag, 2)
		twin.ExternalId = ""
		b.create(t, twin)
	}
	gone := b.create(t, smallRack("gone", 7, 2))
	_, err := b.client.DeleteRack(b.ctx, &flowv1.DeleteRackRequest{Id: id(gone)})
	require.NoError(t, err)
	rd := b.create(t, smallRack("rd", 8, 3))
	rack, err := b.svc.Rack(b.ctx, b.pool, uuid.MustParse(rd), true)
	require.NoError(t, err)
	_, err = b.client.DeleteComponent(b.ctx, &flowv1.DeleteComponentRequest{Id: id(rack.Components[1].ID.String())})
	require.NoError(t, err)
	onlySwitches := smallRack("switches", 9, 2)
	onlySwitches.Components = onlySwitches.Components[1:]
	b.create(t, onlySwitches)
	_, err = b.client.AddComponent(b.ctx, &flowv1.AddComponentRequest{Component: &flowv1.Component{Type: 1, Info: &flowv1.DeviceInfo{SerialNumber: "L1"}, ComponentId: "loose"}})
	require.NoError(t, err)

	// every is the spec naming every live rack by ID with types.
	every := func(t *testing.T, types []inventory.ComponentType) inventory.TargetSpec {
		racks, _, err := b.svc.ListRacks(b.ctx, b.pool, inventory.RackQuery{Page: inventory.Page{Limit: inventory.MaxPageLimit}})
		require.NoError(t, err)
		require.Len(t, racks, 8)
		var spec inventory.TargetSpec
		for _, r := range racks {
			spec.Racks = append(spec.Racks, inventory.RackTarget{Rack: inventory.RackRef{ID: r.ID}, Types: types})
		}
		return spec
	}
	for _, tt := range []struct {
		name  string
		types []inventory.ComponentType
	}{
		{name: "Every"},
		{name: "EmptyFilter", types: []inventory.ComponentType{}},
		{name: "Compute", types: []inventory.ComponentType{inventory.ComponentTypeCompute}},
		{name: "Both", types: []inventory.ComponentType{inventory.ComponentTypeNVSwitch, inventory.ComponentTypeCompute, inventory.ComponentTypeNVSwitch}},
		{name: "NoneMatch", types: []inventory.ComponentType{inventory.ComponentTypeCDU}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sels, err := b.svc.ResolveTargets(b.ctx, b.pool, every(t, tt.types))
			require.NoError(t, err)
			want := make([]inventory.ScopeRack, len(sels))
			for i, s := range sels {
				want[i] = inventory.ScopeRack{ID: s.Rack.ID, Name: s.Rack.Name, Location: s.Rack.Location}
				for _, c := range s.Components {
					want[i].Components = append(want[i].Components, inventory.ScopeComponent{ID: c.ID, Type: c.Type})
				}
			}
			got, err := b.svc.ResolveInventory(b.ctx, b.pool, tt.types)
			require.NoError(t, err)
			require.Equal(t, want, got)
		})
	}

	t.Run("Order", func(t *testing.T) {
		t.Parallel()
		got, err := b.svc.ResolveInventory(b.ctx, b.pool, nil)
		require.NoError(t, err)
		var names []string
		for _, r := range got {
			names = append(names, r.Name)
		}
		require.Equal(t, []string{"Ra", "empty", "ra", "rb", "rd", "switches", "twin", "twin"}, names)
		require.Less(t, got[6].ID.String(), got[7].ID.String())
		require.Len(t, got[2].Components, 7)
		require.Empty(t, got[1].Components)
		require.Len(t, got[4].Components, 2, "the deleted component is left out")
	})

	t.Run("BadType", func(t *testing.T) {
		t.Parallel()
		types := []inventory.ComponentType{inventory.ComponentTypeCompute, "Toaster"}
		_, want := b.svc.ResolveTargets(b.ctx, b.pool, every(t, types))
		require.ErrorIs(t, want, inventory.ErrInvalidArgument)
		_, err := b.svc.ResolveInventory(b.ctx, b.pool, types)
		require.ErrorIs(t, err, inventory.ErrInvalidArgument)
		require.Equal(t, want.Error(), err.Error())
	})

	t.Run("NoRacks", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		got, err := e.svc.ResolveInventory(e.ctx, e.pool, []inventory.ComponentType{"Toaster"})
		require.NoError(t, err, "no rack to filter: the type is not checked, as ResolveTargets checks it per rack target")
		require.Empty(t, got)
	})
}
