package app

import (
	"flag"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"

	"github.com/nicoflow/flow/edge"
)

// implementedMethods returns the v1.Flow methods the server implements
// (those that do not answer unimplemented to an empty request).
func implementedMethods(t testing.TB, b *badBundle) []protoreflect.MethodDescriptor {
	t.Helper()
	var out []protoreflect.MethodDescriptor
	methods := flowv1.File_flow_proto.Services().ByName("Flow").Methods()
	for i := range methods.Len() {
		md := methods.Get(i)
		if a := b.post(t, string(md.Name()), []byte(`{}`), nil); a.code != "unimplemented" {
			out = append(out, md)
		}
	}
	return out
}

// call sends body to method as Connect JSON or Connect binary proto and
// returns the answer's code ("" for success).
func (b *badBundle) call(t testing.TB, method string, binary bool, body []byte) connectAnswer {
	t.Helper()
	var header http.Header
	if binary {
		header = http.Header{"Content-Type": {"application/proto"}}
	}
	return b.post(t, method, body, header)
}

// guard checks one answer: never internal or unknown, and an error leaves
// the database as it was. It returns the digest to compare the next call
// against.
func (b *badBundle) guard(t testing.TB, before, method string, binary bool, body []byte) string {
	t.Helper()
	a := b.call(t, method, binary, body)
	require.NotContains(t, []string{"internal", "unknown", "unimplemented"}, a.code, "%s (binary=%t) %q: %s", method, binary, edge.Truncate(string(body), 2000), a.message)
	if a.code == "" {
		return b.digest(t)
	}
	after := b.digest(t)
	require.Equal(t, before, after, "%s (binary=%t) answered %s and changed the database: %q", method, binary, a.code, edge.Truncate(string(body), 2000))
	return before
}

