package inventory_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/edge"
	"github.com/nicoflow/flow/inventory"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// TestListingCache checks that a rack page is answered from the page cache
// while nothing it shows changed, and rebuilt, showing the change, after
// every kind of change: an inventory write through the API, one written
// straight to the database (as another replica would), a component's leak
// status, and task stats (which live outside the inventory tables). Each
// read is a binary call and a Connect JSON call (through the server's JSON
// codec): both are answered from the cache, the JSON encoded once per page
// version, and a change is visible to both on the next read; every answer
// equals a fresh build by a handler without the cache.
func TestListingCache(t *testing.T) {
	tb := setup(t)
	// The JSON calls go to a server with edge's JSON codec, as flow
	// serve's; the fresh builds to a handler without a cache.
	jsonMux := http.NewServeMux()
	jsonMux.Handle(flowv1connect.NewFlowHandler(flowServer{Handler: tb.h}, edge.JSONCodecs()...))
	jsonSrv := httptest.NewServer(jsonMux)
	t.Cleanup(jsonSrv.Close)
	freshMux := http.NewServeMux()
	freshMux.Handle(flowv1connect.NewFlowHandler(flowServer{Handler: inventory.NewHandler(tb.svc, tb.pool)}))
	freshSrv := httptest.NewServer(freshMux)
	t.Cleanup(freshSrv.Close)
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
	jsonClient := flowv1connect.NewFlowClient(http.DefaultClient, jsonSrv.URL, connect.WithProtoJSON())
	freshClient := flowv1connect.NewFlowClient(http.DefaultClient, freshSrv.URL)
	// list reads the page in binary, then in JSON, and compares both with
	// a fresh build; the JSON's raw bytes must be what protojson reads.
	list := func() *flowv1.GetListOfRacksResponse {
		t.Helper()
		res, err := tb.client.GetListOfRacks(tb.ctx, req)
		require.NoError(t, err)
		asJSON, err := jsonClient.GetListOfRacks(tb.ctx, req)
		require.NoError(t, err)
		fresh, err := freshClient.GetListOfRacks(tb.ctx, req)
		require.NoError(t, err)
		require.True(t, proto.Equal(fresh, res), "cached binary answer differs from a fresh build")
		require.True(t, proto.Equal(fresh, asJSON), "cached JSON answer differs from a fresh build")
		return asJSON
	}
	// Each list is two calls: a changed page is built by the first (a
	// miss) and answered to the second (a hit); an unchanged one is two
	// hits. encodes counts the pages encoded as JSON.
	expect := func(hits, misses, encodes int64) {
		t.Helper()
		h, m := tb.h.ListingCacheStats()
		require.Equal(t, [3]int64{hits, misses, encodes}, [3]int64{h, m, tb.h.ListingJSONEncodes()}, "hits, misses, JSON encodes")
	}

	first := list()
	require.Len(t, first.GetRacks(), 2)
	require.Len(t, first.GetRacks()[0].GetComponents(), 72)
	expect(1, 1, 1)
	list()
	list()
	expect(5, 1, 1)
	genReads, pageChecks := tb.h.ListingCheckStats()
	require.Equal(t, [2]int64{6, 5}, [2]int64{genReads, pageChecks}, "one generation read a call, one check a hit: the calls came one at a time")
	mu.Lock()
	require.Equal(t, 5, onCheckPool, "the checks ran on the check pool")
	require.Positive(t, onPool, "the builds ran on the handler's pool")
	mu.Unlock()

	// A write through the API.
	rack := first.GetRacks()[0]
	_, err = tb.client.PatchRack(tb.ctx, &flowv1.PatchRackRequest{Rack: &flowv1.Rack{
		Info: &flowv1.DeviceInfo{Id: rack.GetInfo().GetId(), Name: "zz-renamed"}}})
	require.NoError(t, err)
	res := list()
	expect(6, 2, 2)
	require.NotEqual(t, rack.GetInfo().GetId().GetId(), res.GetRacks()[0].GetInfo().GetId().GetId(), "renamed zz-, it sorts last")
	list()
	expect(8, 2, 2)

	// Written straight to the database, as by another replica.
	comp := res.GetRacks()[0].GetComponents()[0]
	_, err = tb.pool.Exec(tb.ctx, `UPDATE component SET firmware_version = 'FW 9.9' WHERE id = $1`, comp.GetInfo().GetId().GetId())
	require.NoError(t, err)
	res = list()
	expect(9, 3, 3)
	require.Equal(t, "FW 9.9", res.GetRacks()[0].GetComponents()[0].GetFirmwareVersion(), "the JSON shows the change")

	// A component's leak status.
	_, err = tb.pool.Exec(tb.ctx, `INSERT INTO component_leak (component_id, status) VALUES ($1, 'detected')`, comp.GetInfo().GetId().GetId())
	require.NoError(t, err)
	list()
	expect(10, 4, 4)

	// Task stats: no inventory write, but the page shows them.
	mu.Lock()
	stats[uuid.MustParse(comp.GetInfo().GetId().GetId())] = inventory.TaskStats{Running: 1}
	mu.Unlock()
	res = list()
	expect(11, 5, 5)
	require.Equal(t, uint32(1), res.GetRacks()[0].GetComponents()[0].GetTaskStats().GetRunningTaskCount())
	list()
	expect(13, 5, 5)

	// A rolled-back write changes nothing.
	tx, err := tb.pool.Begin(tb.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(tb.ctx, `UPDATE rack SET name = 'never' WHERE id = $1`, rack.GetInfo().GetId().GetId())
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(tb.ctx))
	list()
	expect(15, 5, 5)
}

