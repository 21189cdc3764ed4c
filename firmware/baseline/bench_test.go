package baseline_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/firmware/baseline"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/opstest"
)

var benchRacks = flag.Int("compliance.racks", 3000, "racks (35 components each) BenchmarkCompliance seeds")

// BenchmarkCompliance measures the compliance report on a site of
// -compliance.racks demo racks (35 devices each, every device's versions
// recorded, one tray in 50 below the baseline): one page of devices (the
// CLI's default: not compliant ones, 100), and the site roll-up (counts
// per rack, NVLink domain, row and hall with the first page), each with
// the site's snapshot current and right after a change (…Cold: the
// inventory and the installed versions changed; …ColdFirmware,
// …ColdInventory: one of them). Targets (docs/bench.md): a page ≤ 1 s,
// the roll-up ≤ 3 s at 3,000 racks.
//
//	go test ./firmware/baseline -run '^$' -bench Compliance -benchtime 3x
func BenchmarkCompliance(b *testing.B) {
	ctx := context.Background()
	pool, err := db.Open(ctx, dbtest.NewDB(b), db.PoolConfig{MaxConns: 8})
	require.NoError(b, err)
	defer pool.Close()
	inv := inventory.NewService()
	t0 := time.Now()
	require.NoError(b, inv.CreateDemoRacks(ctx, pool, *benchRacks, 4))
	b.Logf("seeded %d racks in %s", *benchRacks, time.Since(t0).Round(time.Millisecond))
	t0 = time.Now()
	for _, typ := range []inventory.ComponentType{inventory.ComponentTypeCompute, inventory.ComponentTypeNVSwitch, inventory.ComponentTypePowerShelf} {
		devs, err := inv.FirmwareDevices(ctx, pool, inventory.FirmwareDeviceFilter{Type: typ})
		require.NoError(b, err)
		readings := make([]inventory.FirmwareReading, len(devs))
		for i, d := range devs {
			v := inventory.SubVersions{"bmc": {"2.0"}, "bios": {"1.5"}, "nic": {"28.39.1002", "28.39.1002"}}
			if i%50 == 7 {
				v["bmc"] = []string{"1.9"}
			}
			if typ == inventory.ComponentTypePowerShelf {
				v = inventory.SubVersions{"pmc": {"PS 3.1.0"}, "psu": {"1.2"}}
			}
			readings[i] = inventory.FirmwareReading{ComponentID: d.ID, Versions: v}
		}
		require.NoError(b, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := inv.RecordFirmware(ctx, tx, typ, time.Now(), readings, nil)
			return err
		}))
	}
	_, err = pool.Exec(ctx, "ANALYZE")
	require.NoError(b, err)
	b.Logf("recorded versions in %s", time.Since(t0).Round(time.Millisecond))
	rules, err := operations.NewService(opstest.Racks{Inv: inv})
	require.NoError(b, err)
	svc := baseline.NewService(baseline.Config{Inventory: inv, Operations: rules, StaleAfter: time.Hour})
	require.NoError(b, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := svc.Create(ctx, tx, "site", "", []baseline.Entry{
			{ComponentType: "compute", Component: "bmc", Version: "2.0"}, {ComponentType: "compute", Component: "bios", Version: "1.5"},
			{ComponentType: "compute", Component: "nic", Version: "28.39.1002"}, {ComponentType: "nvswitch", Component: "bmc", Version: "2.0"},
			{ComponentType: "powershelf", Component: "pmc", Version: "PS 3.1.0"},
		}, baseline.SourceManual, "bench", true)
		return err
	}))
	b.Run("DeviceRead", func(b *testing.B) {
		for b.Loop() {
			_, err := inv.FirmwareDevices(ctx, pool, inventory.FirmwareDeviceFilter{})
			require.NoError(b, err)
		}
	})
	notCompliant := []string{baseline.StateUpgrade, baseline.StateDowngrade, baseline.StateUnknown, baseline.StateUpdating}
	rollUps := []string{baseline.GroupRack, baseline.GroupDomain, baseline.GroupRow, baseline.GroupHall}
	// What a change moves before each call of a cold case: the installed
	// versions' generation (versions recorded), the inventory's (a device
	// or rack written), or both (a firmware update: a component's BMC
	// version and its installed versions), so that the snapshot is built
	// again from what changed.
	const (
		firmwareGen  = `UPDATE component_firmware_generation SET n = n + 1`
		inventoryGen = `UPDATE inventory_generation SET n = n + 1 WHERE shard = 0`
	)
	for _, bc := range []struct {
		name string
		q    baseline.Query
		cold []string // statements run before every call (none: the snapshot is current)
	}{
		{"PageCold", baseline.Query{States: notCompliant}, []string{firmwareGen, inventoryGen}},
		{"PageColdFirmware", baseline.Query{States: notCompliant}, []string{firmwareGen}},
		{"PageColdInventory", baseline.Query{States: notCompliant}, []string{inventoryGen}},
		{"Page", baseline.Query{States: notCompliant}, nil},
		{"RackPage", baseline.Query{RackIDs: []uuid.UUID{firstRack(b, ctx, pool)}}, nil},
		{"SiteRollUpCold", baseline.Query{GroupBy: rollUps}, []string{firmwareGen, inventoryGen}},
		{"SiteRollUp", baseline.Query{GroupBy: rollUps}, nil},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var r baseline.Report
			_, err = svc.Compliance(ctx, pool, bc.q) // warm
			require.NoError(b, err)
			var goCPU, pgCPU time.Duration
			for b.Loop() {
				if len(bc.cold) > 0 {
					b.StopTimer()
					for _, sql := range bc.cold {
						_, err := pool.Exec(ctx, sql)
						require.NoError(b, err)
					}
					b.StartTimer()
				}
				b.StopTimer()
				goBefore, pgBefore := processCPU(), backendCPU(b, ctx, pool)
				b.StartTimer()
				r, err = svc.Compliance(ctx, pool, bc.q)
				b.StopTimer()
				goCPU += processCPU() - goBefore
				pgCPU += backendCPU(b, ctx, pool).since(pgBefore)
				b.StartTimer()
				require.NoError(b, err)
			}
			b.ReportMetric(float64(r.Site.Total), "devices")
			b.ReportMetric(float64(len(r.Groups)), "groups")
			// The CPU a call took, which a shared machine's load inflates
			// far less than its wall time: this process's (the call, its
			// collections) and the PostgreSQL backends' serving it.
			b.ReportMetric(float64(goCPU.Microseconds())/1000/float64(b.N), "go-cpu-ms/op")
			b.ReportMetric(float64(pgCPU.Microseconds())/1000/float64(b.N), "pg-cpu-ms/op")
		})
	}
}

func firstRack(b *testing.B, ctx context.Context, pool *pgxpool.Pool) uuid.UUID {
	var id uuid.UUID
	require.NoError(b, pool.QueryRow(ctx, `SELECT id FROM rack ORDER BY name LIMIT 1`).Scan(&id))
	return id
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// backendTicks is the CPU time, in clock ticks, of each PostgreSQL
// backend connected to a database, by process ID.
type backendTicks map[int]int64

// backendCPU reads the CPU time of the backends connected to pool's
// database (the benchmark's own: each test database has its own), from
// /proc.
func backendCPU(b *testing.B, ctx context.Context, pool *pgxpool.Pool) backendTicks {
	rows, err := pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	require.NoError(b, err)
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	require.NoError(b, err)
	out := backendTicks{}
	for _, pid := range pids {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(st)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		sys, _ := strconv.ParseInt(f[12], 10, 64)
		out[int(pid)] = u + sys
	}
	return out
}

// since is the CPU the backends used after before (a backend new since
// then counts whole).
func (t backendTicks) since(before backendTicks) time.Duration {
	var n int64
	for pid, ticks := range t {
		n += ticks - before[pid]
	}
	return time.Duration(n) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}
