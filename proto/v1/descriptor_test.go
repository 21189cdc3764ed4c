// Package v1_test checks the compiled v1.Flow descriptor against the wire
// contract of spec/api.md with the newest upstream's additions
// (spec/upstream-delta.md §2): counts, every field's number, label and type,
// every enum value and every method's signature.
package v1_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/reflect/protoreflect"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

type specField struct {
	message, name string
	number        int
	label, typ    string
}

type specEnumValue struct {
	enum, name string
	number     int
}

type specMethod struct{ name, request, response string }

func file() protoreflect.FileDescriptor { return flowv1.File_flow_proto }

func TestCounts(t *testing.T) {
	t.Parallel()
	fd := file()
	require.Equal(t, protoreflect.FullName("v1"), fd.Package())
	require.Equal(t, 1, fd.Services().Len())
	require.Equal(t, protoreflect.FullName("v1.Flow"), fd.Services().Get(0).FullName())
	require.Equal(t, 76, fd.Services().Get(0).Methods().Len())
	require.Equal(t, 203, fd.Messages().Len())

	enums, values, fields := fd.Enums().Len(), 0, 0
	for i := range fd.Enums().Len() {
		values += fd.Enums().Get(i).Values().Len()
	}
	for i := range fd.Messages().Len() {
		m := fd.Messages().Get(i)
		require.Zero(t, m.Messages().Len(), "%s: no nested messages in the contract", m.FullName())
		fields += m.Fields().Len()
		enums += m.Enums().Len()
		for j := range m.Enums().Len() {
			values += m.Enums().Get(j).Values().Len()
		}
	}
	require.Equal(t, 29, enums)
	require.Equal(t, 137, values)
	require.Equal(t, 557, fields)
	require.Len(t, specFields, 557)
	require.Len(t, specEnumValues, 137)
	require.Len(t, specMethods, 76)
}

func TestFields(t *testing.T) {
	t.Parallel()
	fd := file()
	for _, f := range specFields {
		t.Run(f.message+"."+f.name, func(t *testing.T) {
			md := fd.Messages().ByName(protoreflect.Name(f.message))
			require.NotNil(t, md, "message %s", f.message)
			field := md.Fields().ByName(protoreflect.Name(f.name))
			require.NotNil(t, field, "field %s.%s", f.message, f.name)
			require.EqualValues(t, f.number, field.Number(), "number of %s.%s", f.message, f.name)
			require.Equal(t, f.label, labelOf(field), "label of %s.%s", f.message, f.name)
			require.Equal(t, f.typ, typeOf(field), "type of %s.%s", f.message, f.name)
		})
	}
}

func TestEveryDescriptorFieldIsInSpec(t *testing.T) {
	t.Parallel()
	want := map[string]bool{}
	for _, f := range specFields {
		want[f.message+"."+f.name] = true
	}
	fd := file()
	for i := range fd.Messages().Len() {
		m := fd.Messages().Get(i)
		for j := range m.Fields().Len() {
			key := string(m.Name()) + "." + string(m.Fields().Get(j).Name())
			require.True(t, want[key], "%s is not in spec/api.md", key)
		}
	}
}

func TestEnumValues(t *testing.T) {
	t.Parallel()
	fd := file()
	for _, v := range specEnumValues {
		var ed protoreflect.EnumDescriptor
		if parent, nested, ok := strings.Cut(v.enum, "."); ok {
			md := fd.Messages().ByName(protoreflect.Name(parent))
			require.NotNil(t, md, v.enum)
			ed = md.Enums().ByName(protoreflect.Name(nested))
		} else {
			ed = fd.Enums().ByName(protoreflect.Name(v.enum))
		}
		require.NotNil(t, ed, "enum %s", v.enum)
		ev := ed.Values().ByName(protoreflect.Name(v.name))
		require.NotNil(t, ev, "value %s.%s", v.enum, v.name)
		require.EqualValues(t, v.number, ev.Number(), "%s.%s", v.enum, v.name)
	}
}

func TestMethods(t *testing.T) {
	t.Parallel()
	svc := file().Services().Get(0)
	for i, m := range specMethods {
		md := svc.Methods().Get(i)
		require.Equal(t, m.name, string(md.Name()), "method %d in declaration order", i)
		require.Equal(t, qualify(m.request), string(md.Input().FullName()), m.name)
		require.Equal(t, qualify(m.response), string(md.Output().FullName()), m.name)
		require.False(t, md.IsStreamingClient() || md.IsStreamingServer(), m.name)
	}
}

func TestReserved(t *testing.T) {
	t.Parallel()
	md := file().Messages().ByName("EventRuleSubmitTaskAction")
	for _, n := range []protoreflect.FieldNumber{1, 2, 3} {
		require.True(t, md.ReservedRanges().Has(n), "field %d reserved", n)
	}
	for _, n := range []protoreflect.Name{"operation_type", "operation_code", "operation_payload_json"} {
		require.True(t, md.ReservedNames().Has(n), "name %s reserved", n)
	}
}

func qualify(name string) string {
	if strings.HasPrefix(name, "google.") {
		return name
	}
	return "v1." + name
}

// labelOf renders a field's label the way spec/api.md writes it.
func labelOf(f protoreflect.FieldDescriptor) string {
	switch {
	case f.IsList():
		return "repeated"
	case f.HasOptionalKeyword():
		return "optional"
	case f.ContainingOneof() != nil:
		return "oneof"
	}
	return "singular"
}

// typeOf renders a field's type the way spec/api.md writes it.
func typeOf(f protoreflect.FieldDescriptor) string {
	switch f.Kind() {
	case protoreflect.MessageKind:
		return strings.TrimPrefix(string(f.Message().FullName()), "v1.")
	case protoreflect.EnumKind:
		return strings.TrimPrefix(string(f.Enum().FullName()), "v1.")
	}
	return f.Kind().String()
}
