package inventory

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gatedReads is a read for freshRead whose n-th run (from 1) returns n,
// once the test lets it finish.
type gatedReads struct {
	n    atomic.Int64
	gate chan struct{}
}

func (g *gatedReads) read(ctx context.Context) (int64, error) {
	n := g.n.Add(1)
	select {
	case <-g.gate:
		return n, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// TestFreshReadShares checks that callers arriving while a read runs share
// the one next read, and never get the running read's answer, which
// started before them.
func TestFreshReadShares(t *testing.T) {
	t.Parallel()
	var f freshRead[int64]
	g := &gatedReads{gate: make(chan struct{})}
	ctx := context.Background()

	first := make(chan int64, 1)
	go func() {
		v, err := f.do(ctx, g.read)
		assert.NoError(t, err) // not require: this is not the test's goroutine
		first <- v
	}()
	require.Eventually(t, func() bool { return g.n.Load() == 1 }, 10*time.Second, time.Millisecond)

	const late = 10
	got := make([]int64, late)
	var wg sync.WaitGroup
	for i := range late {
		wg.Go(func() {
			v, err := f.do(ctx, g.read)
			assert.NoError(t, err)
			got[i] = v
		})
	}
	require.Eventually(t, func() bool { calls, _ := f.counts(); return calls == 1+late }, 10*time.Second, time.Millisecond)
	close(g.gate) // every read from now on finishes at once
	wg.Wait()
	require.Equal(t, int64(1), <-first)
	for i, v := range got {
		require.Equal(t, int64(2), v, "late caller %d", i)
	}
	calls, reads := f.counts()
	require.Equal(t, [2]int64{1 + late, 2}, [2]int64{calls, reads}, "calls, reads")

	// Idle again: the next caller starts a read of its own.
	v, err := f.do(ctx, g.read)
	require.NoError(t, err)
	require.Equal(t, int64(3), v)
}

// TestFreshReadCallerLeaves checks that a caller whose context ends stops
// waiting, with a Connect error of the context's kind, while the read it
// started goes on for a caller that joined it.
func TestFreshReadCallerLeaves(t *testing.T) {
	t.Parallel()
	var f freshRead[int64]
	g := &gatedReads{gate: make(chan struct{})}

	ctx, cancel := context.WithCancel(context.Background())
	left := make(chan error, 1)
	go func() {
		_, err := f.do(ctx, g.read)
		left <- err
	}()
	require.Eventually(t, func() bool { return g.n.Load() == 1 }, 10*time.Second, time.Millisecond)
	cancel()
	err := <-left
	var ce *connect.Error
	require.True(t, errors.As(err, &ce), "error %v", err)
	require.Equal(t, connect.CodeCanceled, ce.Code())

	short, cancelShort := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancelShort()
	_, err = f.do(short, g.read) // queued behind the running read, which outlives it
	require.True(t, errors.As(err, &ce), "error %v", err)
	require.Equal(t, connect.CodeDeadlineExceeded, ce.Code())

	stays := make(chan int64, 1)
	go func() {
		v, err := f.do(context.Background(), g.read)
		assert.NoError(t, err)
		stays <- v
	}()
	require.Eventually(t, func() bool { calls, _ := f.counts(); return calls == 3 }, 10*time.Second, time.Millisecond)
	close(g.gate)
	require.Equal(t, int64(2), <-stays, "the read queued after the first, shared with the caller that timed out")
	_, reads := f.counts()
	require.Equal(t, int64(2), reads)
}

// TestFreshReadPanic checks that a read that panics answers its callers
// with an error, and that the next caller gets a read of its own.
func TestFreshReadPanic(t *testing.T) {
	t.Parallel()
	var f freshRead[int64]
	_, err := f.do(context.Background(), func(context.Context) (int64, error) { panic("boom") })
	require.ErrorContains(t, err, "boom")
	v, err := f.do(context.Background(), func(context.Context) (int64, error) { return 7, nil })
	require.NoError(t, err)
	require.Equal(t, int64(7), v)
}
