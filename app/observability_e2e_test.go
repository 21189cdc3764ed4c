package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/nicoflow/flow/inventory"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/sim"
)

// withAdmin serves the admin listener on a free loopback port, River UI
// included.
func withAdmin(env map[string]string) {
	env["FLOW_ADMIN_LISTEN_ADDR"] = "127.0.0.1:0"
	env["FLOW_RIVERUI_ENABLED"] = "true"
}

// scrape reads /metrics and returns each sample as "name{l="v",…}" → value,
// labels sorted.
func (e *e2e) scrape(t *testing.T) map[string]float64 {
	t.Helper()
	res, err := http.Get("http://" + e.admin + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(res.Body)
	require.NoError(t, err)
	out := map[string]float64{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			key := name + "{" + strings.Join(ls, ",") + "}"
			switch {
			case m.Counter != nil:
				out[key] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[key] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				out[name+"_count{"+strings.Join(ls, ",")+"}"] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// TestMetricsCountAPowerOnWithABackendFault scrapes /metrics before and
// after a power-on whose first power call NICo Core refuses once
// (unavailable, retried): every counter moved by exactly what happened.
func TestMetricsCountAPowerOnWithABackendFault(t *testing.T) {
	t.Parallel()
	e := startE2E(t, time.Millisecond, withAdmin)
	rack := e.addRack(t, 11, true)
	_, err := e.sims.nico.Faults().Add(sim.Fault{Kind: sim.FaultError, Method: "ComponentPowerControl", Code: "unavailable", Message: "core restarting", Times: 1})
	require.NoError(t, err)
	before := e.scrape(t)

	res, err := e.client.PowerOnRack(context.Background(), &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(rack.Name)})
	require.NoError(t, err)
	task := e.wait(t, res.GetTaskIds()[0])
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_COMPLETED, task.GetStatus(), task.GetMessage())
	// Counters move just after the commit that ended the task, which the
	// task's status shows a moment earlier: wait for the end to be counted,
	// then every counter must have moved by exactly what happened.
	var after map[string]float64
	delta := func(key string) float64 { return after[key] - before[key] }
	require.Eventually(t, func() bool {
		after = e.scrape(t)
		return delta(`flow_tasks_ended_total{operation="power_on",status="completed"}`) > 0
	}, 10*time.Second, 20*time.Millisecond)

	require.Equal(t, 1.0, delta(`flow_tasks_submitted_total{operation="power_on"}`))
	require.Equal(t, 1.0, delta(`flow_tasks_ended_total{operation="power_on",status="completed"}`))
	require.Zero(t, delta(`flow_tasks_ended_total{operation="power_on",status="failed"}`))
	require.Equal(t, 1.0, delta(`flow_task_duration_seconds_count{operation="power_on",status="completed"}`))
	require.Equal(t, 1.0, delta(`flow_task_start_latency_seconds_count{operation="power_on"}`))

	// The built-in power-on: one power call and one verification per
	// stage (shelves, switches, compute), and the refused call retried.
	require.Equal(t, 1.0, delta(`flow_backend_calls_total{backend="nico",code="unavailable",method="ComponentPowerControl"}`))
	require.Equal(t, 3.0, delta(`flow_backend_calls_total{backend="nico",code="ok",method="ComponentPowerControl"}`))
	require.Equal(t, 3.0, delta(`flow_engine_steps_ended_total{action="flow.power_control",outcome="completed"}`))
	require.Equal(t, 4.0, delta(`flow_engine_calls_total{action="flow.power_control",outcome="ok"}`)+delta(`flow_engine_calls_total{action="flow.power_control",outcome="error"}`))
	require.Equal(t, 1.0, delta(`flow_engine_calls_total{action="flow.power_control",outcome="error"}`))
	require.Zero(t, delta(`flow_engine_steps_ended_total{action="flow.power_control",outcome="failed"}`))
	require.Equal(t, 1.0, delta(`flow_rpc_requests_total{code="ok",method="/v1.Flow/PowerOnRack"}`))
	require.Positive(t, delta(`flow_engine_checkpoint_duration_seconds_count{}`))
	require.Zero(t, after[`flow_tasks{status="running"}`])
	require.Contains(t, after, `flow_db_pool_connections{state="idle"}`)
	require.Contains(t, after, `flow_river_queue_jobs{queue="engine",state="available"}`)
}

// riverJob is a job as River UI's API answers it.
type riverJob struct {
	ID       int64                    `json:"id"`
	Kind     string                   `json:"kind"`
	State    string                   `json:"state"`
	Tags     []string                 `json:"tags"`
	Metadata map[string]any           `json:"metadata"`
	Errors   []struct{ Error string } `json:"errors"`
}

// riverJobs lists jobs through River UI's API on the API port (/ui/jobs/,
// behind the console's authentication: this server is insecure, so its
// caller is admin) (the list carries no metadata or errors), then reads
// each one in full.
func (e *e2e) riverJobs(t *testing.T, query string) []riverJob {
	t.Helper()
	var list struct{ Data []riverJob }
	e.riverAPI(t, "/ui/jobs/api/jobs?"+query, &list)
	jobs := make([]riverJob, len(list.Data))
	for i, j := range list.Data {
		e.riverAPI(t, fmt.Sprintf("/ui/jobs/api/jobs/%d", j.ID), &jobs[i])
	}
	return jobs
}

func (e *e2e) riverAPI(t *testing.T, path string, v any) {
	t.Helper()
	res, err := http.Get(e.url + path)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode, string(body))
	require.NoError(t, json.Unmarshal(body, v))
}

// TestAFailingTaskTellsItsStory fails a power-on at its switches (every
// call refused) and reads the story back: from the server log by task_id
// alone, and from River UI's own API, where the failed step's job is
// discarded with the backend's error and names its task, and no timeout
// job is left scheduled for the ended run.
func TestAFailingTaskTellsItsStory(t *testing.T) {
	t.Parallel()
	e := startE2E(t, time.Millisecond, withAdmin)
	rack := e.addRack(t, 12, true)
	bad := macOf(rack, inventory.ComponentTypeNVSwitch, 3)
	_, err := e.sims.nico.Faults().Add(sim.Fault{Kind: sim.FaultItem, Method: "ComponentPowerControl", Device: bad, Status: "internal_error", Message: "switch 3 PSU fault"})
	require.NoError(t, err)

	res, err := e.client.PowerOnRack(context.Background(), &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(rack.Name)})
	require.NoError(t, err)
	id := res.GetTaskIds()[0].GetId()
	task := e.wait(t, res.GetTaskIds()[0])
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_FAILED, task.GetStatus())

	// The log, by task_id alone.
	var story []string
	require.Eventually(t, func() bool {
		story = story[:0]
		for _, line := range strings.Split(e.logs.String(), "\n") {
			if strings.Contains(line, "task_id="+id) {
				story = append(story, line)
			}
		}
		return len(story) > 0 && strings.Contains(story[len(story)-1], `msg="task ended"`)
	}, 10*time.Second, 20*time.Millisecond)
	// "task submitted" is logged once the submission has committed, and
	// the engine may have started the task by then (on an idle machine it
	// did, 77 ms before): it is in the story, the rest in order.
	require.NotEmpty(t, grepLine(story, `msg="task submitted"`), "the submission is in the story:\n%s", strings.Join(story, "\n"))
	want := []string{`msg="task started"`, `msg="stage ended"`, `msg="stage started"`, `msg="retry scheduled"`, `msg="step failed"`, `msg="task ended"`}
	next := 0
	for _, line := range story {
		if next < len(want) && strings.Contains(line, want[next]) {
			next++
		}
		require.Contains(t, line, "rack="+rack.Name, line)
		require.Contains(t, line, "operation=power_on", line)
	}
	require.Equal(t, len(want), next, "story out of order or incomplete:\n%s", strings.Join(story, "\n"))
	failed := grepLine(story, `msg="step failed"`)
	require.Contains(t, failed, "switch 3 PSU fault", "the backend's message")
	// The power call failed the switch; the chain's last step (its
	// verification) fails the step with that error.
	require.Contains(t, failed, "action=flow.verify_power_status")
	require.Contains(t, failed, `stage="stage 2"`)
	require.Contains(t, grepLine(story, `msg="task ended"`), "status=failed")

	// River UI: the failed step's job is discarded, with the error and its
	// task, rack, operation, stage and action.
	var failedJob *riverJob
	for _, j := range e.riverJobs(t, "state=discarded&kinds=engine.run_step&tags="+id) {
		if j.Metadata["task_id"] == id {
			failedJob = &j
		}
	}
	require.NotNil(t, failedJob, "no discarded step job for task %s", id)
	require.NotEmpty(t, failedJob.Errors)
	require.Contains(t, failedJob.Errors[len(failedJob.Errors)-1].Error, "switch 3 PSU fault")
	require.Equal(t, rack.Name, failedJob.Metadata["rack"])
	require.Equal(t, "power_on", failedJob.Metadata["operation"])
	require.Equal(t, "flow.verify_power_status", failedJob.Metadata["action"])
	require.NotEmpty(t, failedJob.Metadata["stage"])
	require.Contains(t, failedJob.Tags, id)
	require.Contains(t, failedJob.Tags, "power_on")
	// The steps before it went on in the same job (each stage of the
	// power-on rule is one step): no other step job names the task.
	for _, state := range []string{"completed", "available", "running", "scheduled", "retryable", "cancelled"} {
		for _, j := range e.riverJobs(t, "state="+state+"&kinds=engine.run_step&tags="+id) {
			require.NotEqual(t, id, j.Metadata["task_id"], "step job %d (%s) besides the discarded one", j.ID, state)
		}
	}
	// No timeout job is left for the ended run: it was deleted with it.
	for _, state := range []string{"scheduled", "cancelled", "completed"} {
		for _, j := range e.riverJobs(t, "state="+state+"&kinds=engine.run_timeout&limit=100") {
			require.NotEqual(t, id, j.Metadata["task_id"], "timeout job %d still there (%s)", j.ID, state)
		}
	}
}

