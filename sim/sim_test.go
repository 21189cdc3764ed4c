package sim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/sim"
)

func TestFaultsTimesAndScope(t *testing.T) {
	t.Parallel()
	fs := sim.NewFaults(1)
	id, err := fs.Add(sim.Fault{Kind: sim.FaultItem, Method: "M", Device: "d1", Times: 2})
	require.NoError(t, err)
	require.Equal(t, 1, id)
	_, ok := fs.Take(sim.FaultItem, "Other", "d1")
	require.False(t, ok, "method must match")
	_, ok = fs.Take(sim.FaultItem, "M", "d2")
	require.False(t, ok, "device must match")
	_, ok = fs.Take(sim.FaultItem, "M", "D1")
	require.True(t, ok, "devices match case-insensitively")
	_, ok = fs.Take(sim.FaultItem, "M", "d1")
	require.True(t, ok)
	_, ok = fs.Take(sim.FaultItem, "M", "d1")
	require.False(t, ok, "used up after Times")
	require.Empty(t, fs.List())

	_, err = fs.Add(sim.Fault{Kind: "boom"})
	require.Error(t, err)
	_, err = fs.Add(sim.Fault{Kind: sim.FaultError, Code: "nope"})
	require.Error(t, err)
	_, err = fs.Add(sim.Fault{Kind: sim.FaultError, Rate: 2})
	require.Error(t, err)
}

func TestFaultsRate(t *testing.T) {
	t.Parallel()
	fs := sim.NewFaults(42)
	_, err := fs.Add(sim.Fault{Kind: sim.FaultDrop, Rate: 0.5})
	require.NoError(t, err)
	fired := 0
	for range 1000 {
		if _, ok := fs.Take(sim.FaultDrop, "M", "d"); ok {
			fired++
		}
	}
	require.InDelta(t, 500, fired, 100, "seeded PRNG, so this never flakes")
}

func TestGate(t *testing.T) {
	t.Parallel()
	fs := sim.NewFaults(1)
	_, err := fs.Add(sim.Fault{Kind: sim.FaultError, Code: "internal", Message: "boom", Times: 1})
	require.NoError(t, err)
	err = fs.Gate(context.Background(), "M", nil)
	require.Equal(t, connect.CodeInternal, connect.CodeOf(err))
	require.NoError(t, fs.Gate(context.Background(), "M", nil))

	_, err = fs.Add(sim.Fault{Kind: sim.FaultLatency, Device: "d", Latency: sim.Duration(time.Hour)})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = fs.Gate(ctx, "M", []string{"d"})
	require.Equal(t, connect.CodeDeadlineExceeded, connect.CodeOf(err), "latency gives way to the caller's context")
}

func TestDurationJSON(t *testing.T) {
	t.Parallel()
	var f sim.Fault
	require.NoError(t, json.Unmarshal([]byte(`{"kind":"latency","latency":"250ms"}`), &f))
	require.Equal(t, sim.Duration(250*time.Millisecond), f.Latency)
	b, err := json.Marshal(f)
	require.NoError(t, err)
	require.Contains(t, string(b), `"latency":"250ms"`)
	require.Error(t, json.Unmarshal([]byte(`{"latency":true}`), &f))
}

func TestJournalAndClock(t *testing.T) {
	t.Parallel()
	clock := sim.NewFakeClock(time.Unix(100, 0))
	clock.Advance(time.Minute)
	require.Equal(t, time.Unix(160, 0), clock.Now())
	var j sim.Journal
	j.Record(sim.Call{Method: "A", Devices: []string{"x"}})
	j.Record(sim.Call{Method: "B", Devices: []string{"x", "y"}})
	j.Record(sim.Call{Method: "A", Devices: []string{"y"}})
	require.Len(t, j.Calls(), 3)
	require.Len(t, j.Calls("A"), 2)
	require.Equal(t, 1, j.CountFor("A", "x"))
	j.Reset()
	require.Empty(t, j.Calls())
}

func TestJournalKeepsTheNewestCallsWithinItsBounds(t *testing.T) {
	var j sim.Journal
	names := make([]string, sim.JournalMaxDevices/4)
	for i := range 6 {
		j.Record(sim.Call{Method: fmt.Sprintf("M%d", i), Devices: names})
	}
	got := j.Calls()
	require.Len(t, got, 4, "four calls of a quarter of the device bound each")
	require.Equal(t, "M2", got[0].Method)
	require.Equal(t, "M5", got[3].Method)
	for i := range sim.JournalMaxCalls + 10 {
		j.Record(sim.Call{Method: fmt.Sprintf("N%d", i)})
	}
	got = j.Calls()
	require.Len(t, got, sim.JournalMaxCalls)
	require.Equal(t, "N10", got[0].Method)
	j.Reset()
	require.Empty(t, j.Calls())
}
