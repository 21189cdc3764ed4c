package app

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/edge"
	"github.com/nicoflow/flow/inventory"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// badBundle is a whole Flow server (every handler, interceptor and limit,
// on its own PostgreSQL database holding one demo rack) whose River client
// is not started: nothing writes to the database but the requests, so a
// digest of every table tells whether a request changed anything.
type badBundle struct {
	url    string
	pool   *pgxpool.Pool
	logs   *syncBuffer
	rack   inventory.Rack
	digest func(t testing.TB) string
}

func setupBadInput(t testing.TB, env map[string]string) *badBundle {
	t.Helper()
	ctx := context.Background()
	vars := map[string]string{
		"DATABASE_URL": dbtest.NewDB(t), "FLOW_LISTEN_ADDR": "127.0.0.1:0", "ALLOW_INSECURE_GRPC": "true",
		"FLOW_ADMIN_LISTEN": "off", "FLOW_LOG_LEVEL": "info",
	}
	for k, v := range env {
		vars[k] = v
	}
	cfg, err := LoadConfig(func(k string) string { return vars[k] })
	require.NoError(t, err)
	logs := &syncBuffer{}
	srv, err := newServer(ctx, cfg, newLogger(logs, "json", slog.LevelInfo), serveOptions{cleartext: true})
	require.NoError(t, err)
	go srv.http.Serve(srv.ln) //nolint:errcheck // ErrServerClosed at Close
	t.Cleanup(func() { _ = srv.http.Close(); srv.pool.Close() })

	rack := inventory.DemoRack(0)
	require.NoError(t, pgx.BeginFunc(ctx, srv.pool, func(tx pgx.Tx) (err error) {
		rack.ID, err = inventory.NewService().CreateRack(ctx, tx, rack)
		return err
	}))
	var tables []string
	rows, err := srv.pool.Query(ctx, `SELECT quote_ident(table_name) FROM information_schema.tables
		WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY table_name`)
	require.NoError(t, err)
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		tables = append(tables, n)
	}
	require.NoError(t, rows.Err())
	parts := make([]string, len(tables))
	for i, n := range tables {
		parts[i] = fmt.Sprintf(`(SELECT count(*) || ':' || coalesce(md5(string_agg(t::text, '|' ORDER BY t::text)), '') FROM %s t)`, n)
	}
	digestSQL := "SELECT concat_ws(',', " + strings.Join(parts, ", ") + ")"
	return &badBundle{
		url: "http://" + srv.Addr().String(), pool: srv.pool, logs: logs, rack: rack,
		digest: func(t testing.TB) string {
			var d string
			require.NoError(t, srv.pool.QueryRow(ctx, digestSQL).Scan(&d))
			return d
		},
	}
}

// connectAnswer is a Connect unary answer: HTTP status, code ("" for
// success) and error message.
type connectAnswer struct {
	status  int
	code    string
	message string
	size    int
}

// post sends body to method as Connect JSON (or with the given content
// type and encoding) and reads the answer.
func (b *badBundle) post(t testing.TB, method string, body []byte, header http.Header) connectAnswer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.url+"/"+flowv1connect.FlowName+"/"+method, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	require.NoError(t, err)
	a := connectAnswer{status: res.StatusCode, size: len(raw)}
	if res.StatusCode != http.StatusOK {
		var e struct{ Code, Message string }
		require.NoError(t, json.Unmarshal(raw, &e), "%d %s", res.StatusCode, raw)
		a.code, a.message = e.Code, e.Message
	}
	return a
}

func gzipped(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	_, err := w.Write(b)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	return buf.Bytes()
}

// badCase is one bad request: it must answer code with a message naming
// field (and, when set, the limit's setting), change nothing, and echo
// nothing unbounded.
type badCase struct {
	name, method, body string
	raw                []byte // sent instead of body
	header             http.Header
	code               connect.Code
	field, also        string // the message names field, and also when set
}

func longString(n int) string { return strings.Repeat("x", n) }

