package notify

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/notify/internal/dbsqlc"
)

// The dispatcher's pace: it queues jobs for woken or due lanes every
// dispatchTick (at most every dispatchMin when emits wake it), and sweeps
// for lanes no sender was woken for every sweepEvery. A queued job not
// started after queuedStale is taken for lost and queued again.
const (
	dispatchTick = 250 * time.Millisecond
	dispatchMin  = 20 * time.Millisecond
	sweepEvery   = 2 * time.Second
	queuedStale  = time.Minute
)

// wake marks lanes (LaneArgs.key) as having new deliveries, for Run.
func (s *Service) wake(lanes []string) {
	s.wakeMu.Lock()
	for _, l := range lanes {
		s.woken[l] = struct{}{}
	}
	s.wakeMu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Run gives lanes their jobs until ctx ends: lanes woken by this process's
// committed emits and redrives (at once), lanes due (a failed attempt's
// backoff over, a sender's drain budget spent) and, every sweepEvery, lanes
// with deliveries that nobody works (emitted by a process that runs no
// dispatcher, or whose sender was killed: its lease lapses). A lane gets a
// job only when nobody works it and none is queued, so a busy lane's
// sender simply goes on. Every process that delivers runs it (app's
// serve); errors are logged and retried at the next tick.
func (s *Service) Run(ctx context.Context) {
	tick := time.NewTicker(dispatchTick)
	defer tick.Stop()
	var lastSweep time.Time
	for {
		if time.Since(lastSweep) >= sweepEvery {
			if _, err := s.q.LaneSweep(ctx, s.pool); err != nil && ctx.Err() == nil {
				s.logger.WarnContext(ctx, "webhook lanes: sweep failed", "error", err)
			}
			lastSweep = time.Now()
		}
		if err := s.dispatch(ctx); err != nil && ctx.Err() == nil {
			s.logger.WarnContext(ctx, "webhook lanes: dispatch failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-s.kick:
			select {
			case <-ctx.Done():
				return
			case <-time.After(dispatchMin):
			}
		}
	}
}

// dispatch queues a job for each lane woken or due that nobody works and
// that has none queued, in one transaction with the lanes' marks.
func (s *Service) dispatch(ctx context.Context) error {
	if s.enq == nil {
		return nil
	}
	s.wakeMu.Lock()
	woken := make([]string, 0, len(s.woken))
	for l := range s.woken {
		woken = append(woken, l)
	}
	clear(s.woken)
	s.wakeMu.Unlock()
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		stale := time.Now().Add(-queuedStale)
		rows, err := s.q.LaneQueue(ctx, tx, dbsqlc.LaneQueueParams{Woken: woken, StaleBefore: &stale})
		if err != nil || len(rows) == 0 {
			return err
		}
		lanes := make([]LaneArgs, len(rows))
		for i, r := range rows {
			lanes[i] = LaneArgs{SubscriptionID: r.SubscriptionID, Lane: r.Lane}
		}
		return s.enq(ctx, tx, lanes)
	})
	if err != nil {
		s.wakeMu.Lock() // tried again at the next tick
		for _, l := range woken {
			s.woken[l] = struct{}{}
		}
		s.wakeMu.Unlock()
		return fmt.Errorf("queue lane jobs: %w", err)
	}
	return nil
}
