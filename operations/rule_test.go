package operations_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nicoflow/flow/operations/ruledef"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/operations"
)

// stepJSON builds one step around main (a JSON action object) with extra
// step fields spliced in.
func stepJSON(extra, main string) string {
	s := `{"component_type":"Compute","stage":1,"max_parallel":0`
	if extra != "" {
		s += "," + extra
	}
	if main != "" {
		s += `,"main_operation":` + main
	}
	return s + "}"
}

func defJSON(steps ...string) string {
	return `{"version":"v1","steps":[` + strings.Join(steps, ",") + `]}`
}

const (
	pcAction  = `{"name":"PowerControl"}`
	vpsAction = `{"name":"VerifyPowerStatus","timeout":"5m","poll_interval":"10s","parameters":{"expected_status":"on"}}`
)

func parseAndValidate(t *testing.T, doc string) error {
	t.Helper()
	d, err := ruledef.Parse([]byte(doc))
	if err != nil {
		return err
	}
	return d.Validate()
}

func TestValidateRuleDefinition(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, doc, wantErr string
	}{
		{"EmptySteps", `{"version":"v1","steps":[]}`, ""},
		{"NoVersion", `{"steps":[` + stepJSON("", pcAction) + `]}`, ""},
		{"LowercaseComponentTypes", defJSON(
			`{"component_type":"compute","stage":1,"main_operation":{"name":"PowerControl"}}`,
			`{"component_type":"nvswitch","stage":1,"main_operation":{"name":"PowerControl"}}`,
			`{"component_type":"POWERSHELF","stage":2,"main_operation":{"name":"PowerControl"}}`), ""},
		{"EveryUserAction", defJSON(stepJSON(`"timeout":"20m","retry":{"max_attempts":3,"initial_interval":"1s","backoff_coefficient":2,"max_interval":"1m"},"delay_after":"5s",
			"pre_operation":[
				{"name":"Sleep","parameters":{"duration":"30s"}},
				{"name":"Sleep","parameters":{"duration":10000000000}},
				{"name":"GetPowerStatus","timeout":"1m"},
				{"name":"VerifyReachability","timeout":"5m","poll_interval":"10s","parameters":{"component_types":["compute","NVSwitch"],"require_all":true}},
				{"name":"PowerControl","parameters":{"operation":"power_off"}},
				{"name":"VerifyPowerStatus","timeout":"5m","poll_interval":"10s","parameters":{"expected_status":"off"}}],
			"post_operation":[
				{"name":"FirmwareControl","parameters":{"operation":"upgrade","poll_interval":"2m","poll_timeout":"45m"}},
				{"name":"DecommissionControl"},
				{"name":"WaitDecommissioned","timeout":"4h","poll_interval":"30s"}]`, pcAction)), ""},
		{"SameTypeDifferentStages", defJSON(stepJSON("", pcAction), strings.Replace(stepJSON("", pcAction), `"stage":1`, `"stage":3`, 1)), ""},

		{"UnknownComponentType", defJSON(`{"component_type":"Toaster","stage":1,"main_operation":{"name":"PowerControl"}}`), "step 0: component type is unknown or invalid"},
		{"MissingComponentType", defJSON(`{"stage":1,"main_operation":{"name":"PowerControl"}}`), "step 0: component type is unknown or invalid"},
		{"StageZero", defJSON(strings.Replace(stepJSON("", pcAction), `"stage":1`, `"stage":0`, 1)), "step 0: stage must be >= 1, got 0"},
		{"NegativeMaxParallel", defJSON(strings.Replace(stepJSON("", pcAction), `"max_parallel":0`, `"max_parallel":-1`, 1)), "step 0: max_parallel must be >= 0, got -1"},
		{"NegativeTimeout", defJSON(stepJSON(`"timeout":"-1s"`, pcAction)), "step 0: timeout must be non-negative, got -1s"},
		{"NegativeDelay", defJSON(stepJSON(`"delay_after":"-2s"`, pcAction)), "step 0: delay_after must be non-negative, got -2s"},
		{"RetryAttempts", defJSON(stepJSON(`"retry":{"max_attempts":0,"initial_interval":"1s","backoff_coefficient":2}`, pcAction)), "step 0: invalid retry policy: max_attempts must be >= 1, got 0"},
		{"RetryInitial", defJSON(stepJSON(`"retry":{"max_attempts":1,"backoff_coefficient":2}`, pcAction)), "step 0: invalid retry policy: initial_interval is required and must be positive"},
		{"RetryBackoff", defJSON(stepJSON(`"retry":{"max_attempts":1,"initial_interval":"1s","backoff_coefficient":0.5}`, pcAction)), "step 0: invalid retry policy: backoff_coefficient must be >= 1.0, got 0.5"},
		{"RetryMaxInterval", defJSON(stepJSON(`"retry":{"max_attempts":1,"initial_interval":"1s","backoff_coefficient":1,"max_interval":"-1s"}`, pcAction)), "step 0: invalid retry policy: max_interval must be non-negative, got -1s"},
		{"NoMainOperation", defJSON(stepJSON("", "")), "step 0: main_operation is required"},
		{"DuplicateInStage", defJSON(stepJSON("", pcAction), stepJSON("", vpsAction)), "step 1: duplicate component type Compute in stage 1"},
		{"DuplicateCaseInsensitive", defJSON(stepJSON("", pcAction), `{"component_type":"COMPUTE","stage":1,"main_operation":{"name":"PowerControl"}}`), "step 1: duplicate component type Compute in stage 1"},

		{"UnknownAction", defJSON(stepJSON("", `{"name":"Reboot"}`)), "step 0: main_operation: unknown action: Reboot"},
		{"InternalBringUpControl", defJSON(stepJSON("", `{"name":"BringUpControl"}`)), "step 0: main_operation: unknown action: BringUpControl"},
		{"InternalWaitBringUp", defJSON(stepJSON("", `{"name":"WaitBringUp"}`)), "step 0: main_operation: unknown action: WaitBringUp"},
		{"InternalInjectExpectation", defJSON(stepJSON("", `{"name":"InjectExpectation"}`)), "step 0: main_operation: unknown action: InjectExpectation"},
		{"InternalVerifyFirmwareConsistency", defJSON(stepJSON("", `{"name":"VerifyFirmwareConsistency"}`)), "step 0: main_operation: unknown action: VerifyFirmwareConsistency"},
		{"NoExecutorVerifyFirmwareVersion", defJSON(stepJSON("", `{"name":"VerifyFirmwareVersion"}`)), "step 0: main_operation: unknown action: VerifyFirmwareVersion"},
		{"PreActionIndex", defJSON(stepJSON(`"pre_operation":[{"name":"PowerControl"},{"name":"Nope"}]`, pcAction)), "step 0: pre_operation[1]: unknown action: Nope"},
		{"PostActionIndex", defJSON(stepJSON(`"post_operation":[{"name":"Nope"}]`, pcAction)), "step 0: post_operation[0]: unknown action: Nope"},

		{"SleepNoDuration", defJSON(stepJSON("", `{"name":"Sleep"}`)), "step 0: main_operation: action Sleep missing required parameter: duration"},
		{"VPSNoExpected", defJSON(stepJSON("", `{"name":"VerifyPowerStatus","timeout":"1m","poll_interval":"1s"}`)), "step 0: main_operation: action VerifyPowerStatus missing required parameter: expected_status"},
		{"VPSNoTimeout", defJSON(stepJSON("", `{"name":"VerifyPowerStatus","poll_interval":"1s","parameters":{"expected_status":"on"}}`)), "step 0: main_operation: action VerifyPowerStatus requires timeout"},
		{"VPSNoPoll", defJSON(stepJSON("", `{"name":"VerifyPowerStatus","timeout":"1m","parameters":{"expected_status":"on"}}`)), "step 0: main_operation: action VerifyPowerStatus requires poll_interval"},
		{"VPSBadExpected", defJSON(stepJSON("", `{"name":"VerifyPowerStatus","timeout":"1m","poll_interval":"1s","parameters":{"expected_status":"On"}}`)), "step 0: main_operation: action VerifyPowerStatus: expected_status must be 'on' or 'off', got 'On'"},
		{"VRNoTypes", defJSON(stepJSON("", `{"name":"VerifyReachability","timeout":"1m","poll_interval":"1s"}`)), "step 0: main_operation: action VerifyReachability missing required parameter: component_types"},
		{"VRNoTimeout", defJSON(stepJSON("", `{"name":"VerifyReachability","poll_interval":"1s","parameters":{"component_types":["Compute"]}}`)), "step 0: main_operation: action VerifyReachability requires timeout"},
		{"VRNoPoll", defJSON(stepJSON("", `{"name":"VerifyReachability","timeout":"1m","parameters":{"component_types":["Compute"]}}`)), "step 0: main_operation: action VerifyReachability requires poll_interval"},
		{"VRBadType", defJSON(stepJSON("", `{"name":"VerifyReachability","timeout":"1m","poll_interval":"1s","parameters":{"component_types":["Compute","Fridge"]}}`)), "step 0: main_operation: action VerifyReachability: invalid component type: Fridge"},
		{"GetPowerStatusNoTimeout", defJSON(stepJSON("", `{"name":"GetPowerStatus"}`)), "step 0: main_operation: action GetPowerStatus requires timeout"},
		{"WaitDecommissionedNoTimeout", defJSON(stepJSON("", `{"name":"WaitDecommissioned","poll_interval":"1s"}`)), "step 0: main_operation: action WaitDecommissioned requires timeout"},
		{"WaitDecommissionedNoPoll", defJSON(stepJSON("", `{"name":"WaitDecommissioned","timeout":"1h"}`)), "step 0: main_operation: action WaitDecommissioned requires poll_interval"},
		{"PowerControlBadOperation", defJSON(stepJSON("", `{"name":"PowerControl","parameters":{"operation":"upgrade"}}`)), "step 0: main_operation: action PowerControl: unrecognized operation upgrade"},
		{"FirmwareControlBadOperation", defJSON(stepJSON("", `{"name":"FirmwareControl","parameters":{"operation":"power_on"}}`)), "step 0: main_operation: action FirmwareControl: unrecognized operation power_on"},
		{"ParameterNotAccepted", defJSON(stepJSON("", `{"name":"Sleep","parameters":{"duration":"1s","expected_status":"on"}}`)), "step 0: main_operation: action Sleep does not accept parameter: expected_status"},
		{"NegativeSleep", defJSON(stepJSON("", `{"name":"Sleep","parameters":{"duration":"-1s"}}`)), "step 0: main_operation: action Sleep: duration must be non-negative"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := parseAndValidate(t, tt.doc)
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.ErrorIs(t, err, operations.ErrInvalidRule)
			var ve *operations.ValidationError
			require.True(t, errors.As(err, &ve))
			require.Equal(t, "rule_definition_json", ve.Field)
			require.Equal(t, tt.wantErr, ve.Msg)
		})
	}
}