func grepLine(lines []string, s string) string {
	for _, l := range lines {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// TestTraceOfAPowerOn records one PowerOnRack's spans in memory: the RPC's
// server span, the submit span under it with the task ID, and the step
// jobs' spans carrying the task ID and rack, linked back to the submission,
// with the backend calls inside them.
func TestTraceOfAPowerOn(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	e := startE2EWith(t, time.Millisecond, serveOptions{tracer: tp})
	rack := e.addRack(t, 13, true)
	res, err := e.client.PowerOnRack(context.Background(), &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(rack.Name)})
	require.NoError(t, err)
	id := res.GetTaskIds()[0].GetId()
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_COMPLETED, e.wait(t, res.GetTaskIds()[0]).GetStatus())

	attr := func(s tracetest.SpanStub, key string) string {
		for _, a := range s.Attributes {
			if string(a.Key) == key {
				return a.Value.Emit()
			}
		}
		return ""
	}
	var rpc, submit tracetest.SpanStub
	var steps []tracetest.SpanStub
	require.Eventually(t, func() bool {
		steps = steps[:0]
		for _, s := range exp.GetSpans() {
			switch {
			case s.Name == "v1.Flow/PowerOnRack":
				rpc = s
			case s.Name == "operations.submit":
				submit = s
			case isStepSpan(s) && attr(s, "flow.task_id") == id && attr(s, "flow.action") == "flow.power_control":
				steps = append(steps, s)
			}
		}
		return len(steps) >= 3
	}, 10*time.Second, 20*time.Millisecond)
	require.True(t, rpc.SpanContext.IsValid(), "RPC span")
	require.Equal(t, trace.SpanKindServer, rpc.SpanKind)
	require.Equal(t, rpc.SpanContext.TraceID(), submit.SpanContext.TraceID(), "submit in the RPC's trace")
	require.Equal(t, rpc.SpanContext.SpanID(), submit.Parent.SpanID())
	require.Equal(t, id, attr(submit, "flow.task_id"))
	require.Equal(t, rack.Name, attr(submit, "flow.rack"))

	spans := exp.GetSpans()
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range spans {
		byID[s.SpanContext.SpanID()] = s
	}
	first := steps[0]
	for _, s := range steps {
		if s.StartTime.Before(first.StartTime) {
			first = s
		}
	}
	require.Equal(t, rack.Name, attr(first, "flow.rack"))
	require.NotEmpty(t, first.Links, "a step's span links to the span that enqueued its job")
	// The first stage's job was enqueued within the submission: its link
	// leads to the submit span's trace.
	require.Equal(t, submit.SpanContext.TraceID(), first.Links[0].SpanContext.TraceID())
	// The steps after the first went on in its job, each in a span of its
	// own under the job's.
	for _, s := range steps {
		if s.Name == "engine.step" {
			parent, ok := byID[s.Parent.SpanID()]
			require.True(t, ok)
			require.Equal(t, "river.work/engine.run_step", parent.Name)
		}
	}
	// Backend calls are client spans inside a step's span.
	calls := 0
	for _, s := range spans {
		if s.Name == "forge.Forge/ComponentPowerControl" {
			require.Equal(t, trace.SpanKindClient, s.SpanKind)
			parent, ok := byID[s.Parent.SpanID()]
			require.True(t, ok)
			require.True(t, isStepSpan(parent), parent.Name)
			calls++
		}
	}
	require.Equal(t, 3, calls)
}

