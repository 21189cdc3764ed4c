package ruledef

// PowerTransition reports whether an action a, on components of type ct,
// of a task of code is a power transition a feed's power budget admits
// (docs/operations.md "Feeds, loops and power budgets"): a PowerControl
// that powers on, restarts or resets (warm, or cold: the AC cycle), and
// the off steps of a cycle task (so the whole cycle holds the slot), or a
// compute tray's firmware update (it reboots). A power off, a
// decommission's, a leak response's, is never held.
func PowerTransition(a Action, code OperationCode, ct ComponentType) bool {
	switch a.Name {
	case ActionPowerControl:
		op := code
		if p, err := a.PowerControlParams(); err == nil && p.Operation != "" {
			op = p.Operation
		}
		cycle := code == CodeRestart || code == CodeForceRestart || code == CodeWarmReset || code == CodeColdReset
		return cycle || (op != CodePowerOff && op != CodeForcePowerOff)
	case ActionFirmwareControl:
		return ct == ComponentTypeCompute
	}
	return false
}