func TestValidateRuleHeader(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, rule string
		typ        operations.OperationType
		code       operations.OperationCode
		field, msg string
	}{
		{"OK", "r", operations.OperationTypePowerControl, operations.CodeWarmReset, "", ""},
		{"NoName", " ", operations.OperationTypePowerControl, operations.CodePowerOn, "name", "rule name is required"},
		{"BadType", "r", "reboot", operations.CodePowerOn, "operation_type", "invalid operation type: reboot"},
		{"CodeOfOtherType", "r", operations.OperationTypeFirmwareControl, operations.CodePowerOn, "operation_code", "invalid operation code 'power_on' for operation type 'firmware_control'"},
		{"EmptyCode", "r", operations.OperationTypePowerControl, "", "operation_code", "invalid operation code '' for operation type 'power_control'"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := operations.ValidateRuleHeader(tt.rule, tt.typ, tt.code)
			if tt.field == "" {
				require.NoError(t, err)
				return
			}
			var ve *operations.ValidationError
			require.True(t, errors.As(err, &ve), "%v", err)
			require.Equal(t, tt.field, ve.Field)
			require.Equal(t, tt.msg, ve.Msg)
		})
	}
}

func TestOperationCodes(t *testing.T) {
	t.Parallel()
	want := map[operations.OperationType][]operations.OperationCode{
		"power_control":      {"power_on", "force_power_on", "power_off", "force_power_off", "restart", "force_restart", "warm_reset", "cold_reset"},
		"firmware_control":   {"upgrade", "downgrade", "rollback"},
		"bring_up":           {"bring_up", "ingest"},
		"decommission":       {"decommission"},
		"inject_expectation": {"inject_expectation"},
	}
	require.Len(t, operations.OperationTypes(), len(want))
	for _, typ := range operations.OperationTypes() {
		require.Equal(t, want[typ], typ.Codes(), typ)
	}
	require.False(t, operations.OperationType("unknown").Valid())
}

