package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/firmware"
)

var bannerSimAdmin = regexp.MustCompile(`Simulators\s+(http://\S+)/admin/`)

// TestDevSiteCompliance is issue 42's "done when" on `flow dev --seed 30`
// with its firmware mix (docs/simulators.md): the compliance report of the
// baseline imported from Core matches, device by device and rack by rack,
// what the Core simulator holds; `flow baseline apply` then brings the
// site to its baseline through one run whose waves keep every NVLink
// domain whole; and a device that lies about its update (job completed,
// version kept) fails its task, named.
func TestDevSiteCompliance(t *testing.T) {
	t.Parallel()
	devSlot(t)
	dir, err := os.MkdirTemp("", "flow-dev-baseline-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { os.RemoveAll(dir) })
	ctx, cancel := context.WithCancel(context.Background())
	r := &devRun{cancel: cancel, done: make(chan error, 1), out: &syncBuffer{}}
	env := map[string]string{"FLOW_LOG_LEVEL": "warn", "FLOW_ADMIN_LISTEN_ADDR": "127.0.0.1:0", "FLOW_FIRMWARE_POLL_INTERVAL": "200ms",
		"FLOW_FIRMWARE_VERIFY_GRACE": "0s"}
	go func() {
		r.done <- run(ctx, []string{"flow", "dev", "--data-dir", dir, "--listen", "127.0.0.1:0", "--seed", "30", "--sim-phase", "100ms", "--sim-power-delay", "1ms"},
			func(k string) string { return env[k] }, r.out, r.out)
	}()
	addr := r.addr(t)
	defer r.stop(t)
	sim := bannerSimAdmin.FindStringSubmatch(r.out.String())
	require.NotNil(t, sim, r.out.String())
	simURL := sim[1]
	flowCmd := func(args ...string) (string, error) {
		var stdout, stderr bytes.Buffer
		err := run(ctx, append([]string{"flow", "--server", addr}, args...), func(string) string { return "" }, &stdout, &stderr)
		return stdout.String() + stderr.String(), err
	}
	flow := func(args ...string) string {
		t.Helper()
		out, err := flowCmd(args...)
		require.NoError(t, err, "flow %s\n%s", strings.Join(args, " "), out)
		return out
	}
	simGet := func(path string, v any) {
		t.Helper()
		res, err := http.Get(simURL + path)
		require.NoError(t, err)
		defer res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode, path)
		require.NoError(t, json.NewDecoder(res.Body).Decode(v))
	}
	simSend := func(method, path string, body any) {
		t.Helper()
		b, err := json.Marshal(body)
		require.NoError(t, err)
		req, err := http.NewRequest(method, simURL+path, bytes.NewReader(b))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		require.Less(t, res.StatusCode, 300, "%s %s", method, path)
	}

	// The truth: what the simulator holds, measured against the desired
	// versions it holds.
	type simDevice struct {
		Kind, Name string
		Firmware   map[string]string
		Unreported bool
	}
	type desiredEntry struct {
		Components map[string]string `json:"components"`
	}
	truth := func() map[string]string {
		t.Helper()
		var devs []simDevice
		simGet("/admin/devices", &devs)
		var desired []desiredEntry
		simGet("/admin/desired-firmware", &desired)
		want := map[string]map[string]string{} // kind → sub → version
		for _, e := range desired {
			kind := "compute"
			switch {
			case e.Components["nvos"] != "":
				kind = "nvswitch"
			case e.Components["psu"] != "":
				kind = "powershelf"
			}
			want[kind] = e.Components
		}
		out := map[string]string{}
		for _, d := range devs {
			if d.Unreported {
				out[d.Name] = "unknown"
				continue
			}
			below, above := false, false
			for sub, v := range want[d.Kind] {
				c, ok := firmware.CompareVersions(d.Firmware[sub], v)
				require.True(t, ok, "%s %s: %q vs %q", d.Name, sub, d.Firmware[sub], v)
				below, above = below || c < 0, above || c > 0
			}
			switch {
			case below:
				out[d.Name] = "upgrade"
			case above:
				out[d.Name] = "downgrade"
			default:
				out[d.Name] = "compliant"
			}
		}
		return out
	}
	type report struct {
		Total   int `json:"total"`
		Devices []struct {
			Name, State, RackName string
		} `json:"devices"`
		Groups []struct {
			Kind, Name, State string
		} `json:"groups"`
		Site map[string]int `json:"site"`
	}
	compliance := func() (map[string]string, map[string]string) {
		t.Helper()
		devices, racks := map[string]string{}, map[string]string{}
		for offset := 0; ; offset += 1000 {
			var rep report
			require.NoError(t, json.Unmarshal([]byte(flow("-o", "json", "compliance", "--all", "--by", "rack", "--limit", "1000", "--offset", fmt.Sprint(offset))), &rep))
			for _, d := range rep.Devices {
				devices[d.Name] = d.State
			}
			for _, g := range rep.Groups {
				racks[g.Name] = g.State
			}
			if offset+1000 >= rep.Total {
				break
			}
		}
		return devices, racks
	}
	worst := func(states map[string]string) map[string]string {
		rank := map[string]int{"updating": 0, "upgrade": 1, "downgrade": 2, "unknown": 3, "compliant": 4}
		out := map[string]string{}
		for name, st := range states {
			rack := name[:strings.LastIndex(name[:strings.LastIndex(name, "-")], "-")]
			if cur, ok := out[rack]; !ok || rank[st] < rank[cur] {
				out[rack] = st
			}
		}
		return out
	}

	flow("sync", "run")
	out := flow("baseline", "import", "site", "--activate")
	require.Contains(t, out, "baseline site revision 1 of 1 (active: revision 1")
	want := truth()
	require.Len(t, want, 30*35)
	got, racks := compliance()
	require.Equal(t, want, got, "the report is the simulator's truth, device by device")
	require.Equal(t, worst(want), racks, "and rack by rack")
	counts := map[string]int{}
	for _, st := range want {
		counts[st]++
	}
	require.Equal(t, 2, counts["unknown"], "the mix's unreported devices")
	require.Equal(t, 1, counts["downgrade"], "the mix's device ahead")
	require.Positive(t, counts["upgrade"])

	// NVLink domains of four racks: demo-0000…0003, …, the last of two.
	for d := 0; d < 8; d++ {
		flow("nvl-domain", "create", fmt.Sprintf("nvl-%d", d))
		var names []string
		for i := 4 * d; i < min(4*d+4, 30); i++ {
			names = append(names, fmt.Sprintf("demo-%04d", i))
		}
		flow(append([]string{"nvl-domain", "attach", fmt.Sprintf("nvl-%d", d)}, names...)...)
	}

	// Under the built-in firmware rule the shelves behind cannot be
	// upgraded, and apply says so; with a default rule that upgrades
	// shelves too, the whole site.
	out = flow("baseline", "apply", "--dry-run")
	require.Contains(t, out, "powershelf devices below the baseline are left out: the firmware rule in force has no PowerShelf step")
	flow("rule", "create", "-f", "../examples/rules/firmware-with-shelves.yaml")

	// Apply: the racks behind, in domain-whole waves; then compliant.
	out = flow("baseline", "apply", "--name", "to-site", "--canary-racks", "1", "--waves", "2", "--max-concurrent", "30")
	require.Contains(t, out, "operation run")
	out, err = flowCmd("rollout", "watch", "to-site", "--interval", "200ms")
	require.NoError(t, err, out)
	var targets struct {
		Targets []struct {
			RackID struct {
				ID string `json:"id"`
			} `json:"rackId"`
			Phase int `json:"phaseIndex"`
		} `json:"targets"`
	}
	require.NoError(t, json.Unmarshal([]byte(flow("-o", "json", "rollout", "targets", "to-site", "--phases", "all")), &targets))
	require.NotEmpty(t, targets.Targets)
	phaseOfDomain := map[string]int{}
	for _, tg := range targets.Targets {
		var rack struct {
			Rack struct {
				Info struct {
					Name string `json:"name"`
				} `json:"info"`
				NvlDomainIDs []struct {
					ID string `json:"id"`
				} `json:"nvlDomainIds"`
			} `json:"rack"`
		}
		require.NoError(t, json.Unmarshal([]byte(flow("-o", "json", "rack", "get", tg.RackID.ID)), &rack))
		require.Len(t, rack.Rack.NvlDomainIDs, 1, rack.Rack.Info.Name)
		dom := rack.Rack.NvlDomainIDs[0].ID
		if p, ok := phaseOfDomain[dom]; ok {
			require.Equal(t, p, tg.Phase, "every rack of domain %s in one wave", dom)
		}
		phaseOfDomain[dom] = tg.Phase
	}
	flow("sync", "run")
	got, _ = compliance()
	want = truth()
	require.Equal(t, want, got)
	for name, st := range got {
		require.NotEqual(t, "upgrade", st, "%s is still below the baseline", name)
	}

	// A device that lies: put one tray behind again, make its update
	// report success without installing; its task fails, naming it.
	const liar = "demo-0007-ct-02"
	var devs []struct{ ID, Name string }
	simGet("/admin/devices", &devs)
	liarID := ""
	for _, d := range devs {
		if d.Name == liar {
			liarID = d.ID
		}
	}
	require.NotEmpty(t, liarID)
	simSend(http.MethodPatch, "/admin/devices/"+liarID, map[string]any{"firmware": map[string]string{"bios": "1.2.7"}})
	simSend(http.MethodPost, "/admin/faults", map[string]any{"kind": "lie", "device": liarID})
	flow("sync", "run")
	out = flow("baseline", "apply", "--name", "liar")
	require.Contains(t, out, "upgrades 1 devices on 1 racks")
	out, _ = flowCmd("rollout", "watch", "liar", "--interval", "200ms")
	require.Eventually(t, func() bool {
		return strings.Contains(flow("task", "list", "--rack", "demo-0007"), "failed")
	}, time.Minute, 200*time.Millisecond, out)
	tasks := flow("task", "list", "--rack", "demo-0007", "-o", "json")
	require.Contains(t, tasks, liar, "the failed task names the lying tray")
	require.Contains(t, tasks, "1.2.7")
}
