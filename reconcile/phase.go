package reconcile

import (
	"encoding/json"
	"strings"

	"github.com/nicoflow/flow/inventory"
)

// Operation phases (inventory.OperationStatus.Phase).
const (
	PhaseUnknown      = "unknown"
	PhaseInitializing = "initializing"
	PhaseReady        = "ready"
	PhaseInUse        = "in_use"
	PhaseError        = "error"
	PhaseDeleting     = "deleting"
)

// blockedWhenNotReady is what a component that is not ready blocks: every
// disruptive operation type the readiness gate knows. Upstream lets an
// unlisted (unknown) state block operations too; Flow does the same.
var blockedWhenNotReady = []string{"power_control", "firmware_control"}

var computePhases = map[string]string{
	"Ready": PhaseReady, "StartAssignmentCycle": PhaseReady,
	"Created": PhaseInitializing, "DPUDiscovering": PhaseInitializing, "DPUInitializing": PhaseInitializing,
	"HostInitializing": PhaseInitializing, "Measuring": PhaseInitializing, "PreAssignedMeasuring": PhaseInitializing,
	"PostAssignedMeasuring": PhaseInitializing, "BomValidating": PhaseInitializing,
	"Assigned": PhaseInUse, "WaitingForCleanup": PhaseInUse, "Reprovisioning": PhaseInUse, "HostReprovisioning": PhaseInUse,
	"ConfigureAstra": PhaseInUse, "BootConfiguring": PhaseInUse, "Maintenance": PhaseInUse,
	"RotatingBmc": PhaseInUse, "RotatingHostUefi": PhaseInUse, "RotatingDpuUefi": PhaseInUse, "RotatingNicLockdown": PhaseInUse,
	"Failed":          PhaseError,
	"Decommissioning": PhaseDeleting, "ForceDeletion": PhaseDeleting,
}

var switchPhases = map[string]string{
	"created": PhaseInitializing, "initializing": PhaseInitializing, "configuring": PhaseInitializing,
	"fetchinfo": PhaseInitializing, "validating": PhaseInitializing, "bomvalidating": PhaseInitializing,
	"ready":       PhaseReady,
	"rotatingbmc": PhaseInUse, "maintenance": PhaseInUse, "reprovisioning": PhaseInUse,
	"error":           PhaseError,
	"decommissioning": PhaseDeleting, "deleting": PhaseDeleting,
}

var shelfPhases = map[string]string{
	"initializing": PhaseInitializing, "fetchingdata": PhaseInitializing, "configuring": PhaseInitializing,
	"ready":       PhaseReady,
	"rotatingbmc": PhaseInUse, "maintenance": PhaseInUse, "reprovisioning": PhaseInUse,
	"error":           PhaseError,
	"decommissioning": PhaseDeleting, "deleting": PhaseDeleting,
}

// statusOf is a component's operation status from its Core state: the
// display state of a machine (matched on the text before the first "/" or
// "("), or the controller-state JSON's "state" tag of a switch or shelf.
// The reason is Core's state as given. Anything unlisted is unknown.
func statusOf(t inventory.ComponentType, state string) inventory.OperationStatus {
	var phase string
	switch t {
	case inventory.ComponentTypeCompute:
		head := state
		if i := strings.IndexAny(head, "/("); i >= 0 {
			head = head[:i]
		}
		phase = computePhases[strings.TrimSpace(head)]
	default:
		var v struct {
			State string `json:"state"`
		}
		if json.Unmarshal([]byte(state), &v) == nil {
			table := switchPhases
			if t == inventory.ComponentTypePowerShelf {
				table = shelfPhases
			}
			phase = table[strings.ToLower(v.State)]
		}
	}
	if phase == "" {
		phase = PhaseUnknown
	}
	st := inventory.OperationStatus{Phase: phase, Reason: state, Blocked: []string{}}
	if phase != PhaseReady {
		st.Blocked = append([]string(nil), blockedWhenNotReady...)
	}
	return st
}