func TestRuleDefinitionVersions(t *testing.T) {
	t.Parallel()
	step := stepJSON("", pcAction)
	for _, tt := range []struct {
		name, doc, wantErr string
	}{
		{"Empty", `{"steps":[` + step + `]}`, ""},
		{"Null", `{"version":null,"steps":[` + step + `]}`, ""},
		{"V1", `{"version":"v1","steps":[` + step + `]}`, ""},
		{"V2", `{"version":"v2","steps":[` + step + `]}`, "unsupported rule definition version: v2 (current version: v1)"},
		{"V0", `{"version":"v0","steps":[]}`, "unsupported rule definition version: v0 (current version: v1)"},
		{"Malformed", `{"version":"v1","steps":[`, "malformed rule definition: "},
		{"NotAnObject", `[1,2]`, "rule definition must be a JSON object"},
		{"Blank", `  `, "rule definition is required"},
		{"UnknownField", `{"version":"v1","steps":[],"stepz":[]}`, "malformed rule definition: json: unknown field \"stepz\""},
		{"WrongType", `{"version":"v1","steps":[{"component_type":"Compute","stage":"one"}]}`, "malformed rule definition: "},
		{"BadDuration", defJSON(stepJSON(`"timeout":"5 minutes"`, pcAction)), "malformed rule definition: invalid duration \"5 minutes\""},
		{"TrailingData", `{"steps":[]} {}`, "malformed rule definition: invalid character '{' after top-level value"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d, err := ruledef.Parse([]byte(tt.doc))
			if tt.wantErr == "" {
				require.NoError(t, err)
				require.Equal(t, "v1", d.Version)
				require.Len(t, d.Steps, 1)
				return
			}
			var ve *operations.ValidationError
			require.True(t, errors.As(err, &ve), "%v", err)
			require.Equal(t, "rule_definition_json", ve.Field)
			require.True(t, strings.HasPrefix(ve.Msg, tt.wantErr), "got %q, want prefix %q", ve.Msg, tt.wantErr)
		})
	}

	// Validate rejects an explicit other version set in Go too.
	err := ruledef.Definition{Version: "v9"}.Validate()
	require.EqualError(t, err, "rule_definition_json: unsupported rule definition version: v9 (current version: v1)")
}

