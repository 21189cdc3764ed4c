package inventory_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/inventory"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// rack72 is a rack of 72 components (compute trays with a host and two DPU
// BMCs, switch trays and power shelves with one), unique per n.
func rack72(n int) *flowv1.Rack {
	r := &flowv1.Rack{
		Info:     &flowv1.DeviceInfo{Name: fmt.Sprintf("bench-%06d", n), Manufacturer: "Bench", SerialNumber: fmt.Sprintf("BR-%06d", n)},
		Location: &flowv1.Location{Region: "b", Datacenter: "dc", Room: "r", Position: "p"},
	}
	mac := func(c, k int) string {
		return fmt.Sprintf("0a:%02x:%02x:%02x:%02x:%02x", byte(n>>16), byte(n>>8), byte(n), c, k)
	}
	for c := 0; c < 72; c++ {
		comp := &flowv1.Component{
			Type:            flowv1.ComponentType_COMPONENT_TYPE_COMPUTE,
			Info:            &flowv1.DeviceInfo{Name: fmt.Sprintf("c%02d", c), Manufacturer: "Bench", SerialNumber: fmt.Sprintf("BC-%06d-%02d", n, c)},
			FirmwareVersion: "1.0",
			Position:        &flowv1.RackPosition{SlotId: int32(c), TrayIdx: int32(c)},
			Bmcs:            []*flowv1.BMCInfo{{Type: flowv1.BMCType_BMC_TYPE_HOST, MacAddress: mac(c, 0)}},
		}
		switch {
		case c < 36:
			comp.Bmcs = append(comp.Bmcs,
				&flowv1.BMCInfo{Type: flowv1.BMCType_BMC_TYPE_DPU, MacAddress: mac(c, 1)},
				&flowv1.BMCInfo{Type: flowv1.BMCType_BMC_TYPE_DPU, MacAddress: mac(c, 2)})
		case c < 54:
			comp.Type = flowv1.ComponentType_COMPONENT_TYPE_NVSWITCH
		default:
			comp.Type = flowv1.ComponentType_COMPONENT_TYPE_POWERSHELF
		}
		r.Components = append(r.Components, comp)
	}
	return r
}

// BenchmarkCreateExpectedRack creates 72-component racks in an inventory
// of 1,000 racks × 36 components.
func BenchmarkCreateExpectedRack(b *testing.B) {
	tb := setup(b)
	seedBulk(b, tb, 1000, 36)
	n := 0
	for b.Loop() {
		_, err := tb.client.CreateExpectedRack(tb.ctx, &flowv1.CreateExpectedRackRequest{Rack: rack72(n)})
		require.NoError(b, err)
		n++
	}
}

// BenchmarkGetComponentInfoBySerial looks a component (and its rack) up by
// serial in an inventory of 1,000 racks × 36 components plus 20 racks of 72.
func BenchmarkGetComponentInfoBySerial(b *testing.B) {
	tb := setup(b)
	seedBulk(b, tb, 1000, 36)
	for i := 0; i < 20; i++ {
		tb.create(b, rack72(i))
	}
	_, err := tb.pool.Exec(tb.ctx, "ANALYZE")
	require.NoError(b, err)
	req := &flowv1.GetComponentInfoBySerialRequest{
		SerialInfo: &flowv1.DeviceSerialInfo{Manufacturer: "bench", SerialNumber: "BC-000011-07"},
		WithRack:   true,
	}
	for b.Loop() {
		res, err := tb.client.GetComponentInfoBySerial(tb.ctx, req)
		require.NoError(b, err)
		require.Len(b, res.GetComponent().GetBmcs(), 3)
	}
}

// seedBulk loads racks × perRack components (each with one host BMC) with
// COPY and analyzes the tables, so benchmarks run on a populated, planned
// inventory rather than on empty tables.
func seedBulk(b *testing.B, tb *testBundle, racks, perRack int) {
	b.Helper()
	var rackRows, compRows, bmcRows [][]any
	for r := 0; r < racks; r++ {
		rid := uuid.New()
		rackRows = append(rackRows, []any{rid, fmt.Sprintf("rack-%04d", r), "Bulk", fmt.Sprintf("LR-%04d", r)})
		for c := 0; c < perRack; c++ {
			cid := uuid.New()
			typ := []string{"Compute", "NVSwitch", "PowerShelf"}[c%3]
			compRows = append(compRows, []any{cid, rid, typ, fmt.Sprintf("rack-%04d-c%02d", r, c), "Bulk", fmt.Sprintf("LC-%04d-%02d", r, c), "1.0", int32(c)})
			bmcRows = append(bmcRows, []any{fmt.Sprintf("0b:00:%02x:%02x:%02x:00", byte(r>>8), byte(r), c), cid, "Host"})
		}
	}
	_, err := tb.pool.CopyFrom(tb.ctx, pgx.Identifier{"rack"}, []string{"id", "name", "manufacturer", "serial_number"}, pgx.CopyFromRows(rackRows))
	require.NoError(b, err)
	_, err = tb.pool.CopyFrom(tb.ctx, pgx.Identifier{"component"}, []string{"id", "rack_id", "type", "name", "manufacturer", "serial_number", "firmware_version", "slot_id"}, pgx.CopyFromRows(compRows))
	require.NoError(b, err)
	_, err = tb.pool.CopyFrom(tb.ctx, pgx.Identifier{"bmc"}, []string{"mac_address", "component_id", "type"}, pgx.CopyFromRows(bmcRows))
	require.NoError(b, err)
	_, err = tb.pool.Exec(tb.ctx, "ANALYZE")
	require.NoError(b, err)
}

