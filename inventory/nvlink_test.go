package inventory_test

import (
	"testing"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// The newest upstream's additions (spec/upstream-delta.md §2–3): the
// NVLink-domain read model, external IDs, rack profiles, health reports and
// with_external_id_only, as the inventory sync leaves them in the tables.
func TestNVLinkDomains(t *testing.T) {
	t.Parallel()
	b := setup(t)

	// Three racks: two in the rack group "rg-1" (the sync's domain, no
	// name), one with no group; one rack with an external ID.
	var rackIDs []string
	for i, serial := range []string{"S-A", "S-B", "S-C"} {
		res, err := b.client.CreateExpectedRack(b.ctx, &flowv1.CreateExpectedRackRequest{Rack: &flowv1.Rack{
			Info: &flowv1.DeviceInfo{Name: []string{"r-a", "r-b", "r-c"}[i], Manufacturer: "NVIDIA", SerialNumber: serial},
			Components: []*flowv1.Component{{
				Type: flowv1.ComponentType_COMPONENT_TYPE_COMPUTE,
				Info: &flowv1.DeviceInfo{Manufacturer: "NVIDIA", SerialNumber: "T-" + serial},
			}},
		}})
		require.NoError(t, err)
		rackIDs = append(rackIDs, res.GetId().GetId())
	}
	domainID, cluster := uuid.New(), uuid.New()
	_, err := b.pool.Exec(b.ctx, `INSERT INTO nvl_domain (id, external_id, nmxc_cluster_id) VALUES ($1, 'rg-1', $2)`, domainID, cluster)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `UPDATE rack SET nvl_domain_id = $1, rack_group_id = 'rg-1', rack_profile_id = p
		FROM (VALUES ($2::uuid, 'GB200_NVL72R1_C2G4_NVIDIA'), ($3::uuid, 'GB200_NVL72R1_C2G4_SMC_NO_POWERSHELF')) AS v(id, p)
		WHERE rack.id = v.id`, domainID, rackIDs[0], rackIDs[1])
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `UPDATE rack SET external_id = 'ext-a', health = $2 WHERE id = $1`, rackIDs[0],
		`{"source":"aggregate","observed_at":"2026-12-01T10:00:00Z","successes":[{"id":"BmcReachable"}],"alerts":[{"id":"Maintenance","message":"under maintenance","classifications":["SuppressExternalAlerting"]}]}`)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `UPDATE rack SET health = 'null' WHERE id = $1`, rackIDs[1]) // cleared by the sync
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `UPDATE component SET health = '{"source":"machine","successes":[],"alerts":[]}' WHERE rack_id = $1`, rackIDs[0])
	require.NoError(t, err)

	t.Run("GetNVLinkDomain", func(t *testing.T) {
		res, err := b.client.GetNVLinkDomain(b.ctx, &flowv1.GetNVLinkDomainRequest{Id: "rg-1", WithComponents: true})
		require.NoError(t, err)
		d := res.GetDomain()
		require.Equal(t, "rg-1", d.GetId())
		require.Equal(t, "rg-1", d.GetRackGroupId())
		require.Empty(t, d.GetName())
		require.Equal(t, "GB200_NVL72R1_C2G4", d.GetTopology())
		require.Equal(t, cluster.String(), d.GetNmxcClusterId())
		require.Len(t, d.GetComponents(), 2)
		for _, c := range d.GetComponents() {
			require.Equal(t, "rg-1", c.GetNvlDomainExternalId())
			require.Nil(t, c.GetTaskStats())
		}

		res, err = b.client.GetNVLinkDomain(b.ctx, &flowv1.GetNVLinkDomainRequest{Id: "rg-1"})
		require.NoError(t, err)
		require.Empty(t, res.GetDomain().GetComponents())
	})

	t.Run("GetNVLinkDomainErrors", func(t *testing.T) {
		_, err := b.client.GetNVLinkDomain(b.ctx, &flowv1.GetNVLinkDomainRequest{Id: "  "})
		require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
		_, err = b.client.GetNVLinkDomain(b.ctx, &flowv1.GetNVLinkDomainRequest{Id: "rg-none"})
		require.Equal(t, connect.CodeNotFound, connect.CodeOf(err))
		require.ErrorContains(t, err, `"rg-none"`)
		// The ID is matched exactly as given, not trimmed.
		_, err = b.client.GetNVLinkDomain(b.ctx, &flowv1.GetNVLinkDomainRequest{Id: " rg-1"})
		require.Equal(t, connect.CodeNotFound, connect.CodeOf(err))
	})

	t.Run("GetListOfNVLinkDomains", func(t *testing.T) {
		// A named domain with an external ID, and one without (never listed).
		_, err := b.client.CreateNVLDomain(b.ctx, &flowv1.CreateNVLDomainRequest{NvlDomain: &flowv1.NVLDomain{
			Identifier: &flowv1.Identifier{Name: "alpha"}, ExternalId: str("rg-2"), NmxcClusterId: str("not-a-uuid"),
		}})
		require.NoError(t, err)
		_, err = b.client.CreateNVLDomain(b.ctx, &flowv1.CreateNVLDomainRequest{NvlDomain: &flowv1.NVLDomain{
			Identifier: &flowv1.Identifier{Name: "beta"},
		}})
		require.NoError(t, err)

		res, err := b.client.GetListOfNVLinkDomains(b.ctx, &flowv1.GetListOfNVLinkDomainsRequest{})
		require.NoError(t, err)
		require.EqualValues(t, 2, res.GetTotal())
		require.Equal(t, []string{"rg-2", "rg-1"}, domainIDs(res.GetDomains())) // named first, unnamed last
		require.Nil(t, res.GetDomains()[0].NmxcClusterId, "a cluster ID that is not a UUID is dropped")
		require.Nil(t, res.GetDomains()[0].Topology, "no members, no topology")

		res, err = b.client.GetListOfNVLinkDomains(b.ctx, &flowv1.GetListOfNVLinkDomainsRequest{OrderBy: "NAME_DESC"})
		require.NoError(t, err)
		require.Equal(t, []string{"rg-1", "rg-2"}, domainIDs(res.GetDomains()))

		res, err = b.client.GetListOfNVLinkDomains(b.ctx, &flowv1.GetListOfNVLinkDomainsRequest{
			Info: &flowv1.StringQueryInfo{Patterns: []string{"alpha"}},
		})
		require.NoError(t, err)
		require.Equal(t, []string{"rg-2"}, domainIDs(res.GetDomains()))

		res, err = b.client.GetListOfNVLinkDomains(b.ctx, &flowv1.GetListOfNVLinkDomainsRequest{
			Pagination: &flowv1.Pagination{Offset: 1, Limit: 1}, WithComponents: true,
		})
		require.NoError(t, err)
		require.EqualValues(t, 2, res.GetTotal())
		require.Equal(t, []string{"rg-1"}, domainIDs(res.GetDomains()))
		require.Len(t, res.GetDomains()[0].GetComponents(), 2)

		_, err = b.client.GetListOfNVLinkDomains(b.ctx, &flowv1.GetListOfNVLinkDomainsRequest{OrderBy: "name"})
		require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
		require.ErrorContains(t, err, "order_by")

		list, err := b.client.GetListOfNVLDomains(b.ctx, &flowv1.GetListOfNVLDomainsRequest{Info: &flowv1.StringQueryInfo{Patterns: []string{"alpha"}}})
		require.NoError(t, err)
		require.Len(t, list.GetNvlDomains(), 1)
		require.Equal(t, "rg-2", list.GetNvlDomains()[0].GetExternalId())

		// An external ID another domain holds is refused.
		_, err = b.client.CreateNVLDomain(b.ctx, &flowv1.CreateNVLDomainRequest{NvlDomain: &flowv1.NVLDomain{
			Identifier: &flowv1.Identifier{Name: "gamma"}, ExternalId: str("rg-1"),
		}})
		require.Equal(t, connect.CodeAlreadyExists, connect.CodeOf(err))
	})

	t.Run("RackFields", func(t *testing.T) {
		res, err := b.client.GetRackInfoByID(b.ctx, &flowv1.GetRackInfoByIDRequest{Id: id(rackIDs[0]), WithComponents: true})
		require.NoError(t, err)
		r := res.GetRack()
		require.Equal(t, "GB200_NVL72R1_C2G4_NVIDIA", r.GetRackProfileId())
		require.Equal(t, []string{"rg-1"}, r.GetNvlDomainExternalIds())
		require.Equal(t, "aggregate", r.GetHealth().GetSource())
		require.Equal(t, "BmcReachable", r.GetHealth().GetSuccesses()[0].GetId())
		alert := r.GetHealth().GetAlerts()[0]
		require.Equal(t, "Maintenance", alert.GetId())
		require.Equal(t, []string{"SuppressExternalAlerting"}, alert.GetClassifications())
		require.Equal(t, "2026-12-01T10:00:00Z", r.GetHealth().GetObservedAt().AsTime().Format("2006-01-02T15:04:05Z"))
		require.Equal(t, "machine", r.GetComponents()[0].GetHealth().GetSource())
		require.Equal(t, "rg-1", r.GetComponents()[0].GetNvlDomainExternalId())

		res, err = b.client.GetRackInfoByID(b.ctx, &flowv1.GetRackInfoByIDRequest{Id: id(rackIDs[1])})
		require.NoError(t, err)
		require.Nil(t, res.GetRack().GetHealth(), "a cleared report is absent, not empty")
		res, err = b.client.GetRackInfoByID(b.ctx, &flowv1.GetRackInfoByIDRequest{Id: id(rackIDs[2]), WithComponents: true})
		require.NoError(t, err)
		require.Empty(t, res.GetRack().GetNvlDomainExternalIds())
		require.Nil(t, res.GetRack().RackProfileId)
		require.Nil(t, res.GetRack().GetComponents()[0].NvlDomainExternalId)

		comps, err := b.client.GetComponents(b.ctx, &flowv1.GetComponentsRequest{})
		require.NoError(t, err)
		withExt := 0
		for _, c := range comps.GetComponents() {
			if c.GetNvlDomainExternalId() == "rg-1" {
				withExt++
			}
		}
		require.Equal(t, 2, withExt)
	})

	t.Run("WithExternalIDOnly", func(t *testing.T) {
		res, err := b.client.GetListOfRacks(b.ctx, &flowv1.GetListOfRacksRequest{WithExternalIdOnly: true})
		require.NoError(t, err)
		require.EqualValues(t, 1, res.GetTotal())
		require.Len(t, res.GetRacks(), 1)
		require.Equal(t, "ext-a", res.GetRacks()[0].GetExternalId())
		res, err = b.client.GetListOfRacks(b.ctx, &flowv1.GetListOfRacksRequest{})
		require.NoError(t, err)
		require.EqualValues(t, 3, res.GetTotal())
	})

	t.Run("TargetByExternalID", func(t *testing.T) {
		comps, err := b.client.GetComponents(b.ctx, &flowv1.GetComponentsRequest{TargetSpec: &flowv1.OperationTargetSpec{
			Targets: &flowv1.OperationTargetSpec_NvlDomains{NvlDomains: &flowv1.NVLDomainTargets{Targets: []*flowv1.NVLDomainTarget{
				{Identifier: &flowv1.NVLDomainTarget_ExternalId{ExternalId: "rg-1"}},
			}}},
		}})
		require.NoError(t, err)
		require.Len(t, comps.GetComponents(), 2)

		_, err = b.client.GetComponents(b.ctx, &flowv1.GetComponentsRequest{TargetSpec: &flowv1.OperationTargetSpec{
			Targets: &flowv1.OperationTargetSpec_NvlDomains{NvlDomains: &flowv1.NVLDomainTargets{Targets: []*flowv1.NVLDomainTarget{
				{Identifier: &flowv1.NVLDomainTarget_ExternalId{ExternalId: " "}},
			}}},
		}})
		require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
		require.ErrorContains(t, err, "external_id")

		_, err = b.client.GetComponents(b.ctx, &flowv1.GetComponentsRequest{TargetSpec: &flowv1.OperationTargetSpec{
			Targets: &flowv1.OperationTargetSpec_NvlDomains{NvlDomains: &flowv1.NVLDomainTargets{Targets: []*flowv1.NVLDomainTarget{
				{Identifier: &flowv1.NVLDomainTarget_ExternalId{ExternalId: "rg-9"}},
			}}},
		}})
		require.Equal(t, connect.CodeNotFound, connect.CodeOf(err))
		require.ErrorContains(t, err, `"rg-9"`)
	})
}

