// Package contracttest checks encodings against upstream's southbound
// messages, for the golden wire tests of nico and psm.
//
// The tests go both ways. A Recorder sits in front of a simulator and keeps
// every request message our client sent, as the bytes on the wire; Decode
// reads them with upstream's descriptor (contract.NewMessage), so a field
// number, wire type or list shape of ours that upstream does not share
// shows as an unknown field or a wrong value. Call builds a request from
// upstream's descriptor and sends it to a simulator over Connect's binary
// protocol, so the simulator must decode upstream's bytes.
package contracttest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/nicoflow/flow/proto/contract"
)

// Frame is one request message as received: its procedure
// ("/forge.Forge/UpdateComponentFirmware") and its bytes.
type Frame struct {
	Procedure string
	Message   []byte
}

// Recorder is an http.Handler that keeps the request messages of gRPC
// calls and passes them on to Next unchanged.
type Recorder struct {
	Next http.Handler

	mu     sync.Mutex
	frames []Frame
}

// ServeHTTP records the request's messages, then serves it with Next.
func (r *Recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if !strings.HasPrefix(req.Header.Get("Content-Type"), "application/grpc") {
		r.Next.ServeHTTP(w, req)
		return
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	_ = req.Body.Close()
	for rest := body; len(rest) >= 5; {
		n := int(binary.BigEndian.Uint32(rest[1:5]))
		if rest[0] != 0 || len(rest) < 5+n {
			break // compressed or cut short: not ours to judge; Next will
		}
		r.mu.Lock()
		r.frames = append(r.frames, Frame{Procedure: req.URL.Path, Message: bytes.Clone(rest[5 : 5+n])})
		r.mu.Unlock()
		rest = rest[5+n:]
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	r.Next.ServeHTTP(w, req)
}

// Reset forgets the recorded frames.
func (r *Recorder) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.frames = nil
}

// Last returns the last request message sent to procedure, failing t when
// there is none.
func (r *Recorder) Last(t testing.TB, procedure string) []byte {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.frames) - 1; i >= 0; i-- {
		if r.frames[i].Procedure == procedure {
			return r.frames[i].Message
		}
	}
	t.Fatalf("no request to %s was recorded", procedure)
	return nil
}

// Method returns the upstream method of service, failing t when upstream
// has none.
func Method(t testing.TB, service protoreflect.FullName, method protoreflect.Name) protoreflect.MethodDescriptor {
	t.Helper()
	sd, err := contract.Service(service)
	if err != nil {
		t.Fatal(err)
	}
	md := sd.Methods().ByName(method)
	if md == nil {
		t.Fatalf("upstream %s has no method %s", service, method)
	}
	return md
}

// Decode reads b as a message of upstream's descriptor md. It fails t when
// the bytes do not parse or any field, at any depth, is unknown to
// upstream: a field upstream does not know is a field its server drops.
func Decode(t testing.TB, md protoreflect.MessageDescriptor, b []byte) *dynamicpb.Message {
	t.Helper()
	m := dynamicpb.NewMessage(md)
	if err := proto.Unmarshal(b, m); err != nil {
		t.Fatalf("upstream %s cannot decode our bytes: %v", md.FullName(), err)
	}
	if u := Unknown(m); len(u) > 0 {
		t.Fatalf("upstream %s does not know fields we sent: %s", md.FullName(), strings.Join(u, ", "))
	}
	return m
}

// Unknown lists the paths of unknown fields in m and its set submessages,
// as "path#number".
func Unknown(m protoreflect.Message) []string {
	var out []string
	var walk func(prefix string, m protoreflect.Message)
	walk = func(prefix string, m protoreflect.Message) {
		for b := m.GetUnknown(); len(b) > 0; {
			num, typ, n := protowire.ConsumeTag(b)
			if n < 0 {
				out = append(out, prefix+"#garbled")
				break
			}
			out = append(out, fmt.Sprintf("%s#%d", prefix, num))
			m := protowire.ConsumeFieldValue(num, typ, b[n:])
			if m < 0 {
				break
			}
			b = b[n+m:]
		}
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			p := prefix + string(fd.Name())
			switch {
			case fd.IsMap():
				if fd.MapValue().Message() != nil {
					v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
						walk(p+"["+k.String()+"].", mv.Message())
						return true
					})
				}
			case fd.IsList() && fd.Message() != nil:
				for i := range v.List().Len() {
					walk(p+"."+strconv.Itoa(i)+".", v.List().Get(i).Message())
				}
			case fd.Message() != nil:
				walk(p+".", v.Message())
			}
			return true
		})
	}
	walk("", m)
	return out
}

