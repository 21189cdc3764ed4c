package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/inventory"
)

// The runs of flow bench against a server child are tested in app
// (app/bench_test.go), whose test binary can be that child.

func TestBenchRack(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		m    int
		want map[inventory.ComponentType]int
	}{
		{name: "One", m: 1, want: map[inventory.ComponentType]int{inventory.ComponentTypePowerShelf: 1}},
		{name: "OneOfEach", m: 3, want: map[inventory.ComponentType]int{inventory.ComponentTypePowerShelf: 1, inventory.ComponentTypeCompute: 1, inventory.ComponentTypeNVSwitch: 1}},
		{name: "Six", m: 6, want: map[inventory.ComponentType]int{inventory.ComponentTypePowerShelf: 4, inventory.ComponentTypeCompute: 1, inventory.ComponentTypeNVSwitch: 1}},
		{name: "Full", m: 35, want: map[inventory.ComponentType]int{inventory.ComponentTypePowerShelf: 8, inventory.ComponentTypeCompute: 18, inventory.ComponentTypeNVSwitch: 9}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := benchRack(3, tt.m)
			require.Len(t, r.Components, tt.m)
			got := map[inventory.ComponentType]int{}
			for _, c := range r.Components {
				got[c.Type]++
			}
			require.Equal(t, tt.want, got)
			require.Equal(t, inventory.DemoRack(3).Name, r.Name)
		})
	}
}

func TestPercentileMs(t *testing.T) {
	t.Parallel()
	ds := make([]time.Duration, 100)
	for i := range ds {
		ds[i] = time.Duration(100-i) * time.Millisecond // 100ms..1ms, unsorted
	}
	require.Equal(t, 50.0, percentileMs(ds, 50))
	require.Equal(t, 99.0, percentileMs(ds, 99))
	require.Equal(t, 7.0, percentileMs([]time.Duration{7 * time.Millisecond}, 99))
	require.Zero(t, percentileMs(nil, 50))
}

func TestReportServerErrors(t *testing.T) {
	dir := t.TempDir()
	var log strings.Builder
	log.WriteString(`{"level":"INFO","msg":"rpc"}` + "\n")
	for i := range maxServerErrors + 3 {
		fmt.Fprintf(&log, `{"level":"ERROR","msg":"internal error","n":%d}`+"\n", i)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "server.log"), []byte(log.String()), 0o600))
	var out strings.Builder
	b := &Bench{dir: dir, o: benchOptions{progress: &out}}
	b.reportServerErrors()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Equal(t, fmt.Sprintf("bench: the server logged %d error(s); the last %d:", maxServerErrors+3, maxServerErrors), lines[0])
	require.Len(t, lines, 1+maxServerErrors)
	require.Contains(t, lines[1], `"n":3}`, "the last ones")
	require.Contains(t, lines[maxServerErrors], fmt.Sprintf(`"n":%d}`, maxServerErrors+2))

	out.Reset()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "server.log"), []byte(`{"level":"INFO","msg":"rpc"}`+"\n"), 0o600))
	b.reportServerErrors()
	require.Empty(t, out.String(), "nothing to say without errors")
	(&Bench{dir: t.TempDir(), o: benchOptions{progress: &out}}).reportServerErrors()
	require.Empty(t, out.String(), "nor without a server log")
}

// TestReadOptions: the readers' flags are checked before anything starts.
func TestReadOptions(t *testing.T) {
	base := Options{Racks: 1, Components: 35, Workload: "power-on", Concurrency: 1, ReadProtocol: "json", ReadMethod: "racks", ReadPage: 100, ReadDuration: time.Minute}
	for _, tt := range []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"NoneWithoutReaders", func(o *Options) { o.Workload = "none" }, "--workload none needs --readers"},
		{"LeakWithoutReaders", func(o *Options) { o.ReadLeak = true }, "--read-leak needs --readers"},
		{"Protocol", func(o *Options) { o.Readers, o.ReadProtocol = 2, "xml" }, `--read-protocol "xml": want one of json, proto, grpc`},
		{"Method", func(o *Options) { o.Readers, o.ReadMethod = 2, "nodes" }, `--read-method "nodes": want one of racks, rack, tasks`},
		{"Page", func(o *Options) { o.Readers, o.ReadPage = 2, 0 }, "--read-page must be at least 1"},
		{"Negative", func(o *Options) { o.Readers = -1 }, "--readers must not be negative"},
		{"MethodInList", func(o *Options) { o.Readers, o.Workload, o.ReadMethod = 2, "none", "racks,nodes+components" }, `--read-method "nodes+components"`},
		{"ProtocolInList", func(o *Options) { o.Readers, o.Workload, o.ReadProtocol = 2, "none", "json,xml" }, `--read-protocol "xml"`},
		{"PhasesDuringWorkload", func(o *Options) { o.Readers, o.ReadProtocol = 2, "json,grpc" }, "several read phases"},
		{"AfterWithoutWorkload", func(o *Options) { o.Readers, o.Workload, o.ReadAfter = 2, "none", true }, "--read-after needs --readers and a workload"},
		{"AfterWithoutReaders", func(o *Options) { o.ReadAfter = true }, "--read-after needs --readers and a workload"},
		{"Valid", func(o *Options) { o.Readers, o.Workload, o.ReadLeak, o.ReadProtocol = 100, "none", true, "grpc" }, ""},
		{"ValidPhasesAfter", func(o *Options) {
			o.Readers, o.ReadAfter, o.ReadLeak, o.ReadProtocol, o.ReadMethod = 100, true, true, "json,proto,grpc", "racks+components,tasks"
		}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := base
			tt.edit(&o)
			bo, err := o.options()
			if tt.want == "" {
				require.NoError(t, err)
				require.Equal(t, 100, bo.readers)
				require.True(t, bo.readLeak)
				return
			}
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// TestParseReadPhases: each method in each protocol, methods outermost; a
// "+components" suffix or --with-components asks for components.
func TestParseReadPhases(t *testing.T) {
	t.Parallel()
	got, err := parseReadPhases("json, grpc", "racks+components,tasks", false)
	require.NoError(t, err)
	require.Equal(t, []readPhase{
		{protocol: "json", method: "racks", withComponents: true}, {protocol: "grpc", method: "racks", withComponents: true},
		{protocol: "json", method: "tasks"}, {protocol: "grpc", method: "tasks"},
	}, got)
	got, err = parseReadPhases("proto", "rack", true)
	require.NoError(t, err)
	require.Equal(t, []readPhase{{protocol: "proto", method: "rack", withComponents: true}}, got)
	require.Equal(t, "rack+components over proto", got[0].String())
}