func domainIDs(ds []*flowv1.NVLinkDomain) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.GetId()
	}
	return out
}

// Descriptions are taken as upstream takes them: plain text or a JSON
// document, on create and on patch, and returned as given.
func TestPlainTextDescriptions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res, err := b.client.CreateExpectedRack(b.ctx, &flowv1.CreateExpectedRackRequest{Rack: &flowv1.Rack{
		Info: &flowv1.DeviceInfo{Name: "ex", Manufacturer: "NVIDIA", SerialNumber: "EX-1", Description: str("Example GB200 NVL72 rack")},
		Components: []*flowv1.Component{{
			Type: flowv1.ComponentType_COMPONENT_TYPE_COMPUTE,
			Info: &flowv1.DeviceInfo{Manufacturer: "NVIDIA", SerialNumber: "EX-T1", Description: str("{not json")},
		}},
	}})
	require.NoError(t, err)
	rackID := res.GetId().GetId()
	got, err := b.client.GetRackInfoByID(b.ctx, &flowv1.GetRackInfoByIDRequest{Id: id(rackID), WithComponents: true})
	require.NoError(t, err)
	require.Equal(t, "Example GB200 NVL72 rack", got.GetRack().GetInfo().GetDescription())
	require.Equal(t, "{not json", got.GetRack().GetComponents()[0].GetInfo().GetDescription())
	cid := got.GetRack().GetComponents()[0].GetInfo().GetId().GetId()

	_, err = b.client.PatchRack(b.ctx, &flowv1.PatchRackRequest{Rack: &flowv1.Rack{
		Info: &flowv1.DeviceInfo{Id: id(rackID), Description: str("rack in row G, second from the left")},
	}})
	require.NoError(t, err)
	_, err = b.client.PatchComponent(b.ctx, &flowv1.PatchComponentRequest{Id: id(cid), Description: str(`{"note":"json still works"}`)})
	require.NoError(t, err)
	got, err = b.client.GetRackInfoByID(b.ctx, &flowv1.GetRackInfoByIDRequest{Id: id(rackID), WithComponents: true})
	require.NoError(t, err)
	require.Equal(t, "rack in row G, second from the left", got.GetRack().GetInfo().GetDescription())
	require.Equal(t, `{"note":"json still works"}`, got.GetRack().GetComponents()[0].GetInfo().GetDescription())
}
