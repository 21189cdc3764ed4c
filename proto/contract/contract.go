// Package contract holds upstream's southbound wire facts (NICo Core's
// forge.Forge and the Powershelf Manager's v1.PowershelfManager, as a
// FileDescriptorSet: upstream-southbound.binpb, described in README.md
// beside it) and compares our own descriptors with them, field number by
// field number.
//
// Our protos (proto/forge, proto/psm) are our own files: they keep only the
// fields Flow uses and put Core's packages into one. What must not differ
// is the wire: for every message reachable from a method we call, each of
// our fields must be upstream's field of the same number, with the same
// kind, cardinality, presence and oneof membership, and each of our enum
// numbers must mean what upstream's does. Compare reports every place
// where that does not hold; upstream fields we leave out are reported too,
// as information (a decoder skips unknown fields).
package contract

import (
	_ "embed"
	"fmt"
	"sort"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// upstreamSet is ../shared/contract/upstream-southbound.binpb, copied here
// so that a clone of the repository alone builds and tests (README.md says
// how it is refreshed).
//
//go:embed upstream-southbound.binpb
var upstreamSet []byte

// UpstreamSHA256 is the checksum of the embedded facts file, as its README
// gives it; TestFactsFile checks the two agree.
const UpstreamSHA256 = "2d922859100082b53980ebcff9ee8a58390869d76b9653ef5b976762016c2afc"

// Upstream services, by full name.
const (
	CoreService = "forge.Forge"
	PSMService  = "v1.PowershelfManager"
)

var upstream = sync.OnceValues(func() (*protoregistry.Files, error) {
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(upstreamSet, &set); err != nil {
		return nil, fmt.Errorf("contract: decode upstream-southbound.binpb: %w", err)
	}
	files, err := protodesc.NewFiles(&set)
	if err != nil {
		return nil, fmt.Errorf("contract: load upstream-southbound.binpb: %w", err)
	}
	return files, nil
})

// Upstream returns upstream's files, loaded once from the embedded
// FileDescriptorSet. The registry is separate from Go's global one, so
// upstream's names (v1.PowershelfManager, forge.MachineId) never clash
// with ours.
func Upstream() (*protoregistry.Files, error) { return upstream() }

// Bytes returns the embedded FileDescriptorSet as stored.
func Bytes() []byte { return upstreamSet }

// Service returns upstream's service of the given full name.
func Service(name protoreflect.FullName) (protoreflect.ServiceDescriptor, error) {
	return find[protoreflect.ServiceDescriptor](name, "service")
}

// Message returns upstream's message of the given full name.
func Message(name protoreflect.FullName) (protoreflect.MessageDescriptor, error) {
	return find[protoreflect.MessageDescriptor](name, "message")
}

// find returns upstream's descriptor of the given full name, which must be
// a D (what names it in errors).
func find[D protoreflect.Descriptor](name protoreflect.FullName, what string) (D, error) {
	var zero D
	files, err := Upstream()
	if err != nil {
		return zero, err
	}
	d, err := files.FindDescriptorByName(name)
	if err != nil {
		return zero, fmt.Errorf("contract: upstream has no %s: %w", name, err)
	}
	typed, ok := d.(D)
	if !ok {
		return zero, fmt.Errorf("contract: upstream's %s is not a %s", name, what)
	}
	return typed, nil
}

// NewMessage returns an empty message of upstream's exact shape, for
// decoding our encodings into or building upstream's bytes.
func NewMessage(name protoreflect.FullName) (*dynamicpb.Message, error) {
	md, err := Message(name)
	if err != nil {
		return nil, err
	}
	return dynamicpb.NewMessage(md), nil
}

// Difference is one place where our descriptor and upstream's disagree.
type Difference struct {
	// Path names the place: the method, then each field on the way, as
	// "UpdateComponentFirmware.request.compute_trays(1).machine_ids(1)".
	Path string
	// What says what differs, naming both sides.
	What string
	// Breaking is true when the bytes differ in meaning on the wire: a
	// field number upstream does not have or reads as something else, a
	// kind, cardinality, presence or oneof difference, a method upstream
	// lacks or an enum number upstream does not know. Upstream fields and
	// enum values we leave out, and name-only differences, are not.
	Breaking bool
}

// String formats the difference for a test log.
func (d Difference) String() string {
	tag := "info"
	if d.Breaking {
		tag = "BREAKING"
	}
	return fmt.Sprintf("%s: %s: %s", tag, d.Path, d.What)
}

// CompareService walks every method of ours and upstream's method of the
// same name in parallel (request and response types, every field, nested
// message and enum, transitively) and returns every difference, sorted by
// path. Methods upstream has and we do not call are not reported.
func CompareService(ours, theirs protoreflect.ServiceDescriptor) []Difference {
	c := &comparer{seen: map[[2]protoreflect.FullName]bool{}}
	methods := ours.Methods()
	for i := range methods.Len() {
		m := methods.Get(i)
		um := theirs.Methods().ByName(m.Name())
		if um == nil {
			c.add(string(m.Name()), true, "upstream %s has no method %s", theirs.FullName(), m.Name())
			continue
		}
		if m.IsStreamingClient() != um.IsStreamingClient() || m.IsStreamingServer() != um.IsStreamingServer() {
			c.add(string(m.Name()), true, "streaming differs: ours client=%t server=%t, upstream client=%t server=%t",
				m.IsStreamingClient(), m.IsStreamingServer(), um.IsStreamingClient(), um.IsStreamingServer())
		}
		c.message(string(m.Name())+".request", m.Input(), um.Input())
		c.message(string(m.Name())+".response", m.Output(), um.Output())
	}
	sort.SliceStable(c.diffs, func(i, j int) bool { return c.diffs[i].Path < c.diffs[j].Path })
	return c.diffs
}

// Breaking returns the breaking differences of diffs.
func Breaking(diffs []Difference) []Difference {
	var out []Difference
	for _, d := range diffs {
		if d.Breaking {
			out = append(out, d)
		}
	}
	return out
}

type comparer struct {
	// seen holds the message pairs already walked: a pair reached by two
	// paths (HealthReport under machines, switches and shelves) is
	// reported once, and recursive types end.
	seen  map[[2]protoreflect.FullName]bool
	diffs []Difference
}

func (c *comparer) add(path string, breaking bool, format string, args ...any) {
	c.diffs = append(c.diffs, Difference{Path: path, What: fmt.Sprintf(format, args...), Breaking: breaking})
}

func (c *comparer) message(path string, ours, theirs protoreflect.MessageDescriptor) {
	key := [2]protoreflect.FullName{ours.FullName(), theirs.FullName()}
	if c.seen[key] {
		return
	}
	c.seen[key] = true
	if ours.Name() != theirs.Name() && !ours.IsMapEntry() {
		c.add(path, false, "message named %s here, %s upstream", ours.FullName(), theirs.FullName())
	}
	fields := ours.Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		fpath := fmt.Sprintf("%s.%s(%d)", path, f.Name(), f.Number())
		uf := theirs.Fields().ByNumber(f.Number())
		if uf == nil {
			if theirs.ReservedRanges().Has(f.Number()) {
				c.add(fpath, true, "upstream %s reserves field %d", theirs.FullName(), f.Number())
			} else {
				c.add(fpath, true, "upstream %s has no field %d", theirs.FullName(), f.Number())
			}
			continue
		}
		c.field(fpath, f, uf)
	}
	ufields := theirs.Fields()
	for i := range ufields.Len() {
		uf := ufields.Get(i)
		if fields.ByNumber(uf.Number()) == nil {
			c.add(fmt.Sprintf("%s.%s(%d)", path, uf.Name(), uf.Number()), false,
				"upstream-only field %s %s (not read or written by Flow)", label(uf), kind(uf))
		}
	}
}

