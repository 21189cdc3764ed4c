package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/cli"
)

func TestCLIInventory(t *testing.T) {
	t.Parallel()
	b := startServer(t, nil).bundle()

	out, _, err := b.flow("rack", "create", "-f", "../examples/rack-g10.json")
	require.NoError(t, err)
	rackID := strings.TrimSpace(out)
	require.Len(t, rackID, 36)

	out, _, err = b.flow("rack", "create", "-f", "../examples/rack-gb200-nvl72.json")
	require.NoError(t, err)
	nvl72 := strings.TrimSpace(out)

	t.Run("ReadmeExampleJSON", func(t *testing.T) {
		t.Parallel()
		out, _, err := b.flow("component", "get", "--manufacturer", "Wiwynn", "--serial", "B8111801000851500108Y0SA", "--rack", "-o", "json")
		require.NoError(t, err)
		var res struct {
			Component struct {
				Info   struct{ Manufacturer string }
				RackID struct{ ID string } `json:"rackId"`
				Bmcs   []struct{ MacAddress string }
			}
			Rack struct{ Info struct{ Name string } }
		}
		require.NoError(t, json.Unmarshal([]byte(out), &res))
		require.Equal(t, "WiWynn", res.Component.Info.Manufacturer)
		require.Equal(t, rackID, res.Component.RackID.ID)
		require.Len(t, res.Component.Bmcs, 3)
		require.Equal(t, "g10", res.Rack.Info.Name)
	})

	t.Run("Tables", func(t *testing.T) {
		t.Parallel()
		out, _, err := b.flow("rack", "list")
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		// A listing without components has no COMPONENTS column: it
		// would read "none" for racks that have them.
		require.Equal(t, []string{"ID", "NAME", "MANUFACTURER", "SERIAL", "MODEL", "LOCATION", "NVL", "DOMAIN"}, strings.Fields(lines[0]))
		require.Contains(t, lines[1], "g10")
		require.Contains(t, lines[2], "nvl72-example")
		require.Equal(t, "(2 of 2 racks)", lines[3])
		out, _, err = b.flow("rack", "list", "--components")
		require.NoError(t, err)
		lines = strings.Split(strings.TrimSpace(out), "\n")
		require.Equal(t, []string{"ID", "NAME", "MANUFACTURER", "SERIAL", "MODEL", "LOCATION", "COMPONENTS", "NVL", "DOMAIN"}, strings.Fields(lines[0]))
		require.Regexp(t, `\sg10\s.*\s[1-9][0-9]*\s`, lines[1], "the count of g10's components")

		out, _, err = b.flow("component", "list", "--rack", "nvl72-example", "--type", "compute", "--limit", "5")
		require.NoError(t, err)
		require.Contains(t, out, "(5 of 18 components)")
		require.Contains(t, out, "host=06:00:00:01:00:00 dpu=06:00:00:01:00:01")

		out, _, err = b.flow("rack", "get", rackID, "--components")
		require.NoError(t, err)
		require.Contains(t, out, "MY/jhb01/EW-F00-DH-02/EW-F00-DH-02-G10")
		require.Contains(t, out, "36/16/0")
	})

	t.Run("NVLDomains", func(t *testing.T) {
		t.Parallel()
		_, _, err := b.flow("nvl-domain", "create", "dom")
		require.NoError(t, err)
		_, _, err = b.flow("nvl-domain", "attach", "dom", nvl72)
		require.NoError(t, err)
		out, _, err := b.flow("nvl-domain", "racks", "dom")
		require.NoError(t, err)
		require.Contains(t, out, "nvl72-example")
		require.Regexp(t, `nvl72-example\s.*\sdom\n`, out, "the domain by name")
		require.Regexp(t, `\sdom\s+[0-9a-f-]{36}\s`, b.mustFlow(t, "rack", "get", "nvl72-example", "-o", "wide"), "-o wide: and by UUID")
		out, _, err = b.flow("nvl-domain", "list", "-o", "json")
		require.NoError(t, err)
		require.Contains(t, out, `"name": "dom"`)
		_, _, err = b.flow("nvl-domain", "detach", "nvl72-example")
		require.NoError(t, err)
		out, _, err = b.flow("nvl-domain", "racks", "dom")
		require.NoError(t, err)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(out), "\n")+1, "header only: %s", out)
	})

	t.Run("PatchDeletePurge", func(t *testing.T) {
		t.Parallel()
		b := startServer(t, nil).bundle()
		out, _, err := b.flow("rack", "create", "-f", "../examples/rack-g10.json")
		require.NoError(t, err)
		id := strings.TrimSpace(out)
		out, _, err = b.flow("rack", "patch", id, "--room", "R2")
		require.NoError(t, err)
		require.Contains(t, out, "patched (location.room)")
		out, _, err = b.flow("component", "get", "--manufacturer", "wiwynn", "--serial", "B8111801000851500108Y0SA", "-o", "json")
		require.NoError(t, err)
		var res struct {
			Component struct {
				Info struct{ ID struct{ ID string } }
			}
		}
		require.NoError(t, json.Unmarshal([]byte(out), &res))
		cid := res.Component.Info.ID.ID
		out, _, err = b.flow("component", "patch", cid, "--tray", "3", "--firmware", "FW 9")
		require.NoError(t, err)
		require.Contains(t, out, "36/3/0")
		require.Contains(t, out, "FW 9")
		_, _, err = b.flow("component", "delete", cid)
		require.NoError(t, err)
		_, _, err = b.flow("component", "purge", cid)
		require.NoError(t, err)
		_, _, err = b.flow("rack", "delete", id)
		require.NoError(t, err)
		out, _, err = b.flow("rack", "purge", id)
		require.NoError(t, err)
		require.Contains(t, out, "purged rack "+id)
	})

	for _, tt := range []struct {
		name     string
		args     []string
		contains string
		usage    bool
	}{
		{name: "NotFound", args: []string{"rack", "get", "00000000-0000-0000-0000-000000000001"}, contains: "not_found: rack not found"},
		{name: "AlreadyExists", args: []string{"rack", "create", "-f", "../examples/rack-g10.json"}, contains: "already_exists: "},
		{name: "InvalidArgument", args: []string{"component", "get", "--manufacturer", "x", "--serial", ""}, contains: "want COMPONENT or", usage: true},
		{name: "NoSuchName", args: []string{"rack", "delete", "nope"}, contains: `not_found: no rack is named "nope"`},
		{name: "UnknownVerb", args: []string{"rack", "explode"}, contains: "unknown rack verb \"explode\"\nRun 'flow rack --help' for usage.", usage: true},
		{name: "UnknownCommand", args: []string{"explode"}, contains: "unknown command \"explode\" for \"flow\"\nRun 'flow --help' for usage.", usage: true},
		{name: "UnknownFlag", args: []string{"rack", "list", "--explode"}, contains: "unknown flag: --explode\nRun 'flow rack list --help' for usage.", usage: true},
		{name: "BadOutput", args: []string{"rack", "list", "-o", "xml"}, contains: "-o must be one of table, wide, json, yaml, csv", usage: true},
		{name: "MissingFile", args: []string{"rack", "create", "-f", "nope.json"}, contains: "nope.json"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := b.flow(tt.args...)
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.contains)
			want := 1
			if tt.usage {
				want = 2
			}
			require.Equal(t, want, cli.ExitCode(err))
		})
	}
}

