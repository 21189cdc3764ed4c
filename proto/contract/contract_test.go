package contract_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/nicoflow/flow/proto/contract"
	forgepb "github.com/nicoflow/flow/proto/gen/forge"
	psmv1 "github.com/nicoflow/flow/proto/gen/psm/v1"
)

// sharedFacts is the workplace's copy of the facts file, beside the
// project; where it exists it must be the one embedded here.
const sharedFacts = "../../../shared/contract/upstream-southbound.binpb"

func TestFactsFile(t *testing.T) {
	t.Parallel()
	sum := sha256.Sum256(contract.Bytes())
	require.Equal(t, contract.UpstreamSHA256, hex.EncodeToString(sum[:]), "upstream-southbound.binpb changed: update UpstreamSHA256 and README.md together")
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	require.Contains(t, string(readme), contract.UpstreamSHA256, "README.md names another checksum")
	if shared, err := os.ReadFile(sharedFacts); err == nil {
		require.Equal(t, shared, contract.Bytes(), "%s differs from the embedded copy: copy it (and its README.md) into proto/contract", sharedFacts)
	}
}

// ourServices are the two southbound services Flow calls, ours and
// upstream's by name.
var ourServices = []struct {
	name     protoreflect.FullName
	ours     protoreflect.ServiceDescriptor
	upstream protoreflect.FullName
}{
	{"forge.Forge", forgepb.File_forge_forge_proto.Services().ByName("Forge"), contract.CoreService},
	{"v1.PowershelfManager", psmv1.File_psm_v1_powershelf_manager_proto.Services().ByName("PowershelfManager"), contract.PSMService},
}

// TestSouthboundContract is the wire contract with NICo Core and PSM: for
// every method of ours, its request and response are walked beside
// upstream's, and any wire-level difference fails the test, named by
// method and field path. Upstream-only fields are logged, as information.
func TestSouthboundContract(t *testing.T) {
	t.Parallel()
	for _, s := range ourServices {
		t.Run(string(s.name), func(t *testing.T) {
			t.Parallel()
			require.NotNil(t, s.ours)
			up, err := contract.Service(s.upstream)
			require.NoError(t, err)
			diffs := contract.CompareService(s.ours, up)
			info := 0
			for _, d := range diffs {
				if d.Breaking {
					t.Errorf("%s", d)
				} else {
					info++
					if testing.Verbose() {
						t.Logf("%s", d)
					}
				}
			}
			t.Logf("%d methods compared with upstream %s; %d informational differences (run with -v to list them)",
				s.ours.Methods().Len(), s.upstream, info)
		})
	}
}

// TestUpstreamNames: our messages and fields carry upstream's names (short
// names: our files put upstream's common and site_explorer types in our
// own packages). Names do not reach the wire, but a reader comparing our
// protos with upstream's should find the same words.
func TestUpstreamNames(t *testing.T) {
	t.Parallel()
	for _, s := range ourServices {
		up, err := contract.Service(s.upstream)
		require.NoError(t, err)
		for _, d := range contract.CompareService(s.ours, up) {
			if strings.Contains(d.What, " named ") {
				t.Errorf("%s", d)
			}
		}
	}
}

// TestCompareCatches breaks our forge.proto's descriptor in memory, one
// way at a time, and checks that the comparison names the broken place:
// the contract test above can fail.
func TestCompareCatches(t *testing.T) {
	t.Parallel()
	up, err := contract.Service(contract.CoreService)
	require.NoError(t, err)
	for _, tt := range []struct {
		name   string
		break_ func(t *testing.T, fd *descriptorpb.FileDescriptorProto)
		path   string
		what   string
	}{
		{
			name: "FieldNumber",
			break_: func(t *testing.T, fd *descriptorpb.FileDescriptorProto) {
				field(t, fd, "UpdateComputeTrayFirmwareTarget", "components").Number = ptr[int32](9)
			},
			path: "UpdateComponentFirmware.request.compute_trays(1).components(9)",
			what: "has no field 9",
		},
		{
			name: "BareRepeatedForList",
			break_: func(t *testing.T, fd *descriptorpb.FileDescriptorProto) {
				f := field(t, fd, "UpdateComputeTrayFirmwareTarget", "machine_ids")
				f.Label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
				f.TypeName = ptr(".forge.MachineId")
			},
			path: "UpdateComponentFirmware.request.compute_trays(1).machine_ids(1)",
			what: "ours is repeated message forge.MachineId, upstream's singular message common.MachineIdList",
		},
		{
			name: "ScalarKind",
			break_: func(t *testing.T, fd *descriptorpb.FileDescriptorProto) {
				field(t, fd, "UpdateComponentFirmwareRequest", "target_version").Type = descriptorpb.FieldDescriptorProto_TYPE_BYTES.Enum()
			},
			path: "UpdateComponentFirmware.request.target_version(4)",
			what: "ours is bytes, upstream's string",
		},
		{
			name: "Presence",
			break_: func(t *testing.T, fd *descriptorpb.FileDescriptorProto) {
				f := field(t, fd, "BmcEndpointRequest", "mac_address")
				f.Proto3Optional = nil
				f.OneofIndex = nil
				for _, m := range fd.MessageType {
					if m.GetName() == "BmcEndpointRequest" {
						m.OneofDecl = nil
					}
				}
			},
			path: "AllowIngestionAndPowerOn.request.mac_address(2)",
			what: "presence differs",
		},
		{
			name: "EnumNumber",
			break_: func(t *testing.T, fd *descriptorpb.FileDescriptorProto) {
				for _, e := range fd.EnumType {
					if e.GetName() == "SystemPowerControl" {
						e.Value = append(e.Value, &descriptorpb.EnumValueDescriptorProto{Name: ptr("SYSTEM_POWER_CONTROL_BOGUS"), Number: ptr[int32](42)})
						return
					}
				}
				t.Fatal("no enum SystemPowerControl")
			},
			path: "ComponentPowerControl.request.action(4)",
			what: "has no value 42",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fd := protodesc.ToFileDescriptorProto(forgepb.File_forge_forge_proto)
			tt.break_(t, fd)
			broken, err := protodesc.NewFile(fd, protoregistry.GlobalFiles)
			require.NoError(t, err)
			diffs := contract.Breaking(contract.CompareService(broken.Services().ByName("Forge"), up))
			require.NotEmpty(t, diffs)
			var found []string
			for _, d := range diffs {
				found = append(found, d.String())
				if d.Path == tt.path && strings.Contains(d.What, tt.what) {
					return
				}
			}
			t.Fatalf("no breaking difference at %s (%q); found:\n%s", tt.path, tt.what, strings.Join(found, "\n"))
		})
	}
}

func field(t *testing.T, fd *descriptorpb.FileDescriptorProto, message, name string) *descriptorpb.FieldDescriptorProto {
	t.Helper()
	for _, m := range fd.MessageType {
		if m.GetName() != message {
			continue
		}
		for _, f := range m.Field {
			if f.GetName() == name {
				return f
			}
		}
	}
	t.Fatalf("no field %s.%s in our forge.proto", message, name)
	return nil
}

func ptr[T any](v T) *T { return &v }
