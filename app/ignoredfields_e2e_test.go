package app

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/nicoflow/flow/edge"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// TestIgnoredFieldsNamed: a Connect JSON request with a misspelt or
// misplaced field runs as it always has, the field ignored (upstream
// clients rely on it), but the answer names the field in
// Flow-Ignored-Fields, on success and on error, and the server logs one
// warning per method for calls in quick succession, without the values.
// Binary protobuf and gRPC answers never carry the header.
func TestIgnoredFieldsNamed(t *testing.T) {
	t.Parallel()
	e := startE2E(t, time.Millisecond)
	racks := make([]string, 4)
	for i := range racks {
		racks[i] = e.addRack(t, i, i >= 2).Name // 0, 1 on; 2, 3 off
	}
	target := func(i int, extra string) string {
		return `"target_spec":{"racks":{"targets":[{"name":"` + racks[i] + `"}]}` + extra + `}`
	}
	for _, tt := range []struct {
		name, method, body string
		status             int
		want               string // the header; "" for none
		operation          string // the task's, on success
	}{
		// A graceful power-off, as before the header.
		{name: "Misspelt", method: "PowerOffRack", body: `{` + target(0, "") + `,"forcedd":true}`, status: http.StatusOK, want: "forcedd", operation: "power_off"},
		{name: "NoneUnknown", method: "PowerOffRack", body: `{` + target(1, "") + `,"forced":true}`, status: http.StatusOK, operation: "force_power_off"},
		// The whole rack powers on, as before the header.
		{name: "MisplacedTopLevel", method: "PowerOnRack", body: `{` + target(2, "") + `,"component_types":["COMPONENT_TYPE_COMPUTE"]}`, status: http.StatusOK, want: "component_types", operation: "power_on"},
		{name: "MisplacedNested", method: "PowerOnRack", body: `{` + target(3, `,"component_types":["COMPONENT_TYPE_COMPUTE"]`) + `}`, status: http.StatusOK, want: "target_spec.component_types", operation: "power_on"},
		{name: "OnError", method: "PowerOffRack", body: `{"target_spec":{"racks":{"targets":[{"name":"no-such-rack","passwrd":"hunter2"}]}},"forcedd":true}`, status: http.StatusNotFound, want: "target_spec.racks.targets[0].passwrd, forcedd"},
	} {
		status, header, body := postJSON(t, e.url+"/v1.Flow/"+tt.method, tt.body)
		require.Equal(t, tt.status, status, "%s: %v", tt.name, body)
		if tt.want == "" {
			require.NotContains(t, header, edge.IgnoredFieldsHeader, tt.name)
		} else {
			require.Equal(t, tt.want, header.Get(edge.IgnoredFieldsHeader), tt.name)
		}
		if tt.status != http.StatusOK {
			continue
		}
		ids, _ := body["taskIds"].([]any)
		require.Len(t, ids, 1, "%s: %v", tt.name, body)
		id, _ := ids[0].(map[string]any)["id"].(string)
		task := e.wait(t, &flowv1.UUID{Id: id})
		require.Equal(t, flowv1.TaskStatus_TASK_STATUS_COMPLETED, task.GetStatus(), "%s: %s", tt.name, task.GetMessage())
		require.Equal(t, tt.operation, task.GetOperation(), tt.name)
		require.Len(t, task.GetComponentUuids(), 35, "%s: the whole rack", tt.name)
	}

	var warnings []string
	for _, line := range strings.Split(e.logs.String(), "\n") {
		if strings.Contains(line, `msg="unknown json fields ignored"`) {
			warnings = append(warnings, line)
		}
	}
	require.Len(t, warnings, 2, "one per method: %s", strings.Join(warnings, "\n"))
	require.Contains(t, warnings[0], "method=/v1.Flow/PowerOffRack")
	require.Contains(t, warnings[0], "fields=[forcedd]")
	require.Contains(t, warnings[1], "method=/v1.Flow/PowerOnRack")
	require.Contains(t, warnings[1], "fields=[component_types]")
	require.NotContains(t, e.logs.String(), "hunter2")

	// gRPC with the JSON codec goes through the same decoder, and gets no
	// header; nor does an unknown field number in binary protobuf.
	frame := []byte(`{"verbose":true}`)
	frame = append([]byte{0, 0, 0, 0, byte(len(frame))}, frame...)
	hreq, err := http.NewRequest(http.MethodPost, e.url+flowv1connect.FlowVersionProcedure, bytes.NewReader(frame))
	require.NoError(t, err)
	hreq.Header.Set("Content-Type", "application/grpc+json")
	hreq.Header.Set("TE", "trailers")
	hres, err := h2cClient().Do(hreq)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, hres.Body)
	hres.Body.Close()
	require.Equal(t, "0", hres.Trailer.Get("Grpc-Status"), hres.Trailer.Get("Grpc-Message"))
	require.NotContains(t, hres.Header, edge.IgnoredFieldsHeader)
	require.NotContains(t, hres.Trailer, edge.IgnoredFieldsHeader)

	req := &flowv1.VersionRequest{}
	req.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1))
	for _, c := range []flowv1connect.FlowClient{
		flowv1connect.NewFlowClient(http.DefaultClient, e.url),
		flowv1connect.NewFlowClient(h2cClient(), e.url, connect.WithGRPC()),
	} {
		ctx, info := connect.NewClientContext(context.Background())
		_, err := c.Version(ctx, req)
		require.NoError(t, err)
		require.NotContains(t, info.ResponseHeader(), edge.IgnoredFieldsHeader)
	}
}