// BenchmarkGetListOfRacks lists pages of 100 racks with their components
// over 1,000 racks × 36 components.
func BenchmarkGetListOfRacks(b *testing.B) {
	tb := setup(b)
	const racks, perRack = 1000, 36
	seedBulk(b, tb, racks, perRack)
	// server: the handler plus binary marshalling, what the server spends
	// per page without HTTP and without the client's decoding.
	b.Run("server", func(b *testing.B) {
		page := 0
		for b.Loop() {
			res, err := tb.h.GetListOfRacks(tb.ctx, &flowv1.GetListOfRacksRequest{
				WithComponents: true,
				Pagination:     &flowv1.Pagination{Offset: int32(page%10) * 100, Limit: 100},
			})
			require.NoError(b, err)
			_, err = proto.Marshal(res)
			require.NoError(b, err)
			page++
		}
	})
	// cached: pages answered from the listing cache (pagecache.go), over
	// HTTP without compression: what a page costs once built.
	b.Run("cached", func(b *testing.B) {
		tb.h.SetListings(inventory.ListingOptions{Builds: 4, CacheBytes: 64 << 20})
		defer tb.h.SetListings(inventory.ListingOptions{})
		client := flowv1connect.NewFlowClient(http.DefaultClient, tb.url, connect.WithAcceptCompression("gzip", nil, nil))
		page := 0
		for b.Loop() {
			res, err := client.GetListOfRacks(tb.ctx, &flowv1.GetListOfRacksRequest{
				WithComponents: true,
				Pagination:     &flowv1.Pagination{Offset: int32(page%10) * 100, Limit: 100},
			})
			require.NoError(b, err)
			require.Len(b, res.GetRacks(), 100)
			page++
		}
	})
	// hit: pages answered from the listing cache as BenchmarkSiteListings
	// asks them (binary Connect, no compression, the answer read but not
	// decoded), with a task-stats source that sends the page's IDs to the
	// database as operations' does: the server's work and allocations per
	// cache hit.
	b.Run("hit", func(b *testing.B) {
		tb.h.SetListings(inventory.ListingOptions{Builds: 4, CacheBytes: 64 << 20})
		defer tb.h.SetListings(inventory.ListingOptions{})
		tb.svc.SetTaskStats(func(ctx context.Context, dbtx db.DBTX, ids []uuid.UUID) (map[uuid.UUID]inventory.TaskStats, error) {
			rows, err := dbtx.Query(ctx, "SELECT id FROM rack WHERE id = ANY($1::uuid[]) AND false", ids)
			if err != nil {
				return nil, err
			}
			rows.Close()
			return map[uuid.UUID]inventory.TaskStats{}, rows.Err()
		})
		defer tb.svc.SetTaskStats(nil)
		bodies := make([][]byte, 10)
		for i := range bodies {
			var err error
			bodies[i], err = proto.Marshal(&flowv1.GetListOfRacksRequest{WithComponents: true, Pagination: &flowv1.Pagination{Offset: int32(i) * 100, Limit: 100}})
			require.NoError(b, err)
		}
		url := tb.url + flowv1connect.FlowGetListOfRacksProcedure
		call := func(page int) {
			res, err := http.Post(url, "application/proto", bytes.NewReader(bodies[page%10]))
			require.NoError(b, err)
			_, err = io.Copy(io.Discard, res.Body)
			require.NoError(b, err)
			require.NoError(b, res.Body.Close())
			require.Equal(b, http.StatusOK, res.StatusCode)
		}
		for i := range 10 {
			call(i)
		}
		page := 0
		b.ReportAllocs()
		for b.Loop() {
			call(page)
			page++
		}
	})
	// Connect clients ask for gzip by default; gRPC clients, grpcurl and
	// curl do not. Measure both: on a LAN, compressing ~1 MB costs more
	// than it saves.
	for _, mode := range []struct {
		name   string
		client flowv1connect.FlowClient
	}{
		{"identity", flowv1connect.NewFlowClient(http.DefaultClient, tb.url, connect.WithAcceptCompression("gzip", nil, nil))},
		{"gzip", tb.client},
	} {
		b.Run(mode.name, func(b *testing.B) {
			page := 0
			for b.Loop() {
				res, err := mode.client.GetListOfRacks(tb.ctx, &flowv1.GetListOfRacksRequest{
					WithComponents: true,
					Pagination:     &flowv1.Pagination{Offset: int32(page%10) * 100, Limit: 100},
				})
				require.NoError(b, err)
				require.Len(b, res.GetRacks(), 100)
				require.Len(b, res.GetRacks()[99].GetComponents(), perRack)
				require.Equal(b, int32(racks), res.GetTotal())
				page++
			}
		})
	}
}
