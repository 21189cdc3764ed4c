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