func (c *comparer) field(path string, f, uf protoreflect.FieldDescriptor) {
	if f.Name() != uf.Name() {
		c.add(path, false, "field named %s here, %s upstream", f.Name(), uf.Name())
	}
	if f.IsMap() != uf.IsMap() || f.Cardinality() != uf.Cardinality() {
		c.add(path, true, "ours is %s %s, upstream's %s %s", label(f), kind(f), label(uf), kind(uf))
		return
	}
	if f.Kind() != uf.Kind() {
		c.add(path, true, "ours is %s, upstream's %s", kind(f), kind(uf))
		return
	}
	if !f.IsList() && !f.IsMap() && f.HasPresence() != uf.HasPresence() && f.Message() == nil {
		c.add(path, true, "presence differs: ours %s, upstream's %s (a zero value is %s)",
			presence(f), presence(uf), zeroSent(uf))
	}
	if (f.ContainingOneof() == nil || f.ContainingOneof().IsSynthetic()) != (uf.ContainingOneof() == nil || uf.ContainingOneof().IsSynthetic()) {
		c.add(path, true, "oneof membership differs: ours %s, upstream's %s", oneof(f), oneof(uf))
	}
	switch {
	case f.IsMap():
		c.field(path+".key", f.MapKey(), uf.MapKey())
		c.field(path+".value", f.MapValue(), uf.MapValue())
	case f.Enum() != nil:
		c.enum(path, f.Enum(), uf.Enum())
	case f.Message() != nil:
		c.message(path, f.Message(), uf.Message())
	}
}

