package notify_test

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/engine"
	"github.com/nicoflow/flow/notify"
)

var (
	benchSubjects = flag.Int("notify.subjects", 0, "BenchmarkDelivery: racks the events are spread over (0: one rack per event)")
	benchWorkers  = flag.Int("notify.workers", 32, "BenchmarkDelivery: the notify queue's workers (FLOW_NOTIFY_WORKERS)")
)

// BenchmarkDelivery measures webhook delivery (docs/bench.md, "Webhook
// delivery"): b.N events, spread over -notify.subjects racks (default: a
// rack each, as when events come a few a second per rack), are emitted
// (8 writers, one transaction each), then the dispatcher wakes their
// lanes and the notify queue's River workers (as the server runs them:
// its fetch cooldown and poll interval, -notify.workers of them) deliver
// them, lane by lane in batches, to a receiver in this process.
// It reports, for each phase, the Go process's CPU (user+system) and the
// CPU of this database's PostgreSQL backends per event, and the delivered
// events a second (wall: load-dependent).
func BenchmarkDelivery(b *testing.B) {
	ctx := context.Background()
	pool := dbtest.NewPool(b)
	var got atomic.Int64
	seen := sync.Map{}
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, dup := seen.LoadOrStore(r.Header.Get("Flow-Event-Id"), true); !dup {
			got.Add(1)
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer rcv.Close()
	worker := &notify.Worker{}
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:  map[string]river.QueueConfig{notify.Queue: {MaxWorkers: *benchWorkers}},
		Workers: workers, Logger: slog.New(slog.DiscardHandler),
		FetchPollInterval: engine.DefaultFetchPollInterval, FetchCooldown: engine.DefaultFetchCooldown,
	})
	if err != nil {
		b.Fatal(err)
	}
	svc := notify.NewService(notify.Config{Pool: pool, Keys: newKeys(b), Enqueue: notify.RiverEnqueuer(client),
		Guard: notify.Guard{DevMode: true}, Site: "bench", Delivery: notify.DeliveryConfig{Workers: *benchWorkers}})
	worker.Service = svc
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := svc.Create(ctx, tx, notify.Input{URL: rcv.URL, EventTypes: []string{notify.AllTypes}, Secret: secret})
		return err
	}); err != nil {
		b.Fatal(err)
	}
	racks := make([]uuid.UUID, cmp.Or(*benchSubjects, b.N))
	for i := range racks {
		racks[i] = uuid.New()
	}
	b.ResetTimer()

	go0, pg0 := processCPU(), backendsCPU(b, pool)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := int(next.Add(1) - 1); k < b.N; k = int(next.Add(1) - 1) {
				ev := rackEvent(racks[k%len(racks)], "event "+strconv.Itoa(k))
				if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return svc.Emit(ctx, tx, ev) }); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	go1, pg1 := processCPU(), backendsCPU(b, pool)

	start := time.Now()
	if err := client.Start(ctx); err != nil {
		b.Fatal(err)
	}
	dctx, stopDispatch := context.WithCancel(ctx)
	dispatched := make(chan struct{})
	go func() { defer close(dispatched); svc.Run(dctx) }()
	for got.Load() < int64(b.N) {
		if time.Since(start) > 10*time.Minute {
			b.Fatalf("delivered %d of %d in 10 minutes", got.Load(), b.N)
		}
		time.Sleep(5 * time.Millisecond)
	}
	wall := time.Since(start)
	go2, pg2 := processCPU(), backendsCPU(b, pool)
	b.StopTimer()
	stopDispatch()
	<-dispatched
	stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = client.Stop(stopCtx)

	n := float64(b.N)
	b.ReportMetric(float64(go1-go0)/n/1e3, "emit-go-µs/event")
	b.ReportMetric(float64(pg1-pg0)/n/1e3, "emit-pg-µs/event")
	b.ReportMetric(float64(go2-go1)/n/1e3, "deliver-go-µs/event")
	b.ReportMetric(float64(pg2-pg1)/n/1e3, "deliver-pg-µs/event")
	b.ReportMetric(n/wall.Seconds(), "delivered/s")
	b.ReportMetric(0, "ns/op")
}

// processCPU is this process's user+system CPU time, in nanoseconds.
func processCPU() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// backendsCPU is the CPU time, in nanoseconds, of the PostgreSQL backends
// connected to pool's database (the test's own: no other process uses it),
// read from /proc (the cluster runs on this machine). A backend that
// ended between two readings drops its time; the benchmark's pool keeps
// its connections.
func backendsCPU(tb testing.TB, pool *pgxpool.Pool) int64 {
	rows, err := pool.Query(context.Background(), "SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
	if err != nil {
		tb.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		tb.Fatal(err)
	}
	var total int64
	for _, pid := range pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(data)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		ut, _ := strconv.ParseInt(f[11], 10, 64) // utime: field 14
		st, _ := strconv.ParseInt(f[12], 10, 64) // stime: field 15
		total += (ut + st) * int64(time.Second/100)
	}
	return total
}