// badInputCases replays issue 19's measured cases (at sizes the limits
// allow) and the validation rules of docs/limits.md.
func badInputCases(t testing.TB, rack inventory.Rack) []badCase {
	comp := func(extra string) string {
		return `{"component":{"type":"COMPONENT_TYPE_COMPUTE","info":{"manufacturer":"NVIDIA","serial_number":"new-1","name":"c1"},` + extra + `}}`
	}
	rackOf := func(info string) string {
		return `{"rack":{"info":` + info + `}}`
	}
	rule := func(step string) string {
		def, _ := json.Marshal(`{"steps":[` + step + `]}`)
		return `{"name":"r","operation_type":"OPERATION_TYPE_POWER_CONTROL","operation_code":"power_on","rule_definition_json":` + string(def) + `}`
	}
	manyComponents := make([]string, 300)
	for i := range manyComponents {
		manyComponents[i] = fmt.Sprintf(`{"type":"COMPONENT_TYPE_COMPUTE","info":{"manufacturer":"m","serial_number":"s%d"}}`, i)
	}
	patterns := make([]string, 101)
	for i := range patterns {
		patterns[i] = fmt.Sprintf(`"p%d"`, i)
	}
	strict := http.Header{edge.StrictHeader: {"true"}}
	return []badCase{
		// Missing sub-messages (panics before).
		{name: "CreateRackNoInfo", method: "CreateExpectedRack", body: `{"rack":{}}`, code: connect.CodeInvalidArgument, field: "rack.info"},
		{name: "AddComponentNoInfo", method: "AddComponent", body: `{"component":{"type":"COMPONENT_TYPE_COMPUTE"}}`, code: connect.CodeInvalidArgument, field: "component.info"},
		{name: "PatchRackNoInfo", method: "PatchRack", body: `{"rack":{"external_id":"x"}}`, code: connect.CodeInvalidArgument, field: "rack.info", also: "manufacturer and serial_number"},
		// NUL bytes.
		{name: "NULTargetName", method: "PowerOnRack", body: `{"target_spec":{"racks":{"targets":[{"name":"a\u0000b"}]}}}`, code: connect.CodeInvalidArgument, field: "target_spec.racks.targets[0].name", also: "NUL"},
		{name: "NULRackName", method: "CreateExpectedRack", body: rackOf(`{"name":"a\u0000","manufacturer":"m","serial_number":"s"}`), code: connect.CodeInvalidArgument, field: "rack.info.name", also: "NUL"},
		{name: "NULSerial", method: "GetRackInfoBySerial", body: `{"serial_info":{"manufacturer":"m","serial_number":"s\u0000"}}`, code: connect.CodeInvalidArgument, field: "serial_info.serial_number", also: "NUL"},
		{name: "NULRuleName", method: "CreateOperationRule", body: `{"name":"r\u0000","operation_type":"OPERATION_TYPE_POWER_CONTROL","operation_code":"power_on","rule_definition_json":"{\"steps\":[]}"}`, code: connect.CodeInvalidArgument, field: "name", also: "NUL"},
		// Indexed strings of 1 MB.
		{name: "HugeRackName", method: "CreateExpectedRack", body: rackOf(`{"name":"` + longString(1<<20) + `","manufacturer":"m","serial_number":"s"}`), code: connect.CodeInvalidArgument, field: "rack.info.name", also: "FLOW_MAX_NAME_BYTES"},
		{name: "HugeSerial", method: "CreateExpectedRack", body: rackOf(`{"manufacturer":"m","serial_number":"` + longString(1<<20) + `"}`), code: connect.CodeInvalidArgument, field: "rack.info.serial_number", also: "FLOW_MAX_SERIAL_BYTES"},
		{name: "HugeManufacturer", method: "CreateExpectedRack", body: rackOf(`{"manufacturer":"` + longString(1<<20) + `","serial_number":"s"}`), code: connect.CodeInvalidArgument, field: "rack.info.manufacturer", also: "FLOW_MAX_MANUFACTURER_BYTES"},
		{name: "HugeComponentSerial", method: "CreateExpectedRack", body: `{"rack":{"info":{"manufacturer":"m","serial_number":"s"},"components":[{"type":"COMPONENT_TYPE_COMPUTE","info":{"manufacturer":"m","serial_number":"` + longString(1<<20) + `"}}]}}`, code: connect.CodeInvalidArgument, field: "rack.components[0].info.serial_number", also: "FLOW_MAX_SERIAL_BYTES"},
		{name: "HugeNVLDomainName", method: "CreateNVLDomain", body: `{"nvl_domain":{"identifier":{"name":"` + longString(1<<20) + `"}}}`, code: connect.CodeInvalidArgument, field: "nvl_domain.identifier.name", also: "FLOW_MAX_NAME_BYTES"},
		{name: "HugeLookupSerial", method: "GetRackInfoBySerial", body: `{"serial_info":{"manufacturer":"m","serial_number":"` + longString(2<<20) + `"}}`, code: connect.CodeInvalidArgument, field: "serial_info.serial_number", also: "FLOW_MAX_SERIAL_BYTES"},
		{name: "HugeDescription", method: "AddComponent", body: `{"component":{"type":"COMPONENT_TYPE_COMPUTE","info":{"manufacturer":"m","serial_number":"n","description":"{\"note\":\"` + longString(20000) + `\"}"}}}`, code: connect.CodeInvalidArgument, field: "component.info.description", also: "FLOW_MAX_DESCRIPTION_BYTES"},
		// Bodies over FLOW_MAX_REQUEST_BYTES, plain and compressed.
		{name: "BodyOverLimit", method: "GetRackInfoBySerial", body: `{"serial_info":{"serial_number":"` + longString(5<<20) + `"}}`, code: connect.CodeResourceExhausted, field: "", also: "4194304"},
		{name: "GzipBomb", method: "GetRackInfoBySerial", raw: gzipped(t, []byte(`{"serial_info":{"serial_number":"`+longString(16<<20)+`"}}`)), header: http.Header{"Content-Encoding": {"gzip"}}, code: connect.CodeResourceExhausted, also: "4194304"},
		// Rules that could never run. (A 1h step timeout, over the old
		// rescue window, is runnable since process leases: docs/engine.md.)
		{name: "RuleTimeoutOverLimit", method: "CreateOperationRule", body: rule(`{"component_type":"Compute","stage":1,"timeout":"200h","main_operation":{"name":"PowerControl"}}`), code: connect.CodeInvalidArgument, field: "rule_definition_json", also: "timeout"},
		{name: "RuleRetryOverflow", method: "CreateOperationRule", body: rule(`{"component_type":"Compute","stage":1,"retry":{"max_attempts":100000000,"initial_interval":"1s","backoff_coefficient":2},"main_operation":{"name":"PowerControl"}}`), code: connect.CodeInvalidArgument, field: "rule_definition_json", also: "max_attempts"},
		{name: "RuleBudgetOverLimit", method: "CreateOperationRule", body: rule(`{"component_type":"Compute","stage":1,"timeout":"20m","max_parallel":1,"retry":{"max_attempts":1000,"initial_interval":"1s","backoff_coefficient":2,"max_interval":"24h"},"main_operation":{"name":"PowerControl"}}`), code: connect.CodeInvalidArgument, field: "rule_definition_json", also: "step deadline"},
		// Lax validation.
		{name: "NegativeSlot", method: "AddComponent", body: comp(`"position":{"slot_id":-1}`), code: connect.CodeInvalidArgument, field: "component.position.slot_id"},
		{name: "MinTray", method: "AddComponent", body: comp(`"position":{"tray_idx":-2147483648}`), code: connect.CodeInvalidArgument, field: "component.position.tray_idx"},
		{name: "NegativeHost", method: "AddComponent", body: comp(`"position":{"host_id":-5}`), code: connect.CodeInvalidArgument, field: "component.position.host_id"},
		{name: "IPOutOfRange", method: "AddComponent", body: comp(`"bmcs":[{"type":"BMC_TYPE_HOST","mac_address":"02:00:00:00:09:01","ip_address":"999.1.1.1"}]`), code: connect.CodeInvalidArgument, field: "component.bmcs[0].ip_address"},
		{name: "IPNotAnIP", method: "AddComponent", body: comp(`"bmcs":[{"type":"BMC_TYPE_HOST","mac_address":"02:00:00:00:09:01","ip_address":"not-an-ip"}]`), code: connect.CodeInvalidArgument, field: "component.bmcs[0].ip_address"},
		{name: "IPWithPrefix", method: "AddComponent", body: comp(`"bmcs":[{"type":"BMC_TYPE_HOST","mac_address":"02:00:00:00:09:01","ip_address":"10.0.0.1/24"}]`), code: connect.CodeInvalidArgument, field: "component.bmcs[0].ip_address"},
		{name: "BadMAC", method: "AddComponent", body: comp(`"bmcs":[{"type":"BMC_TYPE_HOST","mac_address":"zz:00:00:00:09:01"}]`), code: connect.CodeInvalidArgument, field: "component.bmcs[0].mac_address"},
		{name: "BlankName", method: "CreateExpectedRack", body: rackOf(`{"name":"   ","manufacturer":"m","serial_number":"s"}`), code: connect.CodeInvalidArgument, field: "rack.info.name", also: "blank"},
		{name: "BlankManufacturer", method: "CreateExpectedRack", body: rackOf(`{"manufacturer":" \t ","serial_number":"s"}`), code: connect.CodeInvalidArgument, field: "rack.info.manufacturer", also: "blank"},
		{name: "BlankNVLDomainName", method: "CreateNVLDomain", body: `{"nvl_domain":{"identifier":{"name":"  "}}}`, code: connect.CodeInvalidArgument, field: "nvl_domain.identifier.name", also: "blank"},
		// Repeated fields.
		{name: "TooManyComponents", method: "CreateExpectedRack", body: `{"rack":{"info":{"manufacturer":"m","serial_number":"s"},"components":[` + strings.Join(manyComponents, ",") + `]}}`, code: connect.CodeInvalidArgument, field: "rack.components", also: "FLOW_MAX_COMPONENTS_PER_RACK"},
		{name: "TooManyPatterns", method: "GetListOfRacks", body: `{"filters":[{"rack_field":"RACK_FILTER_FIELD_NAME","query_info":{"patterns":[` + strings.Join(patterns, ",") + `]}}]}`, code: connect.CodeInvalidArgument, field: "filters[0].query_info.patterns", also: "FLOW_MAX_FILTER_PATTERNS"},
		{name: "RackPageWithComponentsTooLarge", method: "GetListOfRacks", body: `{"with_components":true,"pagination":{"limit":101}}`, code: connect.CodeInvalidArgument, field: "pagination.limit", also: "FLOW_MAX_RACK_PAGE_WITH_COMPONENTS"},
		{name: "PageTooLarge", method: "GetListOfRacks", body: `{"pagination":{"limit":5000}}`, code: connect.CodeInvalidArgument, field: "pagination.limit", also: "FLOW_MAX_PAGE_SIZE"},
		// JSON decode errors name the field.
		{name: "WrongType", method: "CreateExpectedRack", body: `{"rack":{"components":[{"position":{"slot_id":"x"}}]}}`, code: connect.CodeInvalidArgument, field: "rack.components[0].position.slot_id"},
		{name: "BadEnum", method: "AddComponent", body: `{"component":{"type":"COMPONENT_TYPE_TOASTER"}}`, code: connect.CodeInvalidArgument, field: "component.type"},
		{name: "BrokenJSON", method: "GetListOfRacks", body: `{"pagination":{"limit":`, code: connect.CodeInvalidArgument, field: "pagination.limit"},
		// Unknown fields: refused on request (and under FLOW_STRICT_JSON).
		{name: "StrictUnknownField", method: "PowerOnRack", body: `{"target_spec":{"racks":{"targets":[{"name":"` + rack.Name + `"}]}},"override_readiness_chek":true}`, header: strict, code: connect.CodeInvalidArgument, field: "override_readiness_chek", also: "unknown field"},
		{name: "StrictUnknownNested", method: "CreateExpectedRack", body: `{"rack":{"info":{"manufacturer":"m","serial_number":"s","nmae":"x"}}}`, header: strict, code: connect.CodeInvalidArgument, field: "rack.info.nmae"},
	}
}

