package telemetry

// Known holds the label values a server knows when it starts. Init exports
// every combination at zero, so each family is on the first scrape (a
// dashboard panel or a rate() alert has a series to read before the first
// event: the practice Prometheus's instrumentation guide recommends).
// Values that only an event reveals (a gRPC error code, a leak's final
// status) appear when they happen.
type Known struct {
	Operations []string            // task operation codes ("power_on")
	Actions    []string            // engine action kinds ("flow.power_control")
	JobKinds   []string            // River job kinds
	SystemJobs []string            // leader system jobs ("inventory-sync")
	Backends   map[string][]string // backend ("nico", "psm") → the methods its client calls
	Procedures []string            // RPC procedures served ("/v1.Flow/PowerOnRack")
	SyncParts  []string            // inventory-sync parts
	Prune      []string            // tables retention prunes
}

// Label values that are fixed by the code that counts them.
var (
	taskStatuses     = []string{"completed", "failed", "terminated"}
	stepOutcomes     = []string{"completed", "failed", "cancelled"}
	callOutcomes     = []string{"ok", "error"}
	scheduleOutcomes = []string{"submitted", "none_eligible", "refused", "not_due", "error"}
	syncTriggers     = []string{"schedule", "manual"}
	syncOutcomes     = []string{"ok", "partial", "error"}
	leakKinds        = []string{"compute", "nvswitch"}
	leakOutcomes     = []string{"power_off_sent", "power_off_failed", "recorded"}
)

// Init sets every known label combination of m's families to zero. It is
// safe on a nil m and may be called more than once.
func (m *Metrics) Init(k Known) {
	if m == nil {
		return
	}
	for _, op := range k.Operations {
		m.TasksSubmitted.WithLabelValues(op)
		m.TaskStartLatency.WithLabelValues(op)
		for _, st := range taskStatuses {
			m.TasksEnded.WithLabelValues(op, st)
			m.TaskDuration.WithLabelValues(op, st)
		}
	}
	for _, a := range k.Actions {
		m.StepDuration.WithLabelValues(a)
		m.StepCalls.WithLabelValues(a)
		m.CallDuration.WithLabelValues(a)
		for _, o := range stepOutcomes {
			m.StepsEnded.WithLabelValues(a, o)
		}
		for _, o := range callOutcomes {
			m.Calls.WithLabelValues(a, o)
		}
	}
	for _, kind := range k.JobKinds {
		m.JobWait.WithLabelValues(kind)
		m.JobRun.WithLabelValues(kind)
	}
	for backend, methods := range k.Backends {
		for _, method := range methods {
			m.BackendCalls.WithLabelValues(backend, method, "ok")
			m.BackendDuration.WithLabelValues(backend, method)
		}
	}
	for _, p := range k.Procedures {
		m.RPCs.WithLabelValues(p, "ok")
		m.RPCDuration.WithLabelValues(p)
	}
	for _, j := range k.SystemJobs {
		m.SystemJobDuration.WithLabelValues(j)
		m.SystemJobInterval.WithLabelValues(j)
		for _, o := range callOutcomes {
			m.SystemJobRuns.WithLabelValues(j, o)
		}
	}
	for _, table := range k.Prune {
		m.PruneDeleted.WithLabelValues(table)
		m.PruneOldestKept.WithLabelValues(table)
	}
	for _, o := range scheduleOutcomes {
		m.ScheduleFirings.WithLabelValues(o)
	}
	m.ScheduleFiringLag.WithLabelValues()
	for _, tr := range syncTriggers {
		m.SyncDuration.WithLabelValues(tr)
		for _, o := range syncOutcomes {
			m.SyncCycles.WithLabelValues(tr, o)
		}
	}
	for _, p := range k.SyncParts {
		m.SyncRowsChanged.WithLabelValues(p)
		m.SyncDrift.WithLabelValues(p)
	}
	m.Leak.Response.WithLabelValues("first_power_off", "called")
	for _, st := range taskStatuses {
		m.Leak.Response.WithLabelValues("completed", st)
	}
	for _, kind := range leakKinds {
		for _, o := range leakOutcomes {
			m.Leak.UnknownDevices.WithLabelValues(kind, o)
		}
	}
}