func TestRuleDefinitionRoundTrip(t *testing.T) {
	t.Parallel()
	doc := defJSON(stepJSON(`"timeout":"20m","retry":{"max_attempts":3,"initial_interval":"1s","backoff_coefficient":2},
		"pre_operation":[{"name":"Sleep","parameters":{"duration":1500000000}}],
		"post_operation":[{"name":"VerifyReachability","timeout":"5m","poll_interval":"10s","parameters":{"component_types":["powershelf"],"require_all":false}}]`,
		`{"name":"PowerControl","parameters":{"operation":"power_on"}}`))
	d, err := ruledef.Parse([]byte(doc))
	require.NoError(t, err)
	require.NoError(t, d.Validate())
	raw, err := json.Marshal(d)
	require.NoError(t, err)
	// Durations come back as Go strings, component types canonical.
	require.Contains(t, string(raw), `"duration":"1.5s"`)
	require.Contains(t, string(raw), `"component_types":["PowerShelf"]`)
	require.Contains(t, string(raw), `"require_all":false`)
	again, err := ruledef.Parse(raw)
	require.NoError(t, err)
	require.Equal(t, d, again)

	empty, err := json.Marshal(ruledef.Definition{})
	require.NoError(t, err)
	require.JSONEq(t, `{"version":"v1","steps":[]}`, string(empty))
}

func TestDuration(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{`"90s"`, 90 * time.Second, false},
		{`"1h2m"`, time.Hour + 2*time.Minute, false},
		{`10000000000`, 10 * time.Second, false},
		{`1e9`, time.Second, false},
		{`0`, 0, false},
		{`1.5`, 0, true},
		{`"ten"`, 0, true},
		{`true`, 0, true},
	} {
		var d ruledef.Duration
		err := json.Unmarshal([]byte(tt.in), &d)
		if tt.wantErr {
			require.Error(t, err, tt.in)
			continue
		}
		require.NoError(t, err, tt.in)
		require.Equal(t, tt.want, d.Std(), tt.in)
	}
}