// TestBadInput replays the bad-input table: every case answers its code
// with a message naming the field, within a bounded size, and writes
// nothing.
func TestBadInput(t *testing.T) {
	t.Parallel()
	b := setupBadInput(t, nil)
	before := b.digest(t)
	for _, tt := range badInputCases(t, b.rack) {
		t.Run(tt.name, func(t *testing.T) {
			body := tt.raw
			if body == nil {
				body = []byte(tt.body)
			}
			a := b.post(t, tt.method, body, tt.header)
			require.Equal(t, tt.code.String(), a.code, "%d %s", a.status, a.message)
			require.Contains(t, a.message, tt.field)
			require.Contains(t, a.message, tt.also)
			require.Less(t, a.size, 2*edge.MaxErrorMessage, "the answer echoes the input")
			after := b.digest(t)
			require.Equal(t, before, after, "a refused request changed the database")
		})
	}
	// No log line carries the input either.
	for _, line := range strings.Split(b.logs.String(), "\n") {
		require.Less(t, len(line), 2*edge.MaxLoggedError, "log line of %d bytes: %s", len(line), edge.Truncate(line, 600))
	}
}

// TestUnknownFieldsAcceptedByDefault: without the header a newer client's
// extra field is ignored, as protojson compatibility wants; with
// FLOW_STRICT_JSON it is refused for every client.
func TestUnknownFieldsAcceptedByDefault(t *testing.T) {
	t.Parallel()
	b := setupBadInput(t, nil)
	a := b.post(t, "GetListOfRacks", []byte(`{"with_componentz":true}`), nil)
	require.Equal(t, http.StatusOK, a.status, a.message)
	a = b.post(t, "GetListOfRacks", []byte(`{"with_componentz":true}`), http.Header{edge.StrictHeader: {"false"}})
	require.Equal(t, http.StatusOK, a.status, a.message)

	strict := setupBadInput(t, map[string]string{"FLOW_STRICT_JSON": "true"})
	a = strict.post(t, "GetListOfRacks", []byte(`{"with_componentz":true}`), nil)
	require.Equal(t, connect.CodeInvalidArgument.String(), a.code)
	require.Contains(t, a.message, "with_componentz")
	require.Contains(t, a.message, "FLOW_STRICT_JSON")
}

