// Package lean calls the unary methods of a Connect service through one
// instantiation of connect's generic client for every method, where the
// client protoc-gen-connect-go writes instantiates it once per method.
//
// Why: Go compiles a generic type instantiated with a struct type once per
// type argument, and when a program reaches reflect's method lookup by name
// (River UI does, through html/template and its request validator) the
// linker must keep every exported method of every type reachable from an
// interface value, so each generated client drags in connect's whole
// client API, streams included, for each of its methods: about 40
// functions a method. With the generated clients of v1.Flow, the admin
// service, NICo Core and PSM (115 methods) the stripped flow binary was
// 44.96 MB; with lean clients it is 36.98 MB (docs/deploy.md, "Image
// size").
//
// The clients themselves are generated (proto/internal/protoc-gen-lean,
// run by `make generate`): New<Service>LeanClient beside each generated
// connect client, with the same interface, so a caller swaps one
// constructor for the other. Requests and responses are the generated
// message types; on the wire nothing differs (Connect, gRPC or gRPC-Web,
// binary protobuf, the caller's options).
package lean

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/emptypb"
)

// message carries any protobuf message through connect's generic client:
// it is a proto.Message whose reflection is its content's, so connect's
// protobuf codec and the caller's interceptors read and write the content.
// The content of a response is made, before it is read, by the
// initializer Conn gives each method's client.
//
// A message of a raw call (CallRaw) has no content: rawCodec keeps the
// response's bytes in raw instead of decoding them.
type message struct {
	m   proto.Message
	raw *[]byte
}

// ProtoReflect implements proto.Message. An empty message (a second
// response a misbehaving server sends to a unary call, which connect reads
// only to reject) reads as Empty.
func (m *message) ProtoReflect() protoreflect.Message {
	if m.m == nil {
		return (&emptypb.Empty{}).ProtoReflect()
	}
	return m.m.ProtoReflect()
}

// Conn calls the methods of one service at one base URL. It makes each
// method's client on its first call and keeps it. Safe for concurrent use.
type Conn struct {
	httpClient connect.HTTPClient
	baseURL    string
	service    protoreflect.ServiceDescriptor
	opts       []connect.ClientOption

	mu      sync.RWMutex
	clients map[string]*connect.Client[message, message]
	// raws are the clients of CallRaw, by procedure.
	raws map[string]*connect.Client[message, message]
}

// NewConn returns a Conn to service at baseURL (scheme, host and any path
// prefix; a trailing slash is dropped), with the options of connect's
// generated clients (protocol, codec limits, interceptors, ...).
func NewConn(httpClient connect.HTTPClient, baseURL string, service protoreflect.ServiceDescriptor, opts ...connect.ClientOption) *Conn {
	return &Conn{
		httpClient: httpClient,
		baseURL:    strings.TrimRight(baseURL, "/"),
		service:    service,
		opts:       opts,
		clients:    map[string]*connect.Client[message, message]{},
		raws:       map[string]*connect.Client[message, message]{},
	}
}

// Call sends req to procedure (/package.Service/Method, one of the
// service's unary methods) and returns the response.
func (c *Conn) Call(ctx context.Context, procedure string, req proto.Message) (proto.Message, error) {
	client, err := c.client(procedure)
	if err != nil {
		return nil, err
	}
	res, err := client.CallUnary(ctx, connect.NewRequest(&message{m: req}))
	if err != nil {
		return nil, err
	}
	return res.Msg.m, nil
}

// Call is Conn.Call with the response's type: Res is the method's output
// message type (the generated clients pass it).
func Call[Res proto.Message](ctx context.Context, c *Conn, procedure string, req proto.Message) (Res, error) {
	var zero Res
	res, err := c.Call(ctx, procedure, req)
	if err != nil {
		return zero, err
	}
	out, ok := res.(Res)
	if !ok {
		return zero, connect.NewError(connect.CodeInternal, fmt.Errorf("lean: %s answered %T, want %T", procedure, res, zero))
	}
	return out, nil
}

// CallRaw sends req to procedure, as Call does, and returns the
// response's bytes undecoded (a copy the caller owns): binary protobuf of
// the method's output message, for a caller that decodes only what it
// needs of a large reply (protowire). The call always speaks binary
// protobuf, whatever codec the Conn's options name; interceptors see an
// empty response message.
func (c *Conn) CallRaw(ctx context.Context, procedure string, req proto.Message) ([]byte, error) {
	client, err := c.rawClient(procedure)
	if err != nil {
		return nil, err
	}
	res, err := client.CallUnary(ctx, connect.NewRequest(&message{m: req}))
	if err != nil {
		return nil, err
	}
	return *res.Msg.raw, nil
}

func (c *Conn) client(procedure string) (*connect.Client[message, message], error) {
	return c.cached(c.clients, procedure, false)
}

func (c *Conn) rawClient(procedure string) (*connect.Client[message, message], error) {
	return c.cached(c.raws, procedure, true)
}

// cached returns clients' client of procedure, made on its first call.
func (c *Conn) cached(clients map[string]*connect.Client[message, message], procedure string, raw bool) (*connect.Client[message, message], error) {
	c.mu.RLock()
	cl, ok := clients[procedure]
	c.mu.RUnlock()
	if ok {
		return cl, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := clients[procedure]; ok {
		return cl, nil
	}
	prefix := "/" + string(c.service.FullName()) + "/"
	name, ok := strings.CutPrefix(procedure, prefix)
	md := c.service.Methods().ByName(protoreflect.Name(name))
	if !ok || md == nil || md.IsStreamingClient() || md.IsStreamingServer() {
		return nil, connect.NewError(connect.CodeUnimplemented, fmt.Errorf("lean: %s is not a unary method of %s", procedure, c.service.FullName()))
	}
	out, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("lean: output of %s: %w", procedure, err))
	}
	init := func(_ connect.Spec, v any) error {
		v.(*message).m = out.New().Interface()
		return nil
	}
	opts := []connect.ClientOption{connect.WithSchema(md), connect.WithClientOptions(c.opts...)}
	if raw {
		// The response keeps its bytes (rawCodec), in a slice made per
		// call.
		init = func(_ connect.Spec, v any) error {
			v.(*message).raw = new([]byte)
			return nil
		}
		opts = append(opts, connect.WithCodec(rawCodec{}))
	}
	cl = connect.NewClient[message, message](c.httpClient, c.baseURL+procedure, append(opts, connect.WithResponseInitializer(init))...)
	clients[procedure] = cl
	return cl, nil
}

// rawCodec is connect's binary protobuf codec, except that a response of
// CallRaw keeps a copy of its bytes (connect reuses its buffers) instead
// of being decoded.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("lean: %T is not a protobuf message", m)
	}
	return proto.Marshal(pm)
}

func (rawCodec) Unmarshal(data []byte, m any) error {
	if x, ok := m.(*message); ok && x.raw != nil && x.m == nil {
		*x.raw = slices.Clone(data)
		if *x.raw == nil {
			*x.raw = []byte{}
		}
		return nil
	}
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("lean: %T is not a protobuf message", m)
	}
	return proto.Unmarshal(data, pm)
}
