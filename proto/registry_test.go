package proto_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	forgepb "github.com/nicoflow/flow/proto/gen/forge"
	psmv1 "github.com/nicoflow/flow/proto/gen/psm/v1"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// TestRegistryNoCollision checks that Flow's v1 package and PSM's v1 package
// live side by side in one Go protobuf registry.
func TestRegistryNoCollision(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"v1.Flow", "v1.PowershelfManager", "forge.Forge"} {
		_, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
		require.NoError(t, err, name)
	}
	require.Equal(t, "v1.PowerShelf", string((&psmv1.PowerShelf{}).ProtoReflect().Descriptor().FullName()))
	require.Equal(t, "v1.BuildInfo", string((&flowv1.BuildInfo{}).ProtoReflect().Descriptor().FullName()))
	require.Equal(t, "forge.BuildInfo", string((&forgepb.BuildInfo{}).ProtoReflect().Descriptor().FullName()))
}
