package operations

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// TestCoalescer: callers that come while a lookup runs are looked up
// together next, each gets its own key's value (or none), and a failing
// lookup is the error of every caller in it.
func TestCoalescer(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var runs [][]int
	c := coalescer[int, string]{run: func(_ context.Context, keys []int) (map[int]string, error) {
		mu.Lock()
		first := len(runs) == 0
		runs = append(runs, keys)
		mu.Unlock()
		if first {
			<-release
		}
		out := map[int]string{}
		for _, k := range keys {
			if k%2 == 0 { // odd keys have no value
				out[k] = "v" + string(rune('0'+k))
			}
		}
		return out, nil
	}}
	ctx := context.Background()
	var wg sync.WaitGroup
	got := make([]string, 6)
	found := make([]bool, 6)
	get := func(k int) {
		defer wg.Done()
		v, ok, err := c.get(ctx, k)
		require.NoError(t, err)
		got[k], found[k] = v, ok
	}
	wg.Add(1)
	go get(0)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(runs) == 1 }, 5*time.Second, time.Millisecond)
	for k := 1; k < 6; k++ {
		wg.Add(1)
		go get(k)
	}
	require.Eventually(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.waiting) == 5 }, 5*time.Second, time.Millisecond)
	close(release)
	wg.Wait()

	require.Len(t, runs, 2, "the five callers that came during the first lookup are looked up together")
	require.ElementsMatch(t, []int{1, 2, 3, 4, 5}, runs[1])
	for k := range 6 {
		require.Equal(t, k%2 == 0, found[k], "key %d", k)
		if found[k] {
			require.Equal(t, "v"+string(rune('0'+k)), got[k])
		}
	}

	boom := errors.New("boom")
	c.run = func(context.Context, []int) (map[int]string, error) { return nil, boom }
	_, _, err := c.get(ctx, 7)
	require.ErrorIs(t, err, boom)
	require.False(t, c.running, "the leader hands over when nothing waits")
}

// TestBlockingKeyIDs: a readiness question's component IDs survive the
// trip through its comparable key.
func TestBlockingKeyIDs(t *testing.T) {
	ids := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
	require.Equal(t, ids, splitIDs(joinIDs(ids)))
	require.Empty(t, splitIDs(joinIDs(nil)))
}
