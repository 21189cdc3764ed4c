package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// The leak response's stages (flow bench --leaks, docs/bench.md "Where a
// leak's response time goes"): each leak's time from the simulator raising
// it to the first power-off reaching the simulator, cut at the points the
// simulator's journal and the database's rows record.
//
//   - detect: raised → the first leak listing of compute trays
//     (FindMachineIds filtered by the leak alert) answered after it: the
//     leak check's cadence;
//   - ingest: → the event row's transaction began (event.created_at): the
//     cycle's leak-status write, its occurrences and the ingests before it;
//   - execution pickup: → the execution's River job fetched (attempted_at):
//     the ingest's commit and the event_rule queue's fetch;
//   - pre-empt + submit: → that job completed (finalized_at, the worker's
//     clock just before its commit): the pre-emption of the rack's work and
//     the response's submit, in one transaction;
//   - engine: → the power-off reached the simulator (journal): that
//     commit, the engine_urgent queue's fetch, the step's claim, its
//     action and the Core call. (Measured apart once, with a column that
//     kept each step's first claim: 40–140 ms and 20–140 ms p50 at load
//     30–50, so no column is kept for it.)
//
// The points are the database's clocks (now(): a transaction's start) and
// the simulator's, on one machine.

// LeakStage is one stage's figures over the leaks that reached it.
type LeakStage struct {
	Name  string  `json:"name"`
	Leaks int     `json:"leaks"`
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}

// leakStageNames are the stages in order.
var leakStageNames = []string{"detect", "ingest", "execution pickup", "pre-empt + submit", "engine"}

// leakPoints are one leak's points: raised, listed, the event, the
// execution job's fetch and completion, the power-off; a zero time is a
// point not reached (or not found).
type leakPoints [6]time.Time

// leakStagesSQL reads, per leaked tray (by its Core ID), the first leak
// event's creation, its submit_task execution's River job fetch and
// completion.
const leakStagesSQL = `
WITH l AS (SELECT unnest($1::text[]) AS core)
SELECT l.core, e.created_at, xj.attempted_at, xj.finalized_at
FROM l
JOIN component c ON c.external_id = l.core
JOIN LATERAL (SELECT e.id, e.created_at FROM event e
    WHERE e.resource_id = c.id AND e.event_type = 'hardware.leak.detected' ORDER BY e.created_at LIMIT 1) e ON true
LEFT JOIN LATERAL (SELECT x.id FROM event_action_execution x
    WHERE x.event_id = e.id AND x.action_type = 'submit_task' ORDER BY x.created_at LIMIT 1) x ON true
LEFT JOIN LATERAL (SELECT j.attempted_at, j.finalized_at FROM river_job j
    WHERE j.kind = 'operations.event_rule_execution' AND j.args->>'execution_id' = x.id::text ORDER BY j.id LIMIT 1) xj ON true`

// leakStages returns the stage figures of leaks, whose listing times
// (the leak check's compute listings) are listings, sorted.
func (b *Bench) leakStages(ctx context.Context, leaks []*benchLeak, listings []time.Time) ([]LeakStage, error) {
	points := make(map[string]*leakPoints, len(leaks))
	cores := make([]string, 0, len(leaks))
	for _, l := range leaks {
		p := &leakPoints{0: l.raisedAt, 5: l.offAt}
		if i, _ := slices.BinarySearchFunc(listings, l.raisedAt, time.Time.Compare); i < len(listings) {
			p[1] = listings[i]
		}
		points[l.coreID] = p
		cores = append(cores, l.coreID)
	}
	conn, err := pgx.Connect(ctx, b.dbURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, leakStagesSQL, cores)
	if err != nil {
		return nil, fmt.Errorf("leak stages: %w", err)
	}
	for rows.Next() {
		var core string
		var ev time.Time
		var xFetch, xDone *time.Time
		if err := rows.Scan(&core, &ev, &xFetch, &xDone); err != nil {
			rows.Close()
			return nil, fmt.Errorf("leak stages: %w", err)
		}
		p := points[core]
		p[2] = ev
		for i, t := range []*time.Time{xFetch, xDone} {
			if t != nil {
				p[3+i] = *t
			}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("leak stages: %w", err)
	}
	return stagesOf(leaks, points), nil
}

// stagesOf computes each stage's figures over the leaks that have both of
// its points.
func stagesOf(leaks []*benchLeak, points map[string]*leakPoints) []LeakStage {
	out := make([]LeakStage, len(leakStageNames))
	for s, name := range leakStageNames {
		var ds []time.Duration
		for _, l := range leaks {
			p := points[l.coreID]
			if p == nil || p[s].IsZero() || p[s+1].IsZero() {
				continue
			}
			ds = append(ds, max(p[s+1].Sub(p[s]), 0))
		}
		out[s] = LeakStage{Name: name, Leaks: len(ds)}
		if len(ds) > 0 {
			slices.Sort(ds)
			out[s].P50Ms, out[s].P99Ms = percentileMs(ds, 50), percentileMs(ds, 99)
			out[s].MaxMs = float64(ds[len(ds)-1]) / float64(time.Millisecond)
		}
	}
	return out
}

// checkIntervals returns the leak check's start-to-start intervals (its
// compute listings' times, sorted) from the first leak's raise on.
func checkIntervals(listings []time.Time, from time.Time) []time.Duration {
	var ds []time.Duration
	for i := 1; i < len(listings); i++ {
		if listings[i-1].Before(from) {
			continue
		}
		ds = append(ds, listings[i].Sub(listings[i-1]))
	}
	return ds
}

// printLeakStages writes the stage table.
func printLeakStages(w io.Writer, r *Result, ms func(float64) string) {
	if len(r.LeakStages) == 0 {
		return
	}
	fmt.Fprintf(w, "  leak check         every %s p50, %s max (start to start, %d cycles from the first leak)\n",
		ms(r.LeakCheckIntervalP50Ms), ms(r.LeakCheckIntervalMaxMs), r.LeakCheckCycles)
	fmt.Fprintf(w, "  leak stages        %-18s %8s %8s %8s %6s\n", "", "p50", "p99", "max", "leaks")
	for _, s := range r.LeakStages {
		fmt.Fprintf(w, "                     %-18s %8s %8s %8s %6d\n", s.Name, ms(s.P50Ms), ms(s.P99Ms), ms(s.MaxMs), s.Leaks)
	}
}
