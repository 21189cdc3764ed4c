package lean_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
	"github.com/nicoflow/flow/proto/lean"
)

// flowServer answers two methods of v1.Flow; the rest are unimplemented.
type flowServer struct {
	flowv1connect.UnimplementedFlowHandler
}

func (flowServer) Version(context.Context, *flowv1.VersionRequest) (*flowv1.BuildInfo, error) {
	return &flowv1.BuildInfo{Version: "v9.8.7", GitCommit: "abc"}, nil
}

func (flowServer) GetRackInfoByID(_ context.Context, req *flowv1.GetRackInfoByIDRequest) (*flowv1.GetRackInfoResponse, error) {
	if req.GetId().GetId() == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("id: required"))
	}
	return &flowv1.GetRackInfoResponse{Rack: &flowv1.Rack{Info: &flowv1.DeviceInfo{Id: req.GetId(), Name: "rack-" + req.GetId().GetId()}}}, nil
}

func newServer(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(flowv1connect.NewFlowHandler(flowServer{}))
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// TestLeanClientMatchesGenerated: over each protocol the lean client gets
// what connect's generated client gets: the response, the error's code and
// message, unimplemented methods.
func TestLeanClientMatchesGenerated(t *testing.T) {
	srv := newServer(t)
	ctx := context.Background()
	for name, opts := range map[string][]connect.ClientOption{
		"connect":  nil,
		"grpc":     {connect.WithGRPC()},
		"grpc-web": {connect.WithGRPCWeb()},
		"gzip":     {connect.WithSendGzip()},
	} {
		t.Run(name, func(t *testing.T) {
			clients := map[string]flowv1connect.FlowClient{
				"generated": flowv1connect.NewFlowClient(srv.Client(), srv.URL+"/", opts...),
				"lean":      flowv1connect.NewFlowLeanClient(srv.Client(), srv.URL+"/", opts...),
			}
			answers := map[string][]any{}
			for kind, c := range clients {
				v, err := c.Version(ctx, &flowv1.VersionRequest{})
				require.NoError(t, err, kind)
				rack, err := c.GetRackInfoByID(ctx, &flowv1.GetRackInfoByIDRequest{Id: &flowv1.UUID{Id: "r1"}})
				require.NoError(t, err, kind)
				bad, badErr := c.GetRackInfoByID(ctx, &flowv1.GetRackInfoByIDRequest{})
				require.Nil(t, bad, kind)
				none, noneErr := c.ListTasks(ctx, &flowv1.ListTasksRequest{})
				require.Nil(t, none, kind)
				answers[kind] = []any{v.GetVersion(), v.GetGitCommit(), rack.GetRack().GetInfo().GetName(),
					connect.CodeOf(badErr), badErr.Error(), connect.CodeOf(noneErr)}
			}
			require.Equal(t, []any{"v9.8.7", "abc", "rack-r1", connect.CodeInvalidArgument, "invalid_argument: id: required", connect.CodeUnimplemented}, answers["lean"])
			require.Equal(t, answers["generated"], answers["lean"])
		})
	}
}

// TestLeanInterceptorsSeeTheMessages: a client interceptor reads the
// request and the response as the method's messages (through reflection),
// and the method's schema in the spec.
func TestLeanInterceptorsSeeTheMessages(t *testing.T) {
	srv := newServer(t)
	var seen []string
	icpt := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			seen = append(seen, string(req.Spec().Schema.(protoreflect.MethodDescriptor).FullName()),
				string(req.Any().(proto.Message).ProtoReflect().Descriptor().FullName()))
			res, err := next(ctx, req)
			if err == nil {
				seen = append(seen, string(res.Any().(proto.Message).ProtoReflect().Descriptor().FullName()))
			}
			return res, err
		}
	})
	c := flowv1connect.NewFlowLeanClient(srv.Client(), srv.URL, connect.WithInterceptors(icpt))
	_, err := c.Version(context.Background(), &flowv1.VersionRequest{})
	require.NoError(t, err)
	require.Equal(t, []string{"v1.Flow.Version", "v1.VersionRequest", "v1.BuildInfo"}, seen)
}

