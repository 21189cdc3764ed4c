package edge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/nicoflow/flow/proto/gen/flow/admin/v1/adminv1connect"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// TestJSONCodecNamesEveryUnknownField: the codec records the path of every
// unknown field, nested ones included, and decodes the rest exactly as
// protojson with DiscardUnknown does.
func TestJSONCodecNamesEveryUnknownField(t *testing.T) {
	t.Parallel()
	many := make([]string, MaxIgnoredFields+2)
	want := make([]string, 0, MaxIgnoredFields+1)
	for i := range many {
		many[i] = fmt.Sprintf(`"x%d":{"v":"}\"{"}`, i)
		if i < MaxIgnoredFields {
			want = append(want, fmt.Sprintf("x%d", i))
		}
	}
	want = append(want, "...")
	big := `"description":"` + strings.Repeat("d", maxIgnoredFieldsScan) + `"`
	for _, tt := range []struct {
		name, doc string
		want      []string
	}{
		{name: "None", doc: `{"forced":true}`},
		{name: "TopLevel", doc: `{"forcedd":true,"target_spec":{"racks":{"targets":[{"name":"r"}]}}}`, want: []string{"forcedd"}},
		{name: "Last", doc: `{"target_spec":{"racks":{"targets":[{"name":"r"}]}} , "forcedd" : true }`, want: []string{"forcedd"}},
		{name: "Only", doc: "{\n  \"forcedd\": {\"a\": [1, \"]\"]}\n}", want: []string{"forcedd"}},
		{name: "Nested", doc: `{"target_spec":{"racks":{"targets":[{"name":"r"}]},"component_types":["COMPONENT_TYPE_COMPUTE"]},"forced":true}`, want: []string{"target_spec.component_types"}},
		{name: "InList", doc: `{"target_spec":{"racks":{"targets":[{"name":"r"},{"nmae":"s","name":"t"}]}}}`, want: []string{"target_spec.racks.targets[1].nmae"}},
		{name: "Several", doc: `{"a":1,"target_spec":{"b":2,"racks":{"targets":[{"c":3}]}},"description":"d","e":null}`, want: []string{"a", "target_spec.b", "target_spec.racks.targets[0].c", "e"}},
		{name: "CamelCaseKnown", doc: `{"overrideReadinessCheck":true,"queueOptions":{"x":1}}`, want: []string{"queueOptions.x"}},
		{name: "Repeated", doc: `{"a":1,"a":2}`, want: []string{"a", "a"}},
		{name: "PastTheCap", doc: "{" + strings.Join(many, ",") + "}", want: want},
		// Past maxIgnoredFieldsScan only the first is named.
		{name: "BigOne", doc: `{"a":1,` + big + `}`, want: []string{"a"}},
		{name: "BigTwo", doc: `{"a":1,` + big + `,"b":2}`, want: []string{"a", "..."}},
		// A bad enum name after an unknown field is dropped, as before.
		{name: "ThenBadEnum", doc: `{"a":1,"target_spec":{"racks":{"targets":[{"name":"r","component_types":["COMPONENT_TYPE_TOASTER"]}]}}}`, want: []string{"a"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got flowv1.PowerOffRackRequest
			require.NoError(t, jsonCodec{}.Unmarshal([]byte(tt.doc), &got))
			require.Equal(t, tt.want, unknownJSONFields(&got))
			require.Equal(t, tt.want, takeUnknownJSONFields(&got))
			require.Empty(t, got.ProtoReflect().GetUnknown())
			var lax flowv1.PowerOffRackRequest
			require.NoError(t, protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal([]byte(tt.doc), &lax))
			require.True(t, proto.Equal(&lax, &got), "got %v, want %v", &got, &lax)
		})
	}
}

// TestJSONCodecErrorsAfterUnknownFields: a document with unknown fields
// and a bad value fails as before, its position in the document sent.
func TestJSONCodecErrorsAfterUnknownFields(t *testing.T) {
	t.Parallel()
	var m flowv1.PowerOffRackRequest
	err := jsonCodec{}.Unmarshal([]byte(`{"a":1,"b":2,"forced":"yes"}`), &m)
	require.ErrorContains(t, err, "forced: ")
	require.ErrorContains(t, err, `invalid value for bool field forced: "yes" (line 1:23)`)
}

func TestIgnoredFieldsValue(t *testing.T) {
	t.Parallel()
	require.Equal(t, `forcedd, target_spec.foo, "a,b", "x y", "\u00e9", "\"q\"", ...`,
		ignoredFieldsValue([]string{"forcedd", "target_spec.foo", "a,b", "x y", "é", `"q"`, "..."}))
}