// isStepSpan: a River step job's span (its first step) or the span of a
// step it went on with (chained steps).
func isStepSpan(s tracetest.SpanStub) bool {
	return s.Name == "river.work/engine.run_step" || s.Name == "engine.step"
}

// TestTracesExportOverOTLP points OTEL_EXPORTER_OTLP_ENDPOINT at an
// OTLP/HTTP receiver: the spans of a PowerOnRack reach it, at the latest
// when the server shuts down and flushes them.
func TestTracesExportOverOTLP(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	names := map[string]bool{}
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if r.URL.Path != "/v1/traces" || err != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		var req collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					names[s.GetName()] = true
				}
			}
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		b, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		_, _ = w.Write(b)
	}))
	// Registered first, so it runs after the server has stopped.
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		require.True(t, names["v1.Flow/PowerOnRack"], "spans received: %v", names)
		require.True(t, names["operations.submit"], "spans received: %v", names)
		require.True(t, names["river.work/engine.run_step"], "spans received: %v", names)
		collector.Close()
	})
	e := startE2E(t, time.Millisecond, func(env map[string]string) { env["OTEL_EXPORTER_OTLP_ENDPOINT"] = collector.URL })
	rack := e.addRack(t, 14, true)
	res, err := e.client.PowerOnRack(context.Background(), &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(rack.Name)})
	require.NoError(t, err)
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_COMPLETED, e.wait(t, res.GetTaskIds()[0]).GetStatus())
}