// TestLeanCallRefusesUnknownProcedures: a procedure outside the service is
// a precise error, not a request.
func TestLeanCallRefusesUnknownProcedures(t *testing.T) {
	srv := newServer(t)
	conn := lean.NewConn(srv.Client(), srv.URL, flowv1.File_flow_proto.Services().ByName("Flow"))
	for _, p := range []string{"/v1.Flow/NoSuchMethod", "/v1.Other/Version", "Version", ""} {
		_, err := conn.Call(context.Background(), p, &flowv1.VersionRequest{})
		require.Equal(t, connect.CodeUnimplemented, connect.CodeOf(err), p)
		require.ErrorContains(t, err, "is not a unary method of v1.Flow", p)
	}
	res, err := lean.Call[*flowv1.BuildInfo](context.Background(), conn, flowv1connect.FlowVersionProcedure, &flowv1.VersionRequest{})
	require.NoError(t, err)
	require.Equal(t, "v9.8.7", res.GetVersion())
}

// TestLeanClientConcurrentFirstCalls: many goroutines making a method's
// first call at once share one client (run with -race).
func TestLeanClientConcurrentFirstCalls(t *testing.T) {
	srv := newServer(t)
	c := flowv1connect.NewFlowLeanClient(srv.Client(), srv.URL, connect.WithGRPC())
	errs := make(chan error, 40)
	for i := range 40 {
		go func() {
			var err error
			if i%2 == 0 {
				_, err = c.Version(context.Background(), &flowv1.VersionRequest{})
			} else {
				_, err = c.GetRackInfoByID(context.Background(), &flowv1.GetRackInfoByIDRequest{Id: &flowv1.UUID{Id: "r"}})
			}
			errs <- err
		}()
	}
	for range 40 {
		require.NoError(t, <-errs)
	}
}

// TestLeanCallRaw: CallRaw returns the response's bytes, which decode to
// what Call returns, over each protocol and whatever codec the options
// name (a raw call speaks binary protobuf); errors keep their code and
// message, and a procedure outside the service is refused.
func TestLeanCallRaw(t *testing.T) {
	srv := newServer(t)
	ctx := context.Background()
	for name, opts := range map[string][]connect.ClientOption{
		"connect":  nil,
		"grpc":     {connect.WithGRPC()},
		"grpc-web": {connect.WithGRPCWeb()},
		"json":     {connect.WithProtoJSON()},
	} {
		t.Run(name, func(t *testing.T) {
			conn := lean.NewConn(srv.Client(), srv.URL, flowv1.File_flow_proto.Services().ByName("Flow"), opts...)
			req := &flowv1.GetRackInfoByIDRequest{Id: &flowv1.UUID{Id: "r1"}}
			raw, err := conn.CallRaw(ctx, flowv1connect.FlowGetRackInfoByIDProcedure, req)
			require.NoError(t, err)
			var got flowv1.GetRackInfoResponse
			require.NoError(t, proto.Unmarshal(raw, &got))
			want, err := lean.Call[*flowv1.GetRackInfoResponse](ctx, conn, flowv1connect.FlowGetRackInfoByIDProcedure, req)
			require.NoError(t, err)
			require.Equal(t, "rack-r1", got.GetRack().GetInfo().GetName())
			require.True(t, proto.Equal(want, &got))

			_, err = conn.CallRaw(ctx, flowv1connect.FlowGetRackInfoByIDProcedure, &flowv1.GetRackInfoByIDRequest{})
			require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
			require.ErrorContains(t, err, "id: required")
			_, err = conn.CallRaw(ctx, "/v1.Flow/NoSuchMethod", req)
			require.Equal(t, connect.CodeUnimplemented, connect.CodeOf(err))
		})
	}
}
