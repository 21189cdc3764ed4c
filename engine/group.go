package engine

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/engine/internal/dbsqlc"
)

// grouper hands queued items to a function in groups, so that many steps
// share one database round trip or one transaction. Items are queued on
// shards; each shard is drained by at most one goroutine at a time, which
// takes everything queued meanwhile (up to max) as the next group and exits
// when the queue is empty. Nothing waits for a group to fill: an idle engine
// handles each item at once, a busy one handles what queued while the
// previous group ran.
type grouper[T any] struct {
	max    int
	run    func([]T)
	shards []groupShard[T]
}

type groupShard[T any] struct {
	mu       sync.Mutex
	queue    []T
	draining bool
}

func newGrouper[T any](shards, max int, run func([]T)) *grouper[T] {
	return &grouper[T]{max: max, run: run, shards: make([]groupShard[T], shards)}
}

// add queues item on the shard key selects. The caller waits for its answer
// through the item itself.
func (g *grouper[T]) add(key int64, item T) {
	sh := &g.shards[uint64(key)%uint64(len(g.shards))]
	sh.mu.Lock()
	sh.queue = append(sh.queue, item)
	if !sh.draining {
		sh.draining = true
		go g.drain(sh)
	}
	sh.mu.Unlock()
}

func (g *grouper[T]) drain(sh *groupShard[T]) {
	for {
		sh.mu.Lock()
		n := min(len(sh.queue), g.max)
		if n == 0 {
			sh.draining = false
			sh.queue = nil // let the backing array go
			sh.mu.Unlock()
			return
		}
		group := slices.Clone(sh.queue[:n])
		sh.queue = sh.queue[n:]
		sh.mu.Unlock()
		g.run(group)
	}
}

// groupTimeout bounds the database work of one group.
const groupTimeout = time.Minute

// groupContext is the context of a group's database work: its first
// member's values, detached from the members' jobs (a stopping process still
// records what they finished) and bounded by groupTimeout.
func groupContext(first context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(first), groupTimeout)
}

// Grouping of step loads: every job starts by claiming its step (process,
// execution token) and reading it with its run's state; jobs fetched
// together claim their steps in one statement.
const (
	loaderShards = 2
	maxLoadBatch = 200
)

// stepRow is a step as a worker reads it, with its run's state.
type stepRow = dbsqlc.StepClaimManyRow

type loadReq struct {
	ctx   context.Context
	id    int64
	job   int64
	token int64 // 0: a new execution
	row   stepRow
	err   error
	done  chan struct{}
}

// loadStep claims step id for job and reads it: a new execution when token
// is 0, else the execution of token, if no one superseded it. It returns
// pgx.ErrNoRows if the step does not exist, is not running, belongs to
// another job, or its token moved on.
func (e *Engine) loadStep(ctx context.Context, id StepID, job, token int64) (stepRow, error) {
	req := &loadReq{ctx: ctx, id: int64(id), job: job, token: token, done: make(chan struct{})}
	e.loads.add(req.id, req)
	select {
	case <-req.done:
		return req.row, req.err
	case <-ctx.Done():
		return stepRow{}, ctx.Err()
	}
}

func (e *Engine) loadSteps(reqs []*loadReq) {
	ctx, cancel := groupContext(reqs[0].ctx)
	defer cancel()
	p := dbsqlc.StepClaimManyParams{IDs: make([]int64, len(reqs)), JobIDs: make([]int64, len(reqs)), Tokens: make([]int64, len(reqs)), ProcessID: e.lease.id.Load()}
	for i, r := range reqs {
		p.IDs[i], p.JobIDs[i], p.Tokens[i] = r.id, r.job, r.token
	}
	rows, err := e.q.StepClaimMany(ctx, db.GenericPlans{Pool: e.pool}, p)
	type key struct{ step, job int64 }
	byID := make(map[key]stepRow, len(rows))
	for _, row := range rows {
		if row.JobID != nil {
			byID[key{row.ID, *row.JobID}] = row
		}
	}
	for _, r := range reqs {
		switch row, ok := byID[key{r.id, r.job}]; {
		case err != nil:
			r.err = err
		case ok:
			r.row = row
		default:
			r.err = pgx.ErrNoRows
		}
		close(r.done)
	}
}

// stmtTimeout bounds each database statement (or short transaction) of a
// step job's execution outside the grouped ones (groupTimeout): a primary
// that froze (SIGSTOP, a hung host) keeps its connections open and answers
// nothing, and pgx waits for as long as the context lets it (issue 46).
// The database's own TCP keepalives cannot tell a frozen server from an
// idle one (its kernel answers them).
const stmtTimeout = 30 * time.Second

// bounded is ctx bounded by stmtTimeout.
func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, stmtTimeout)
}
