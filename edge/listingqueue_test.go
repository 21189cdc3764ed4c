package edge

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/nicoflow/flow/proto/gen/flow/admin/v1/adminv1connect"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// blockingFlow's GetListOfRacks holds its listing slot until release is
// closed.
type blockingFlow struct {
	flowv1connect.UnimplementedFlowHandler
	entered chan struct{}
	release chan struct{}
	calls   atomic.Int32
}

func (f *blockingFlow) GetListOfRacks(ctx context.Context, _ *flowv1.GetListOfRacksRequest) (*flowv1.GetListOfRacksResponse, error) {
	if f.calls.Add(1) == 1 {
		close(f.entered)
		select {
		case <-f.release:
		case <-ctx.Done():
		}
	}
	return &flowv1.GetListOfRacksResponse{Total: 7}, nil
}

// TestListingQueueTimeout: with every listing slot held, a listing that
// waited FLOW_LISTING_QUEUE_TIMEOUT is refused with resource_exhausted, in
// Connect JSON and in gRPC alike, with a message naming both settings, and
// never reaches the handler; once the slot is free, listings are answered
// again.
func TestListingQueueTimeout(t *testing.T) {
	t.Parallel()
	lim := testLimits()
	lim.Listings, lim.ListingQueueWait = 1, 200*time.Millisecond
	svc := &blockingFlow{entered: make(chan struct{}), release: make(chan struct{})}
	h := NewHandler(slog.New(slog.DiscardHandler), svc, adminv1connect.UnimplementedAdminServiceHandler{}, Options{Limits: lim})
	// Cleartext HTTP/2 (gRPC needs HTTP/2; over TLS every client would
	// need a certificate naming an identity).
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Protocols = &p
	srv.Start()
	t.Cleanup(srv.Close)
	ctx := context.Background()
	var cp http.Protocols
	cp.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: &cp}}
	jsonClient := flowv1connect.NewFlowClient(hc, srv.URL, connect.WithProtoJSON())
	grpcClient := flowv1connect.NewFlowClient(hc, srv.URL, connect.WithGRPC())

	held := make(chan error, 1)
	go func() {
		_, err := jsonClient.GetListOfRacks(ctx, &flowv1.GetListOfRacksRequest{})
		held <- err
	}()
	select {
	case <-svc.entered:
	case err := <-held:
		t.Fatalf("the first listing ended before holding its slot: %v", err)
	}
	for name, c := range map[string]flowv1connect.FlowClient{"connect json": jsonClient, "grpc": grpcClient} {
		start := time.Now()
		_, err := c.GetListOfRacks(ctx, &flowv1.GetListOfRacksRequest{WithComponents: true})
		var ce *connect.Error
		require.True(t, errors.As(err, &ce), "%s: %v", name, err)
		require.Equal(t, connect.CodeResourceExhausted, ce.Code(), "%s: %v", name, err)
		require.Contains(t, ce.Message(), "FLOW_LISTING_QUEUE_TIMEOUT", name)
		require.Contains(t, ce.Message(), "FLOW_MAX_CONCURRENT_LISTINGS", name)
		require.Contains(t, ce.Message(), "retry later", name)
		require.GreaterOrEqual(t, time.Since(start), lim.ListingQueueWait, "%s: refused only after waiting", name)
	}
	require.EqualValues(t, 1, svc.calls.Load(), "the refused listings never reached the handler")
	close(svc.release)
	require.NoError(t, <-held)
	res, err := grpcClient.GetListOfRacks(ctx, &flowv1.GetListOfRacksRequest{})
	require.NoError(t, err)
	require.EqualValues(t, 7, res.GetTotal())
}

// TestPreencodedJSON: an answer whose only content is the unknown field
// PreencodedJSONField is written as that field's value, as it is, by
// Marshal (a copy: Connect recycles what Marshal returns) and MarshalAppend;
// a message with anything else is encoded by protojson, the marker dropped
// as any unknown field.
func TestPreencodedJSON(t *testing.T) {
	t.Parallel()
	doc := []byte(`{"racks":[],"total":3}`)
	framed := protowire.AppendBytes(protowire.AppendTag(nil, PreencodedJSONField, protowire.BytesType), doc)
	pre := &flowv1.GetListOfRacksResponse{}
	pre.ProtoReflect().SetUnknown(protoreflect.RawFields(framed))
	var c jsonCodec
	out, err := c.Marshal(pre)
	require.NoError(t, err)
	require.Equal(t, doc, out)
	out[0] = 'X'
	require.Equal(t, byte('{'), framed[len(framed)-len(doc)], "Marshal answered a copy")
	app, err := c.MarshalAppend([]byte("prefix:"), pre)
	require.NoError(t, err)
	require.Equal(t, "prefix:"+string(doc), string(app))

	mixed := &flowv1.GetListOfRacksResponse{Total: 5}
	mixed.ProtoReflect().SetUnknown(protoreflect.RawFields(framed))
	out, err = c.Marshal(mixed)
	require.NoError(t, err)
	require.JSONEq(t, `{"total":5}`, string(out))
	other := &flowv1.GetListOfRacksResponse{}
	other.ProtoReflect().SetUnknown(protoreflect.RawFields(protowire.AppendBytes(protowire.AppendTag(nil, PreencodedJSONField-1, protowire.BytesType), doc)))
	out, err = c.MarshalAppend(nil, other)
	require.NoError(t, err)
	require.JSONEq(t, `{}`, string(out))
}