// FuzzHandlers sends arbitrary request bytes, as Connect JSON or binary
// proto, to every implemented v1.Flow method (the fuzzer picks the method)
// through the whole server stack on a real database: the answer is never
// internal, and nothing is written when the answer is an error.
func FuzzHandlers(f *testing.F) {
	b := setupBadInput(f, nil)
	methods := implementedMethods(f, b)
	index := map[string]int{}
	for i, md := range methods {
		index[string(md.Name())] = i
		f.Add(uint8(i), false, []byte(`{}`))
		f.Add(uint8(i), true, []byte{})
	}
	for _, tt := range badInputCases(f, b.rack) {
		if i, ok := index[tt.method]; ok && tt.raw == nil && len(tt.body) < 64<<10 {
			f.Add(uint8(i), false, []byte(tt.body))
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i, md := range methods {
		for range 3 {
			m := randomMessage(rng, md.Input(), 0, b.rack.Name)
			if raw, err := proto.Marshal(m); err == nil {
				f.Add(uint8(i), true, raw)
			}
		}
	}
	digest := b.digest(f)
	f.Fuzz(func(t *testing.T, method uint8, binary bool, body []byte) {
		md := methods[int(method)%len(methods)]
		digest = b.guard(t, digest, string(md.Name()), binary, body)
	})
}

var mutations = flag.Int("mutations", 10, "random requests per implemented method and encoding in TestRandomMutations")

// TestRandomMutations sends random requests (every field randomly set or
// not, to adversarial values: NUL bytes, blanks, long strings, negative and
// extreme numbers, unknown enum values, malformed IDs, long lists) to every
// implemented method, as Connect JSON and binary proto: none answers
// internal, and none that fails writes anything. -mutations=N sets the
// requests per method and encoding.
func TestRandomMutations(t *testing.T) {
	t.Parallel()
	b := setupBadInput(t, nil)
	methods := implementedMethods(t, b)
	require.GreaterOrEqual(t, len(methods), 40)
	rng := rand.New(rand.NewPCG(uint64(*mutations), 19))
	digest := b.digest(t)
	sent, failed := 0, 0
	codes := map[string]int{}
	for _, md := range methods {
		for range *mutations {
			m := randomMessage(rng, md.Input(), 0, b.rack.Name)
			if raw, err := proto.Marshal(m); err == nil {
				digest = b.guard(t, digest, string(md.Name()), true, raw)
				sent++
			}
			if raw, err := protojson.Marshal(m); err == nil {
				a := b.call(t, string(md.Name()), false, raw)
				require.NotContains(t, []string{"internal", "unknown", "unimplemented"}, a.code, "%s %s: %s", md.Name(), edge.Truncate(string(raw), 2000), a.message)
				codes[or(a.code, "ok")]++
				if a.code != "" {
					failed++
					require.Equal(t, digest, b.digest(t), "%s answered %s and changed the database", md.Name(), a.code)
				} else {
					digest = b.digest(t)
				}
				sent++
			}
		}
	}
	t.Logf("%d random requests over %d methods: %d refused, no internal answer; JSON codes %v", sent, len(methods), failed, codes)
}

// randomMessage builds a message of descriptor md with random fields.
func randomMessage(rng *rand.Rand, md protoreflect.MessageDescriptor, depth int, rackName string) *dynamicpb.Message {
	m := dynamicpb.NewMessage(md)
	if depth > 5 {
		return m
	}
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if rng.IntN(3) == 0 {
			continue
		}
		if oo := fd.ContainingOneof(); oo != nil && !oo.IsSynthetic() && m.WhichOneof(oo) != nil {
			continue
		}
		switch {
		case fd.IsList():
			n := rng.IntN(4)
			if rng.IntN(40) == 0 {
				n = 1100 // over the list limits
			}
			l := m.Mutable(fd).List()
			for range n {
				if fd.Kind() == protoreflect.MessageKind {
					l.Append(protoreflect.ValueOfMessage(randomMessage(rng, fd.Message(), depth+1, rackName).ProtoReflect()))
				} else {
					l.Append(randomScalar(rng, fd, rackName))
				}
			}
		case fd.IsMap():
		case fd.Kind() == protoreflect.MessageKind:
			m.Set(fd, protoreflect.ValueOfMessage(randomMessage(rng, fd.Message(), depth+1, rackName).ProtoReflect()))
		default:
			m.Set(fd, randomScalar(rng, fd, rackName))
		}
	}
	return m
}

var adversarialStrings = []string{
	"", "x", " ", "   \t", "a\x00b", "\x00", "%", "*", "_", "..", "{}", `{"note":"x"}`, "{oops", "null",
	"00000000-0000-0000-0000-000000000000", "not-a-uuid", "6ba7b810-9dad-11d1-80b4-00c04fd430c8",
	"aa:bb:cc:dd:ee:ff", "AA-BB-CC-DD-EE-FF", "zz:zz", "10.0.0.1", "999.1.1.1", "10.0.0.1/24", "::1", "fe80::1%eth0",
	"COMPONENT_TYPE_COMPUTE", "Compute", "power_on", "OPERATION_TYPE_POWER_CONTROL", "ASC", "DESC", "sideways",
	"1h", "-5s", "0 * * * *", "not cron", "UTC", "Mars/Olympus", "ünïcødé", "'; DROP TABLE rack; --",
}

func randomScalar(rng *rand.Rand, fd protoreflect.FieldDescriptor, rackName string) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.StringKind:
		switch rng.IntN(12) {
		case 0:
			return protoreflect.ValueOfString(strings.Repeat("n", 200+rng.IntN(5000)))
		case 1:
			return protoreflect.ValueOfString(rackName)
		case 2:
			if fd.Name() == "rule_definition_json" {
				return protoreflect.ValueOfString(`{"steps":[{"component_type":"Compute","stage":1,"timeout":"` + []string{"1h", "5s", "-1s", "1000000h"}[rng.IntN(4)] + `","main_operation":{"name":"PowerControl"}}]}`)
			}
		}
		return protoreflect.ValueOfString(adversarialStrings[rng.IntN(len(adversarialStrings))])
	case protoreflect.BytesKind:
		b := make([]byte, rng.IntN(64))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return protoreflect.ValueOfBytes(b)
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(rng.IntN(2) == 0)
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		if rng.IntN(6) == 0 {
			return protoreflect.ValueOfEnum(protoreflect.EnumNumber(999))
		}
		return protoreflect.ValueOfEnum(vals.Get(rng.IntN(vals.Len())).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32([]int32{0, 1, -1, 5, 100, 5000, math.MinInt32, math.MaxInt32}[rng.IntN(8)])
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64([]int64{0, 1, -1, 60, 1 << 40, math.MinInt64, math.MaxInt64}[rng.IntN(7)])
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32([]uint32{0, 1, 100, math.MaxUint32}[rng.IntN(4)])
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64([]uint64{0, 1, 100, math.MaxUint64}[rng.IntN(4)])
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32([]float32{0, -1, 0.5, 101, float32(math.Inf(1))}[rng.IntN(5)])
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64([]float64{0, -1, 0.5, 101, math.Inf(1), math.NaN()}[rng.IntN(6)])
	}
	return fd.Default()
}