func (c *comparer) enum(path string, ours, theirs protoreflect.EnumDescriptor) {
	key := [2]protoreflect.FullName{ours.FullName(), theirs.FullName()}
	if c.seen[key] {
		return
	}
	c.seen[key] = true
	values := ours.Values()
	for i := range values.Len() {
		v := values.Get(i)
		uv := theirs.Values().ByNumber(v.Number())
		if uv == nil {
			c.add(path, true, "enum %s: upstream %s has no value %d (ours %s)", ours.Name(), theirs.FullName(), v.Number(), v.Name())
			continue
		}
		if !sameEnumName(v.Name(), uv.Name()) {
			c.add(path, false, "enum %s: %d is %s here, %s upstream", ours.Name(), v.Number(), v.Name(), uv.Name())
		}
	}
	uvalues := theirs.Values()
	for i := range uvalues.Len() {
		uv := uvalues.Get(i)
		if values.ByNumber(uv.Number()) == nil {
			c.add(path, false, "enum %s: upstream-only value %s = %d", ours.Name(), uv.Name(), uv.Number())
		}
	}
}

// sameEnumName reports whether our value name is upstream's, allowing the
// prefix we add where two of Core's enums would clash in one package
// (COMPUTE_TRAY_COMPONENT_BMC for ComputeTrayComponent's BMC).
func sameEnumName(ours, theirs protoreflect.Name) bool {
	if ours == theirs {
		return true
	}
	o, t := normal(string(ours)), normal(string(theirs))
	return strings.HasSuffix(o, t)
}

func normal(s string) string { return strings.ToLower(strings.ReplaceAll(s, "_", "")) }

func label(f protoreflect.FieldDescriptor) string {
	switch {
	case f.IsMap():
		return "map"
	case f.IsList():
		return "repeated"
	case f.HasOptionalKeyword():
		return "optional"
	}
	return "singular"
}

func kind(f protoreflect.FieldDescriptor) string {
	switch {
	case f.IsMap():
		return fmt.Sprintf("<%s, %s>", kind(f.MapKey()), kind(f.MapValue()))
	case f.Message() != nil:
		return "message " + string(f.Message().FullName())
	case f.Enum() != nil:
		return "enum " + string(f.Enum().FullName())
	}
	return f.Kind().String()
}

func presence(f protoreflect.FieldDescriptor) string {
	if f.HasPresence() {
		return "explicit (optional)"
	}
	return "implicit"
}

func zeroSent(upstream protoreflect.FieldDescriptor) string {
	if upstream.HasPresence() {
		return "sent by upstream and meaningful to it, never sent by ours"
	}
	return "never sent by upstream, sent by ours"
}

func oneof(f protoreflect.FieldDescriptor) string {
	if o := f.ContainingOneof(); o != nil && !o.IsSynthetic() {
		return "in oneof " + string(o.Name())
	}
	return "not in a oneof"
}
