package cli_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// TestCLISchedule drives `flow schedule …` against a real server with the
// simulators, by rack and schedule names.
func TestCLISchedule(t *testing.T) {
	t.Parallel()
	e, b := setupTaskCLI(t)
	r1, r2 := e.addRack(t, 61, rackOptions{off: true}), e.addRack(t, 62, rackOptions{off: true})

	out := b.mustFlow(t, "schedule", "create", "nightly", "--cron", "0 2 * * *", "--tz", "Europe/Berlin", r1.Name)
	require.Regexp(t, `(?m)^NAME\s+WHEN\s+OPERATION\s+OVERLAP\s+STATE\s+NEXT RUN\s+LAST RUN$`, out)
	require.Regexp(t, `nightly\s+cron "0 2 \* \* \*" Europe/Berlin\s+Power On\s+skip\s+active`, out)
	b.mustFlow(t, "schedule", "create", "six-hourly", "--every", "6h", "--op", "power-reset", "--force", "--queue", r1.Name, r2.Name)
	at := time.Now().Add(48 * time.Hour).Truncate(time.Second).Format(time.RFC3339)
	b.mustFlow(t, "schedule", "create", "later", "--at", at, "--op", "power-off", "--type", "compute", r2.Name)

	list := b.mustFlow(t, "schedule", "list")
	require.Contains(t, list, "six-hourly")
	require.Contains(t, list, "Power Reset (forced)")
	require.Contains(t, list, "queue")
	require.Len(t, strings.Split(list, "\n"), 4)
	onR2 := b.mustFlow(t, "schedule", "list", "--rack", r2.Name)
	require.NotContains(t, onR2, "nightly")

	b.mustFlow(t, "schedule", "pause", "nightly")
	require.Contains(t, b.mustFlow(t, "schedule", "get", "nightly"), "paused")
	require.NotContains(t, b.mustFlow(t, "schedule", "list", "--enabled"), "nightly")
	require.Contains(t, b.mustFlow(t, "schedule", "resume", "nightly"), "active")
	upd := b.mustFlow(t, "schedule", "update", "nightly", "--name", "nightly-utc", "--cron", "30 3 * * *", "--tz", "UTC")
	require.Regexp(t, `nightly-utc\s+cron "30 3 \* \* \*" UTC`, upd)
	requireFlowError(t, b, "nothing to change", "schedule", "update", "nightly-utc")
	requireFlowError(t, b, "schedule.spec.spec: interval must be greater than zero", "schedule", "update", "nightly-utc", "--every", "0s")
	requireFlowError(t, b, `no schedule is named "nope"`, "schedule", "get", "nope")
	requireFlowError(t, b, "want --every D, --cron EXPR or --at TIME", "schedule", "create", "x", r1.Name)

	// Scopes, by rack name.
	b.mustFlow(t, "schedule", "scope", "add", "nightly-utc", r2.Name)
	scopes := b.mustFlow(t, "schedule", "scope", "list", "nightly-utc")
	require.Contains(t, scopes, r1.Name)
	require.Contains(t, scopes, r2.Name)
	b.mustFlow(t, "schedule", "scope", "remove", "nightly-utc", r1.Name)
	requireFlowError(t, b, "last scope", "schedule", "scope", "remove", "nightly-utc", r2.Name)
	b.mustFlow(t, "schedule", "scope", "update", "nightly-utc", r1.Name, r2.Name)
	require.Len(t, strings.Split(b.mustFlow(t, "schedule", "scope", "list", "nightly-utc"), "\n"), 3)

	conflicts := b.mustFlow(t, "schedule", "conflicts", "--op", "firmware-upgrade", r2.Name)
	require.Contains(t, conflicts, "six-hourly")
	require.Contains(t, conflicts, "later")

	// Trigger fires now and prints the task IDs; the tasks complete.
	fastPowerOnRule(t, e.client())
	ids := strings.Fields(b.mustFlow(t, "schedule", "trigger", "nightly-utc"))
	require.Len(t, ids, 2)
	for _, id := range ids {
		b.mustFlow(t, "task", "watch", id, "--interval", "20ms")
	}
	require.Contains(t, b.mustFlow(t, "-o", "json", "schedule", "get", "nightly-utc"), `"lastRunAt"`)
	require.Contains(t, b.mustFlow(t, "schedule", "delete", "later"), "deleted schedule")
}

// fastPowerOnRule makes a power_on rule that verifies every 200ms the
// default, so that triggered tasks end quickly.
func fastPowerOnRule(t *testing.T, client flowv1connect.FlowClient) {
	t.Helper()
	step := func(ct string, stage int) string {
		return `{"component_type":"` + ct + `","stage":` + strconv.Itoa(stage) + `,"timeout":"5s","retry":{"max_attempts":3,"initial_interval":"100ms","backoff_coefficient":2},
			"main_operation":{"name":"PowerControl"},
			"post_operation":[{"name":"VerifyPowerStatus","timeout":"30s","poll_interval":"200ms","parameters":{"expected_status":"on"}}]}`
	}
	_, err := client.CreateOperationRule(context.Background(), &flowv1.CreateOperationRuleRequest{
		Name: "fast power on", OperationType: flowv1.OperationType_OPERATION_TYPE_POWER_CONTROL, OperationCode: "power_on", IsDefault: true,
		RuleDefinitionJson: `{"steps":[` + step("PowerShelf", 1) + `,` + step("NVSwitch", 2) + `,` + step("Compute", 3) + `]}`,
	})
	require.NoError(t, err)
}