// TestIgnoredFieldsHeader: Connect JSON answers name the unknown fields,
// on success and on error; other answers do not carry the header; the
// warning is logged once per method for calls in quick succession, with
// the paths and never the values.
func TestIgnoredFieldsHeader(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	h := NewHandler(slog.New(slog.NewJSONHandler(&logs, nil)), &listingFlow{}, adminv1connect.UnimplementedAdminServiceHandler{}, Options{Limits: testLimits()})
	serve := func(procedure, body string, header http.Header) (int, http.Header) {
		req := connectRequest(procedure, []byte(body))
		for k, v := range header {
			req.Header[k] = v
		}
		rec, _ := serveCPU(t, h, req)
		return rec.Code, rec.Header()
	}
	code, header := serve(flowv1connect.FlowGetListOfRacksProcedure, `{"with_componentz":"s3cr3t","pagination":{"limti":5}}`, nil)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "with_componentz, pagination.limti", header.Get(IgnoredFieldsHeader))
	code, header = serve(flowv1connect.FlowGetListOfRacksProcedure, `{"with_componentz":"s3cr3t"}`, nil)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "with_componentz", header.Get(IgnoredFieldsHeader))

	code, header = serve(flowv1connect.FlowGetListOfRacksProcedure, `{"with_components":true}`, nil)
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, header, IgnoredFieldsHeader)

	// Errors: the method's own (unimplemented), and strict JSON's.
	code, header = serve(flowv1connect.FlowGetRackInfoBySerialProcedure, `{"serial_info":{"serail":"x"}}`, nil)
	require.Equal(t, http.StatusNotImplemented, code)
	require.Equal(t, "serial_info.serail", header.Get(IgnoredFieldsHeader))
	code, header = serve(flowv1connect.FlowGetListOfRacksProcedure, `{"a":1,"b":2}`, http.Header{StrictHeader: {"true"}})
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, "a, b", header.Get(IgnoredFieldsHeader))

	// gRPC-Web with the JSON codec: no header.
	body := []byte(`{"with_componentz":true}`)
	req := connectRequest(flowv1connect.FlowGetListOfRacksProcedure, append([]byte{0, 0, 0, 0, byte(len(body))}, body...))
	req.Header.Set("Content-Type", "application/grpc-web+json")
	rec, _ := serveCPU(t, h, req)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), "grpc-status: 0")
	require.NotContains(t, rec.Header(), IgnoredFieldsHeader)

	var warnings []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
		if rec["msg"] == "unknown json fields ignored" {
			warnings = append(warnings, rec)
		}
	}
	require.Len(t, warnings, 2, logs.String()) // GetListOfRacks once, GetRackInfoBySerial once
	require.Equal(t, "WARN", warnings[0]["level"])
	require.Equal(t, flowv1connect.FlowGetListOfRacksProcedure, warnings[0]["method"])
	require.Equal(t, []any{"with_componentz", "pagination.limti"}, warnings[0]["fields"])
	require.Equal(t, flowv1connect.FlowGetRackInfoBySerialProcedure, warnings[1]["method"])
	require.NotContains(t, logs.String(), "s3cr3t")
}

// TestIgnoredFieldsLogEvery: past the interval the next call logs again,
// counting the calls it did not log.
func TestIgnoredFieldsLogEvery(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	l := &ignoredFieldsLog{logger: slog.New(slog.NewJSONHandler(&logs, nil)), every: 50 * time.Millisecond, last: map[string]time.Time{}, quiet: map[string]int{}}
	ctx := t.Context()
	l.log(ctx, "/v1.Flow/A", []string{"a"})
	l.log(ctx, "/v1.Flow/A", []string{"a"})
	l.log(ctx, "/v1.Flow/A", []string{"b"})
	l.log(ctx, "/v1.Flow/B", []string{"a"})
	require.Equal(t, 2, strings.Count(logs.String(), "\n"), logs.String())
	time.Sleep(60 * time.Millisecond)
	l.log(ctx, "/v1.Flow/A", []string{"c"})
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	require.Len(t, lines, 3)
	require.Contains(t, lines[2], `"fields":["c"]`)
	require.Contains(t, lines[2], `"calls_not_logged":2`)
}

// TestJSONCodecRefusesWhatItRefusedBefore: a document protojson refuses
// with unknown fields dropped is refused still, cut or not.
func TestJSONCodecRefusesWhatItRefusedBefore(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{
		`{"a":1,}`,
		`{"a":1,,"forced":true}`,
		`{"a":"\ud800","forced":true}`,
		"{\"a\":\"\xff\",\"forced\":true}",
		`{"a":1 "forced":true}`,
		`{"a":1,"forced":true`,
	} {
		var lax flowv1.PowerOffRackRequest
		require.Error(t, protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal([]byte(doc), &lax), doc)
		var m flowv1.PowerOffRackRequest
		require.Error(t, jsonCodec{}.Unmarshal([]byte(doc), &m), doc)
	}
}
