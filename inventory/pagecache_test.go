package inventory_test

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/inventory"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// TestListingCache checks that a rack page is answered from the page cache
// while nothing it shows changed, and rebuilt, showing the change, after
// every kind of change: an inventory write through the API, one written
// straight to the database (as another replica would), a component's leak
// status, and task stats (which live outside the inventory tables). JSON
// calls never use the cache; all answers equal a fresh build.
func TestListingCache(t *testing.T) {
	tb := setup(t)
	var mu sync.Mutex
	stats := map[uuid.UUID]inventory.TaskStats{}
	// The checks run on a pool of their own; builds on the handler's.
	checkPool, err := db.Open(tb.ctx, tb.pool.Config().ConnString(), db.PoolConfig{MaxConns: 2, GenericPlans: true})
	require.NoError(t, err)
	defer checkPool.Close()
	var onCheckPool, onPool int
	tb.svc.SetTaskStats(func(_ context.Context, dbtx db.DBTX, ids []uuid.UUID) (map[uuid.UUID]inventory.TaskStats, error) {
		mu.Lock()
		defer mu.Unlock()
		switch dbtx {
		case checkPool:
			onCheckPool++
		case tb.pool:
			onPool++
		}
		out := map[uuid.UUID]inventory.TaskStats{}
		for _, id := range ids {
			if s, ok := stats[id]; ok {
				out[id] = s
			}
		}
		return out, nil
	})
	tb.h.SetListings(inventory.ListingOptions{Builds: 2, CacheBytes: 64 << 20, CheckPool: checkPool})
	for i := range 3 {
		_, err := tb.client.CreateExpectedRack(tb.ctx, &flowv1.CreateExpectedRackRequest{Rack: rack72(i)})
		require.NoError(t, err)
	}
	req := &flowv1.GetListOfRacksRequest{WithComponents: true, Pagination: &flowv1.Pagination{Limit: 2}}
	jsonClient := flowv1connect.NewFlowClient(http.DefaultClient, tb.url, connect.WithProtoJSON())
	list := func() *flowv1.GetListOfRacksResponse {
		t.Helper()
		res, err := tb.client.GetListOfRacks(tb.ctx, req)
		require.NoError(t, err)
		fresh, err := jsonClient.GetListOfRacks(tb.ctx, req)
		require.NoError(t, err)
		require.True(t, proto.Equal(fresh, res), "cached answer differs from a fresh build")
		return res
	}
	expect := func(hits, misses int64) {
		t.Helper()
		h, m := tb.h.ListingCacheStats()
		require.Equal(t, [2]int64{hits, misses}, [2]int64{h, m}, "hits, misses")
	}

	first := list()
	require.Len(t, first.GetRacks(), 2)
	require.Len(t, first.GetRacks()[0].GetComponents(), 72)
	expect(0, 1)
	list()
	list()
	expect(2, 1)
	genReads, pageChecks := tb.h.ListingCheckStats()
	require.Equal(t, [2]int64{3, 2}, [2]int64{genReads, pageChecks}, "one generation read a call, one check a hit: the calls came one at a time")
	mu.Lock()
	require.Equal(t, 2, onCheckPool, "the checks ran on the check pool")
	require.Positive(t, onPool, "the builds ran on the handler's pool")
	mu.Unlock()

	// A write through the API.
	rack := first.GetRacks()[0]
	_, err = tb.client.PatchRack(tb.ctx, &flowv1.PatchRackRequest{Rack: &flowv1.Rack{
		Info: &flowv1.DeviceInfo{Id: rack.GetInfo().GetId(), Name: "zz-renamed"}}})
	require.NoError(t, err)
	res := list()
	expect(2, 2)
	require.NotEqual(t, rack.GetInfo().GetId().GetId(), res.GetRacks()[0].GetInfo().GetId().GetId(), "renamed zz-, it sorts last")
	list()
	expect(3, 2)

	// Written straight to the database, as by another replica.
	comp := res.GetRacks()[0].GetComponents()[0]
	_, err = tb.pool.Exec(tb.ctx, `UPDATE component SET firmware_version = 'FW 9.9' WHERE id = $1`, comp.GetInfo().GetId().GetId())
	require.NoError(t, err)
	res = list()
	expect(3, 3)
	require.Equal(t, "FW 9.9", res.GetRacks()[0].GetComponents()[0].GetFirmwareVersion())

	// A component's leak status.
	_, err = tb.pool.Exec(tb.ctx, `INSERT INTO component_leak (component_id, status) VALUES ($1, 'detected')`, comp.GetInfo().GetId().GetId())
	require.NoError(t, err)
	list()
	expect(3, 4)

	// Task stats: no inventory write, but the page shows them.
	mu.Lock()
	stats[uuid.MustParse(comp.GetInfo().GetId().GetId())] = inventory.TaskStats{Running: 1}
	mu.Unlock()
	res = list()
	expect(3, 5)
	require.Equal(t, uint32(1), res.GetRacks()[0].GetComponents()[0].GetTaskStats().GetRunningTaskCount())
	list()
	expect(4, 5)

	// A rolled-back write changes nothing.
	tx, err := tb.pool.Begin(tb.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(tb.ctx, `UPDATE rack SET name = 'never' WHERE id = $1`, rack.GetInfo().GetId().GetId())
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(tb.ctx))
	list()
	expect(5, 5)
}