// TestBadInputOverGRPC: the limits hold for binary proto over gRPC too,
// including invalid UTF-8, which protojson cannot carry.
func TestBadInputOverGRPC(t *testing.T) {
	t.Parallel()
	b := setupBadInput(t, nil)
	before := b.digest(t)
	client := flowv1connect.NewFlowClient(h2cClient(), b.url, connect.WithGRPC(), connect.WithSendMaxBytes(64<<20))
	ctx := context.Background()
	_, err := client.CreateExpectedRack(ctx, &flowv1.CreateExpectedRackRequest{Rack: &flowv1.Rack{Info: &flowv1.DeviceInfo{Name: "a\x00b", Manufacturer: "m", SerialNumber: "s"}}})
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), err)
	require.ErrorContains(t, err, "rack.info.name")
	_, err = client.GetRackInfoBySerial(ctx, &flowv1.GetRackInfoBySerialRequest{SerialInfo: &flowv1.DeviceSerialInfo{SerialNumber: longString(8 << 20)}})
	require.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), err)
	_, err = client.AddComponent(ctx, &flowv1.AddComponentRequest{Component: &flowv1.Component{Type: flowv1.ComponentType_COMPONENT_TYPE_COMPUTE}})
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), err)
	require.ErrorContains(t, err, "component.info")

	// Invalid UTF-8 in a string field, hand-encoded (the Go encoder refuses
	// to write it): GetRackInfoBySerialRequest{serial_info{serial_number}}.
	inner := append([]byte{0x12, 3}, 'a', 0xff, 'b')
	msg := append([]byte{0x0a, byte(len(inner))}, inner...)
	frame := append([]byte{0, 0, 0, 0, byte(len(msg))}, msg...)
	req, err := http.NewRequest(http.MethodPost, b.url+flowv1connect.FlowGetRackInfoBySerialProcedure, bytes.NewReader(frame))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	res, err := h2cClient().Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	require.Equal(t, "3", res.Trailer.Get("Grpc-Status"), "invalid_argument: %s", res.Trailer.Get("Grpc-Message"))
	require.Contains(t, res.Trailer.Get("Grpc-Message"), "UTF-8")
	require.Equal(t, before, b.digest(t))
}