// TestListingPageBuiltOnceForConcurrentMisses: calls that find their page
// missing while another call builds it wait for that build and are
// answered from it (one build, the same page for all) instead of each
// building the page again.
func TestListingPageBuiltOnceForConcurrentMisses(t *testing.T) {
	tb := setup(t)
	checkPool, err := db.Open(tb.ctx, tb.pool.Config().ConnString(), db.PoolConfig{MaxConns: 2, GenericPlans: true})
	require.NoError(t, err)
	defer checkPool.Close()
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	tb.svc.SetTaskStats(func(_ context.Context, dbtx db.DBTX, _ []uuid.UUID) (map[uuid.UUID]inventory.TaskStats, error) {
		if dbtx == tb.pool { // a build's, not a check's: hold the first
			once.Do(func() {
				close(entered)
				<-release
			})
		}
		return map[uuid.UUID]inventory.TaskStats{}, nil
	})
	tb.h.SetListings(inventory.ListingOptions{Builds: 8, CacheBytes: 64 << 20, CheckPool: checkPool})
	for i := range 2 {
		_, err := tb.client.CreateExpectedRack(tb.ctx, &flowv1.CreateExpectedRackRequest{Rack: rack72(i)})
		require.NoError(t, err)
	}
	req := &flowv1.GetListOfRacksRequest{WithComponents: true, Pagination: &flowv1.Pagination{Limit: 10}}
	_, misses0 := tb.h.ListingCacheStats()
	const waiters = 5
	answers := make([]*flowv1.GetListOfRacksResponse, waiters+1)
	errs := make([]error, waiters+1)
	var wg sync.WaitGroup
	call := func(i int) {
		wg.Go(func() {
			res, err := tb.client.GetListOfRacks(tb.ctx, req)
			answers[i], errs[i] = res, err
		})
	}
	call(0)
	<-entered
	for i := 1; i <= waiters; i++ {
		call(i)
	}
	require.Eventually(t, func() bool { return tb.h.ListingBuildWaits() == waiters }, 10*time.Second, 5*time.Millisecond)
	close(release)
	wg.Wait()
	for i := range answers {
		require.NoError(t, errs[i])
		require.Len(t, answers[i].GetRacks(), 2)
		require.True(t, proto.Equal(answers[0], answers[i]), "answer %d", i)
	}
	_, misses := tb.h.ListingCacheStats()
	require.Equal(t, int64(1), misses-misses0, "one build for the first call and its %d waiters", waiters)
}
