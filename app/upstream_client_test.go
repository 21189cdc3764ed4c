package app

import (
	"context"
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
	"github.com/nicoflow/flow/sim/nicosim"
)

// upstreamClientMethods are the v1.Flow methods upstream's June Go client
// (rest-api/flow/pkg/client) calls. testdata/upstream_client.json must
// exercise every one.
var upstreamClientMethods = []string{
	"ACPowerCycleRack", "AddComponent", "AssociateRuleWithRack", "AttachRacksToNVLDomain",
	"CreateExpectedRack", "CreateNVLDomain", "CreateOperationRule", "DecommissionRack",
	"DeleteComponent", "DeleteOperationRule", "DeleteRack", "DetachRacksFromNVLDomain",
	"DisassociateRuleFromRack", "GetComponentInfoByID", "GetComponentInfoBySerial", "GetComponents",
	"GetListOfNVLDomains", "GetListOfRacks", "GetOperationRule", "GetRackInfoByID",
	"GetRackInfoBySerial", "GetRackRuleAssociation", "GetRacksForNVLDomain", "GetTasksByIDs",
	"IngestRack", "ListOperationRules", "ListRackRuleAssociations", "ListTasks",
	"PatchComponent", "PowerOffRack", "PowerOnRack", "PowerResetRack",
	"PurgeComponent", "PurgeRack", "SetRuleAsDefault", "UpdateOperationRule",
	"UpgradeFirmware", "ValidateComponents",
}

// pendingMethods are methods the fixtures call that Flow does not implement
// yet: they must answer Unimplemented, and the test fails once one is
// built, to move it out of this list. The June client calls no schedule,
// operation-run or event-rule method, so the list is empty; fixtures for
// those methods (from newer clients) go here first.
var pendingMethods = []string{}

type upstreamCall struct {
	Method  string            `json:"method"`
	Client  string            `json:"client"`
	Request json.RawMessage   `json:"request"`
	Capture map[string]string `json:"capture"`
	Note    string            `json:"note"`
}

// TestUpstreamClientRequests sends, over gRPC, every request upstream's
// June client builds (testdata/upstream_client.json, written by hand from
// its source) in the order a session would, and requires Flow to accept
// each: no error at all, neither InvalidArgument nor anything else.
// Submitted tasks are cancelled before the next call, so no two conflict.
func TestUpstreamClientRequests(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/upstream_client.json")
	require.NoError(t, err)
	var doc struct {
		Calls []upstreamCall `json:"calls"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))

	e := startE2E(t, 10*time.Millisecond)
	client := flowv1connect.NewFlowClient(h2cClient(), e.url, connect.WithGRPC())
	ctx := context.Background()
	vars := map[string]string{
		"NOW":        time.Now().UTC().Format(time.RFC3339),
		"IN_AN_HOUR": time.Now().Add(time.Hour).UTC().Format(time.RFC3339),
	}
	called := map[string]bool{}
	for i, c := range doc.Calls {
		what := strconv.Itoa(i) + " " + c.Method + " (" + c.Client + ")"
		called[c.Method] = true
		body := string(c.Request)
		for k, v := range vars {
			body = strings.ReplaceAll(body, "$"+k, v)
		}
		require.NotContains(t, body, `"$`, "%s: a $NAME is not captured yet", what)

		m := reflect.ValueOf(client).MethodByName(c.Method)
		require.True(t, m.IsValid(), "%s: no such v1.Flow method", what)
		req := reflect.New(m.Type().In(1).Elem())
		require.NoError(t, protojson.Unmarshal([]byte(body), req.Interface().(proto.Message)), "%s: the fixture does not fit the contract", what)
		out := m.Call([]reflect.Value{reflect.ValueOf(ctx), req})
		err, _ := out[1].Interface().(error)
		if slices.Contains(pendingMethods, c.Method) {
			require.Equal(t, connect.CodeUnimplemented, connect.CodeOf(err), "%s is implemented now: take it out of pendingMethods", c.Method)
			continue
		}
		require.NoError(t, err, what)
		res := out[0].Interface().(proto.Message)

		if c.Method == "CreateExpectedRack" {
			seedFixtureRack(t, e, req.Interface().(*flowv1.CreateExpectedRackRequest))
		}
		if len(c.Capture) > 0 {
			b, err := protojson.Marshal(res)
			require.NoError(t, err)
			var tree any
			require.NoError(t, json.Unmarshal(b, &tree))
			for name, path := range c.Capture {
				v, ok := jsonPath(tree, path)
				require.True(t, ok, "%s: no %s in the answer %s", what, path, b)
				vars[name] = v
			}
		}
		if sub, ok := res.(*flowv1.SubmitTaskResponse); ok {
			require.NotEmpty(t, sub.GetTaskIds(), what)
			for _, id := range sub.GetTaskIds() {
				_, err := client.CancelTask(ctx, &flowv1.CancelTaskRequest{TaskId: id})
				if err != nil {
					// Already finished: nothing to cancel.
					require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%s: cancel: %v", what, err)
				}
				e.wait(t, id)
			}
		}
	}
	for _, m := range upstreamClientMethods {
		require.True(t, called[m], "no fixture calls %s", m)
	}
	for _, m := range pendingMethods {
		require.True(t, called[m], "pending method %s has no fixture", m)
	}
}

// seedFixtureRack gives the simulators the devices of the fixture's rack.
func seedFixtureRack(t *testing.T, e *e2e, req *flowv1.CreateExpectedRackRequest) {
	t.Helper()
	var devs []nicosim.Device
	for _, c := range req.GetRack().GetComponents() {
		kind := strings.ToLower(strings.TrimPrefix(c.GetType().String(), "COMPONENT_TYPE_"))
		devs = append(devs, nicosim.Device{
			Kind: kind, ID: c.GetComponentId(), Name: c.GetInfo().GetName(), Serial: c.GetInfo().GetSerialNumber(),
			BMCMAC: c.GetBmcs()[0].GetMacAddress(), BMCIP: c.GetBmcs()[0].GetIpAddress(),
			SlotID: int(c.GetPosition().GetSlotId()), TrayIndex: int(c.GetPosition().GetTrayIdx()),
		})
	}
	require.NoError(t, e.sims.Seed(devs))
}

// jsonPath reads a string or number at path in a decoded JSON tree: keys
// separated by dots, list indexes as numbers, and key[field.path=value]
// picking the list element whose field equals value.
func jsonPath(tree any, path string) (string, bool) {
	cur := tree
	for _, seg := range splitPath(path) {
		key, sel, hasSel := strings.Cut(seg, "[")
		switch v := cur.(type) {
		case map[string]any:
			cur = v[key]
		case []any:
			n, err := strconv.Atoi(key)
			if err != nil || n >= len(v) {
				return "", false
			}
			cur = v[n]
		default:
			return "", false
		}
		if hasSel {
			field, want, _ := strings.Cut(strings.TrimSuffix(sel, "]"), "=")
			list, _ := cur.([]any)
			cur = nil
			for _, el := range list {
				if got, ok := jsonPath(el, field); ok && got == want {
					cur = el
					break
				}
			}
		}
	}
	switch v := cur.(type) {
	case string:
		return v, true
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), true
	}
	return "", false
}

// splitPath splits at dots outside brackets.
func splitPath(path string) []string {
	var out []string
	depth, start := 0, 0
	for i, r := range path {
		switch r {
		case '[':
			depth++
		case ']':
			depth--
		case '.':
			if depth == 0 {
				out = append(out, path[start:i])
				start = i + 1
			}
		}
	}
	return append(out, path[start:])
}