func TestTypedParams(t *testing.T) {
	t.Parallel()
	d, err := ruledef.Parse([]byte(defJSON(stepJSON(`"pre_operation":[
		{"name":"Sleep","parameters":{"duration":"30s"}},
		{"name":"VerifyPowerStatus","timeout":"5m","poll_interval":"10s","parameters":{"expected_status":"off"}},
		{"name":"VerifyReachability","timeout":"2m","poll_interval":"5s","parameters":{"component_types":["nvswitch"],"require_all":true}},
		{"name":"GetPowerStatus","timeout":"1m"},
		{"name":"FirmwareControl"},
		{"name":"WaitDecommissioned","timeout":"1h","poll_interval":"1m"}]`,
		`{"name":"PowerControl","parameters":{"operation":"force_power_off"}}`))))
	require.NoError(t, err)
	require.NoError(t, d.Validate())
	acts := d.Steps[0].Actions()
	require.Len(t, acts, 7)

	sleep, err := acts[0].SleepParams()
	require.NoError(t, err)
	require.Equal(t, ruledef.SleepParams{Duration: 30 * time.Second}, sleep)

	vps, err := acts[1].VerifyPowerStatusParams()
	require.NoError(t, err)
	require.Equal(t, ruledef.VerifyPowerStatusParams{Expected: ruledef.PowerStatusOff, Timeout: 5 * time.Minute, PollInterval: 10 * time.Second}, vps)

	vr, err := acts[2].VerifyReachabilityParams()
	require.NoError(t, err)
	require.Equal(t, ruledef.VerifyReachabilityParams{ComponentTypes: []operations.ComponentType{operations.ComponentTypeNVSwitch}, RequireAll: true, Timeout: 2 * time.Minute, PollInterval: 5 * time.Second}, vr)

	gps, err := acts[3].GetPowerStatusParams()
	require.NoError(t, err)
	require.Equal(t, time.Minute, gps.Timeout)

	fw, err := acts[4].FirmwareControlParams()
	require.NoError(t, err)
	require.Equal(t, ruledef.FirmwareControlParams{PollInterval: 2 * time.Minute, PollTimeout: 30 * time.Minute}, fw)

	wd, err := acts[5].WaitParams()
	require.NoError(t, err)
	require.Equal(t, ruledef.WaitParams{Timeout: time.Hour, PollInterval: time.Minute}, wd)

	pc, err := acts[6].PowerControlParams()
	require.NoError(t, err)
	require.Equal(t, operations.CodeForcePowerOff, pc.Operation)

	_, err = acts[0].PowerControlParams()
	require.EqualError(t, err, "action Sleep is not PowerControl")

	// Step defaults.
	require.Equal(t, ruledef.DefaultStepCallTimeout, d.Steps[0].CallTimeout())
	require.Equal(t, ruledef.DefaultRetryPolicy, d.Steps[0].RetryPolicy())
}

func TestStages(t *testing.T) {
	t.Parallel()
	d, err := ruledef.Parse([]byte(defJSON(
		strings.Replace(stepJSON("", pcAction), `"stage":1`, `"stage":5`, 1),
		`{"component_type":"NVSwitch","stage":2,"main_operation":{"name":"PowerControl"}}`,
		`{"component_type":"PowerShelf","stage":5,"main_operation":{"name":"PowerControl"}}`)))
	require.NoError(t, err)
	stages := d.Stages()
	require.Len(t, stages, 2)
	require.Equal(t, 2, stages[0].Number)
	require.Equal(t, 5, stages[1].Number)
	require.Equal(t, operations.ComponentTypeCompute, stages[1].Steps[0].ComponentType)
	require.Equal(t, operations.ComponentTypePowerShelf, stages[1].Steps[1].ComponentType)
	require.True(t, d.HasStepFor([]operations.ComponentType{operations.ComponentTypeNVSwitch}))
	require.False(t, d.HasStepFor([]operations.ComponentType{operations.ComponentTypeCDU}))
}

func TestStepBudget(t *testing.T) {
	t.Parallel()
	powerOn, ok := operations.BuiltinRule(operations.OperationTypePowerControl, operations.CodePowerOn)
	require.True(t, ok)
	ps := powerOn.Definition.Steps[0] // 15m; 3/5s/2; post VPS 5m
	// (15m·3 + 5s·2)·1 + 5m + 2m
	require.Equal(t, 45*time.Minute+10*time.Second+7*time.Minute, ps.Budget(4))

	s := ruledef.Step{
		MaxParallel:   4,
		MainOperation: ruledef.Action{Name: ruledef.ActionPowerControl},
		PostOperation: []ruledef.Action{
			{Name: ruledef.ActionVerifyPowerStatus, Timeout: ruledef.Duration(time.Minute)},
			{Name: ruledef.ActionSleep, Timeout: ruledef.Duration(time.Minute)},
		},
	}
	require.Equal(t, 1, s.Batches(s.MainOperation, 4))
	require.Equal(t, 3, s.Batches(s.MainOperation, 9))
	require.Equal(t, 1, s.Batches(s.PostOperation[1], 9), "Sleep runs once")
	// No timeout, no retry: 30m × 3 batches + 1m × 3 + 1m × 1 + 2m.
	require.Equal(t, 90*time.Minute+3*time.Minute+time.Minute+2*time.Minute, s.Budget(9))
	s.MaxParallel = 0
	require.Equal(t, 1, s.Batches(s.MainOperation, 100))
}