// Get returns the value at path in m: field names joined by dots, with a
// list index as a number ("compute_trays.machine_ids.machine_ids.0.id").
// A message yields its protoreflect.Message, a list its length as int, an
// enum its number as int32, and scalars their Go value. Unset fields yield
// their zero value; Has tells set from unset.
func Get(t testing.TB, m protoreflect.Message, path string) any {
	t.Helper()
	v, fd := walk(t, m, path)
	switch {
	case fd == nil:
		return v.Message()
	case fd.IsList() && !isIndex(path):
		return v.List().Len()
	case fd.Enum() != nil:
		return int32(v.Enum())
	case fd.Message() != nil && !fd.IsMap():
		return v.Message()
	}
	return v.Interface()
}

// Has reports whether the last field of path is set (for a field with
// presence, also when set to its zero value).
func Has(t testing.TB, m protoreflect.Message, path string) bool {
	t.Helper()
	i := strings.LastIndex(path, ".")
	parent, name := m, path
	if i >= 0 {
		pv, _ := walk(t, m, path[:i])
		parent, name = pv.Message(), path[i+1:]
	}
	fd := parent.Descriptor().Fields().ByName(protoreflect.Name(name))
	if fd == nil {
		t.Fatalf("%s: %s has no field %q", path, parent.Descriptor().FullName(), name)
	}
	return parent.Has(fd)
}

func isIndex(path string) bool {
	i := strings.LastIndex(path, ".")
	_, err := strconv.Atoi(path[i+1:])
	return err == nil
}

func walk(t testing.TB, m protoreflect.Message, path string) (protoreflect.Value, protoreflect.FieldDescriptor) {
	t.Helper()
	cur := protoreflect.ValueOfMessage(m)
	var fd protoreflect.FieldDescriptor
	for _, part := range strings.Split(path, ".") {
		if i, err := strconv.Atoi(part); err == nil && fd != nil && fd.IsList() {
			l := cur.List()
			if i >= l.Len() {
				t.Fatalf("%s: list %s has %d items", path, fd.Name(), l.Len())
			}
			cur = l.Get(i)
			continue
		}
		msg := cur.Message()
		fd = msg.Descriptor().Fields().ByName(protoreflect.Name(part))
		if fd == nil {
			t.Fatalf("%s: %s has no field %q", path, msg.Descriptor().FullName(), part)
		}
		cur = msg.Get(fd)
	}
	return cur, fd
}

// Build returns a message of upstream's descriptor md filled from text
// (protobuf text format, upstream's field and enum names), failing t when
// text does not fit upstream's shape.
func Build(t testing.TB, md protoreflect.MessageDescriptor, text string) *dynamicpb.Message {
	t.Helper()
	m := dynamicpb.NewMessage(md)
	if err := prototext.Unmarshal([]byte(text), m); err != nil {
		t.Fatalf("upstream %s from %q: %v", md.FullName(), text, err)
	}
	return m
}

// Call sends upstream's request for method, built from text, to the server
// at baseURL over Connect's binary unary protocol, and decodes the reply
// with upstream's response descriptor. A non-200 answer fails t with the
// server's error.
func Call(t testing.TB, client *http.Client, baseURL string, method protoreflect.MethodDescriptor, text string) *dynamicpb.Message {
	t.Helper()
	req := Build(t, method.Input(), text)
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	url := strings.TrimSuffix(baseURL, "/") + "/" + string(method.Parent().FullName()) + "/" + string(method.Name())
	res, err := client.Post(url, "application/proto", bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: %v", method.Name(), err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s: %v", method.Name(), err)
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("%s answered %s: %s", method.Name(), res.Status, body)
	}
	out := dynamicpb.NewMessage(method.Output())
	if err := proto.Unmarshal(body, out); err != nil {
		t.Fatalf("%s: upstream cannot decode the reply: %v", method.Name(), err)
	}
	if u := Unknown(out); len(u) > 0 {
		t.Fatalf("%s: the reply has fields upstream does not know: %s", method.Name(), strings.Join(u, ", "))
	}
	return out
}
