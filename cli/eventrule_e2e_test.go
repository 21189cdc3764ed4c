package cli_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/inventory"
)

// TestCLIEventRules drives `flow event-rule …` and `flow leak list` against
// a real server answering leaks through event rules every second.
func TestCLIEventRules(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, "flowconfig.yaml", "leak_detection_interval: 1s\ninventory_run_frequency: 1h\n")
	s := startServer(t, map[string]string{"FLOW_CONFIG_FILE": cfg, "FLOW_EVENT_RULE_LEAK_DETECTION_ENABLED": "true"})
	b := s.bundle()
	quiet := s.addRack(t, 71, rackOptions{linked: true})
	loud := s.addRack(t, 72, rackOptions{linked: true})

	list := b.mustFlow(t, "event-rule", "list")
	require.Regexp(t, `(?m)^ID\s+NAME\s+EVENT TYPE\s+ENABLED\s+KIND\s+ACTIONS$`, list)
	require.Regexp(t, `f34b87f7-cb1b-4b08-aa51-30c0b3b58680\s+Leakage response\s+hardware.leak.detected\s+yes\s+built-in\s+power_off_affected_components`, list)
	builtIn := b.mustFlow(t, "event-rule", "get", "built-in")
	require.Contains(t, builtIn, "power_off_affected_components: submit task force_power_off on affected_components (conflict queue)")

	created := b.mustFlow(t, "event-rule", "create", "drill", "--noop", "fire drill", "--description", "no power-offs during the drill")
	require.Contains(t, created, "Enabled:      no")
	require.Contains(t, created, "log_only: noop (fire drill)")
	file := writeFile(t, "rule.yaml", `name: two actions
eventType: hardware.leak.detected
actions:
  - name: note
    noop: {reason: seen}
  - name: off_switches
    condition: {componentTypes: [COMPONENT_TYPE_NVSWITCH], severities: [EVENT_RULE_SEVERITY_CRITICAL]}
    submitTask:
      targetStrategy: EVENT_RULE_TARGET_STRATEGY_RACK
      conflictStrategy: EVENT_RULE_CONFLICT_STRATEGY_REJECT
      operation: {powerControl: {operation: POWER_CONTROL_OPERATION_FORCE_POWER_OFF}}
`)
	two := b.mustFlow(t, "event-rule", "create", "-f", file)
	require.Contains(t, two, "off_switches: submit task force_power_off on rack (conflict reject) when critical, nvswitch")

	upd := b.mustFlow(t, "event-rule", "update", "drill", "--name", "drill-2", "--description", "renamed")
	require.Contains(t, upd, "Name:         drill-2")
	upd = b.mustFlow(t, "event-rule", "update", "two actions", "--power-off", "--target", "component", "--action-name", "just_it")
	require.Contains(t, upd, "just_it: submit task force_power_off on component (conflict queue)")
	require.NotContains(t, upd, "off_switches")
	requireFlowError(t, b, "one per call", "event-rule", "update", "drill-2", "--name", "x", "--noop", "y")
	requireFlowError(t, b, "actions[0].name: \"Bad-Name\" must be a lower-snake identifier", "event-rule", "create", "bad", "--noop", "x", "--action-name", "Bad-Name")
	requireFlowError(t, b, "want an action", "event-rule", "create", "bad")

	require.Contains(t, b.mustFlow(t, "event-rule", "enable", "drill-2"), "enabled event rule")
	bound := b.mustFlow(t, "event-rule", "bind", "drill-2", "--rack", quiet.Name)
	require.Regexp(t, `(?m)^ID\s+RULE\s+EVENT TYPE\s+SCOPE\n[0-9a-f-]{36}\s+drill-2\s+hardware.leak.detected\s+rack `+quiet.Name+`$`, bound, "names, not UUIDs")
	binding := b.mustFlow(t, "event-rule", "binding", "--rack", quiet.Name)
	require.Regexp(t, `drill-2\s+hardware.leak.detected\s+rack `+quiet.Name+`$`, binding)
	require.NotContains(t, binding, quiet.ID.String())
	require.Contains(t, b.mustFlow(t, "event-rule", "binding", "--rack", quiet.Name, "-o", "wide"), quiet.ID.String(), "-o wide adds the UUIDs")
	requireFlowError(t, b, "is taken by rule", "event-rule", "bind", "two actions", "--rack", quiet.Name)
	requireFlowError(t, b, "read-only", "event-rule", "bind", "built-in", "--site")
	requireFlowError(t, b, "want --site or --rack R", "event-rule", "binding")
	require.Contains(t, b.mustFlow(t, "event-rule", "effective", "--rack", quiet.Name), "Name:         drill-2")
	require.Contains(t, b.mustFlow(t, "event-rule", "effective", "--rack", loud.Name), "Leakage response")
	require.Contains(t, b.mustFlow(t, "event-rule", "list", "--enabled"), "drill-2")
	require.NotContains(t, b.mustFlow(t, "event-rule", "list", "--disabled"), "drill-2")

	// A leak on each rack: the quiet one's rule only records it; the loud
	// one's is powered off by the built-in.
	trayOf := func(r inventory.Rack) inventory.Component {
		for _, c := range r.Components {
			if c.Type == inventory.ComponentTypeCompute && c.Position.SlotID == 10 {
				return c
			}
		}
		t.Fatal("no tray in slot 10")
		return inventory.Component{}
	}
	require.NoError(t, s.sims.NICo.SetLeak(trayOf(quiet).ExternalID, true))
	require.NoError(t, s.sims.NICo.SetLeak(trayOf(loud).ExternalID, true))
	var leaks string
	defer func() {
		if t.Failed() {
			t.Logf("last flow leak list:\n%s", leaks)
		}
	}()
	require.Eventually(t, func() bool {
		leaks = b.mustFlow(t, "leak", "list")
		return len(regexp.MustCompile(`\sDETECTED\s`).FindAllString(leaks, -1)) == 2 && strings.Contains(leaks, "DOWN")
	}, 60*time.Second, 100*time.Millisecond, "flow leak list shows both leaks")
	require.Regexp(t, `(?m)^COMPONENT\s+RACK\s+TYPE\s+SLOT\s+LEAK\s+HANDLING\s+POWER$`, leaks)
	require.Regexp(t, trayOf(quiet).Name+`\s+`+quiet.Name+`\s+compute\s+10\s+DETECTED\s+NONE`, leaks)
	require.Regexp(t, trayOf(loud).Name+`\s+`+loud.Name+`\s+compute\s+10\s+DETECTED\s+(SHUTTING_DOWN|DOWN)`, leaks)
	require.Contains(t, leaks, loud.Name+"-ps-00", "the shelf below is covered by the response")
	var asJSON struct {
		Components []json.RawMessage `json:"components"`
	}
	require.NoError(t, json.Unmarshal([]byte(b.mustFlow(t, "leak", "list", "-o", "json")), &asJSON))
	require.NotEmpty(t, asJSON.Components)

	require.Equal(t, "unbound hardware.leak.detected at rack "+quiet.Name, b.mustFlow(t, "event-rule", "unbind", "--rack", quiet.Name))
	requireFlowError(t, b, "event rule binding not found", "event-rule", "binding", "--rack", quiet.Name)
	require.Contains(t, b.mustFlow(t, "event-rule", "delete", "drill-2"), "deleted event rule")
	requireFlowError(t, b, `no event rule is named "drill-2"`, "event-rule", "get", "drill-2")
}