// TestCLIRackCreateUpstreamFile: `flow rack create -f` loads a rack file in
// upstream's CLI format (examples/rack-upstream-format.json, ours, in
// their format): plain-text description, lowercase types, tray_index, BMC
// mac/ip; a malformed one is refused naming the field, and nothing is
// written.
func TestCLIRackCreateUpstreamFile(t *testing.T) {
	t.Parallel()
	b := startServer(t, nil).bundle()
	out, _, err := b.flow("rack", "create", "-f", "../examples/rack-upstream-format.json")
	require.NoError(t, err)
	id := strings.TrimSpace(out)
	require.Len(t, id, 36)

	out, _, err = b.flow("rack", "get", id, "--components", "-o", "json")
	require.NoError(t, err)
	var res struct {
		Rack struct {
			Info       struct{ Name, Model, Description string }
			Location   struct{ Position string }
			Components []struct {
				Type            string
				FirmwareVersion string
				Info            struct{ Name, Description string }
				Position        struct{ SlotID, TrayIdx, HostID int32 }
				Bmcs            []struct{ Type, MacAddress, IPAddress string }
			}
		}
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	r := res.Rack
	require.Equal(t, "nvl72-upstream-format", r.Info.Name)
	require.Equal(t, "Example GB200 NVL72 rack", r.Info.Description, "plain text, as upstream takes it")
	require.Equal(t, "row-01-pos-07", r.Location.Position)
	require.Len(t, r.Components, 4)
	byName := map[string]int{}
	for i, c := range r.Components {
		byName[c.Info.Name] = i
	}
	ct := r.Components[byName["nvl72-upstream-format-ct-01"]]
	require.Equal(t, "COMPONENT_TYPE_COMPUTE", ct.Type)
	require.Equal(t, int32(1), ct.Position.TrayIdx, "tray_index")
	require.Equal(t, int32(2), ct.Position.HostID)
	require.Len(t, ct.Bmcs, 2)
	require.Equal(t, "BMC_TYPE_HOST", ct.Bmcs[0].Type)
	require.Equal(t, "06:00:00:07:01:00", ct.Bmcs[0].MacAddress)
	require.Equal(t, "10.7.0.11", ct.Bmcs[0].IPAddress)
	require.Equal(t, "BMC_TYPE_DPU", ct.Bmcs[1].Type)
	require.Equal(t, "compute tray in slot 5", r.Components[byName["nvl72-upstream-format-ct-00"]].Info.Description)
	require.Equal(t, "COMPONENT_TYPE_NVSWITCH", r.Components[byName["nvl72-upstream-format-sw-00"]].Type)
	ps := r.Components[byName["nvl72-upstream-format-ps-00"]]
	require.Equal(t, "COMPONENT_TYPE_POWERSHELF", ps.Type)
	require.Equal(t, "BMC_TYPE_HOST", ps.Bmcs[0].Type, "a BMC without a type is the host's, as upstream")

	before, _, err := b.flow("rack", "list", "-o", "json")
	require.NoError(t, err)
	for _, tt := range []struct{ edit, want string }{
		{`"type": "nvswitch"`, `components[2].type: invalid component type "gpu"`},
		{`"mac": "06:00:00:07:10:00"`, `components[2].bmcs[0].mac: invalid MAC address "nope"`},
		{`"ip": "10.7.0.10"`, `components[0].bmcs[0].ip: invalid IP address "nope"`},
	} {
		raw, err := os.ReadFile("../examples/rack-upstream-format.json")
		require.NoError(t, err)
		bad := strings.Replace(string(raw), tt.edit, strings.Split(tt.edit, ":")[0]+`: "`+map[bool]string{true: "gpu", false: "nope"}[strings.HasPrefix(tt.edit, `"type"`)]+`"`, 1)
		require.NotEqual(t, string(raw), bad)
		path := filepath.Join(t.TempDir(), "bad.json")
		require.NoError(t, os.WriteFile(path, []byte(bad), 0o600))
		_, _, err = b.flow("rack", "create", "-f", path)
		require.ErrorContains(t, err, tt.want)
		require.Equal(t, 1, cli.ExitCode(err))
	}
	after, _, err := b.flow("rack", "list", "-o", "json")
	require.NoError(t, err)
	require.Equal(t, before, after, "a refused file writes nothing")
}

// TestCLIRackPurgeByName: `flow rack purge NAME` takes the name a
// soft-deleted rack had (found through the admin service's
// FindDeletedRacks, since v1.Flow's reads leave deleted racks out), as
// every other rack verb takes names; a live rack's name says to delete it
// first, an unknown name is not_found, and a name several deleted racks
// share exits 2 listing their UUIDs.
func TestCLIRackPurgeByName(t *testing.T) {
	t.Parallel()
	b := startServer(t, nil).bundle()
	// create registers a rack named name with serial serial and returns its
	// UUID.
	create := func(t *testing.T, name, serial string) string {
		t.Helper()
		path := filepath.Join(t.TempDir(), serial+".json")
		require.NoError(t, os.WriteFile(path, []byte(`{"rack": {"info": {"name": "`+name+`", "manufacturer": "Wiwynn", "serial_number": "`+serial+`"}}}`), 0o600))
		out, _, err := b.flow("rack", "create", "-f", path)
		require.NoError(t, err)
		id := strings.TrimSpace(out)
		require.Len(t, id, 36)
		return id
	}

	t.Run("ByName", func(t *testing.T) {
		t.Parallel()
		id := create(t, "purge-me", "PURGE-1")
		_, _, err := b.flow("rack", "purge", "purge-me")
		require.ErrorContains(t, err, `failed_precondition: rack "purge-me" (`+id+`) is not deleted: delete it first (flow rack delete purge-me)`)
		require.Equal(t, 1, cli.ExitCode(err))

		_, _, err = b.flow("rack", "delete", "purge-me")
		require.NoError(t, err)
		out, _, err := b.flow("rack", "purge", "purge-me")
		require.NoError(t, err)
		require.Equal(t, "purged rack "+id+"\n", out)

		// Gone for good: the name is no deleted rack's any more, and the
		// serial is free again.
		_, _, err = b.flow("rack", "purge", "purge-me")
		require.ErrorContains(t, err, `not_found: no deleted rack is named "purge-me"`)
		require.Equal(t, 1, cli.ExitCode(err))
		create(t, "purge-me-again", "PURGE-1")
	})

	t.Run("UnknownName", func(t *testing.T) {
		t.Parallel()
		_, _, err := b.flow("rack", "purge", "no-such-rack")
		require.ErrorContains(t, err, `not_found: no deleted rack is named "no-such-rack"`)
		require.Equal(t, 1, cli.ExitCode(err))
	})

	t.Run("AmbiguousName", func(t *testing.T) {
		t.Parallel()
		ids := []string{create(t, "twin", "TWIN-1"), create(t, "twin", "TWIN-2")}
		for _, id := range ids {
			_, _, err := b.flow("rack", "delete", id)
			require.NoError(t, err)
		}
		_, _, err := b.flow("rack", "purge", "twin")
		require.ErrorContains(t, err, `2 deleted racks are named "twin": `)
		require.ErrorContains(t, err, "pass the UUID of the one to purge (flow rack purge UUID)")
		for i, id := range ids {
			require.ErrorContains(t, err, id+" (Wiwynn/TWIN-"+strconv.Itoa(i+1)+", deleted ")
		}
		require.Equal(t, 2, cli.ExitCode(err), "an ambiguous name is refused as bad usage")

		// Nothing was purged: each still purges by UUID, and once one is
		// gone the name is unambiguous.
		out, _, err := b.flow("rack", "purge", ids[0])
		require.NoError(t, err)
		require.Contains(t, out, "purged rack "+ids[0])
		out, _, err = b.flow("rack", "purge", "twin")
		require.NoError(t, err)
		require.Contains(t, out, "purged rack "+ids[1])
	})

	t.Run("LiveAndDeleted", func(t *testing.T) {
		t.Parallel()
		// A rack re-registered under the name of a deleted one: purge takes
		// the deleted one and leaves the live one.
		old := create(t, "reused", "REUSED-1")
		_, _, err := b.flow("rack", "delete", old)
		require.NoError(t, err)
		live := create(t, "reused", "REUSED-2")
		out, _, err := b.flow("rack", "purge", "reused")
		require.NoError(t, err)
		require.Contains(t, out, "purged rack "+old)
		out, _, err = b.flow("rack", "get", "reused", "-o", "json")
		require.NoError(t, err)
		require.Contains(t, out, live)
	})
}
