package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// TestPrintReportVerification: a firmware step's read-back of the
// installed versions gets a line of its own; steps without one add none.
func TestPrintReportVerification(t *testing.T) {
	t.Parallel()
	rep, ok := taskReport(&flowv1.Task{Report: `{"version":1,"stages":[
		{"number":1,"status":"completed","steps":[{"component_type":"Compute","status":"completed","total_components":18,"completed_components":18,
			"verification":"installed firmware read back from Core: 18 of 18 at target (bmc 2.0)"}]},
		{"number":2,"status":"completed","steps":[{"component_type":"NVSwitch","status":"completed","total_components":9,"completed_components":9}]}]}`})
	require.True(t, ok)
	var buf strings.Builder
	printReport(&buf, rep)
	require.Contains(t, buf.String(), "verified: stage 1 Compute: installed firmware read back from Core: 18 of 18 at target (bmc 2.0)\n")
	require.Equal(t, 1, strings.Count(buf.String(), "verified:"))
}
