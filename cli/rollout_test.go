package cli

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

const runID = "00000000-0000-0000-0000-0000000000aa"

// fakeRollouts answers GetOperationRun with states in turn (the last one
// for good), ListOperationRunTargets with nothing, and records creates.
type fakeRollouts struct {
	flowv1connect.UnimplementedFlowHandler
	mu      sync.Mutex
	states  []*flowv1.OperationRunState
	polls   atomic.Int32
	created []*flowv1.CreateOperationRunRequest
	// message, when set, is every run's status message.
	message string
}

func (f *fakeRollouts) GetOperationRun(_ context.Context, req *flowv1.GetOperationRunRequest) (*flowv1.GetOperationRunResponse, error) {
	n := int(f.polls.Add(1)) - 1
	f.mu.Lock()
	st := f.states[min(n, len(f.states)-1)]
	f.mu.Unlock()
	s := &flowv1.OperationRunSummary{Id: req.GetId(), Name: "fw", State: st, TotalPhases: 3, StatusMessage: cmp.Or(f.message, "msg "+runState(st))}
	phase := int32(0)
	switch st.GetStatus() {
	case flowv1.OperationRunStatus_OPERATION_RUN_STATUS_COMPLETED, flowv1.OperationRunStatus_OPERATION_RUN_STATUS_COMPLETED_WITH_FAILURES,
		flowv1.OperationRunStatus_OPERATION_RUN_STATUS_FAILED, flowv1.OperationRunStatus_OPERATION_RUN_STATUS_CANCELLED:
		s.FinishedAt = timestamppb.Now()
		phase = 2
	}
	if st.GetReason() == flowv1.OperationRunStatusReason_OPERATION_RUN_STATUS_REASON_PHASE_GATE {
		phase = 1
	}
	return &flowv1.GetOperationRunResponse{OperationRun: &flowv1.OperationRun{Summary: s,
		Stats: &flowv1.OperationRunStats{CurrentPhaseStats: &flowv1.OperationRunPhaseStats{PhaseIndex: phase}}}}, nil
}

func (f *fakeRollouts) ListOperationRunTargets(context.Context, *flowv1.ListOperationRunTargetsRequest) (*flowv1.ListOperationRunTargetsResponse, error) {
	return &flowv1.ListOperationRunTargetsResponse{}, nil
}

func (f *fakeRollouts) CreateOperationRun(_ context.Context, req *flowv1.CreateOperationRunRequest) (*flowv1.CreateOperationRunResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.created = append(f.created, req)
	return &flowv1.CreateOperationRunResponse{Id: &flowv1.UUID{Id: runID}}, nil
}

func runSt(status flowv1.OperationRunStatus, reason flowv1.OperationRunStatusReason) *flowv1.OperationRunState {
	return &flowv1.OperationRunState{Status: status, Reason: reason}
}

var (
	running   = runSt(flowv1.OperationRunStatus_OPERATION_RUN_STATUS_RUNNING, flowv1.OperationRunStatusReason_OPERATION_RUN_STATUS_REASON_NONE)
	phaseGate = runSt(flowv1.OperationRunStatus_OPERATION_RUN_STATUS_PAUSED, flowv1.OperationRunStatusReason_OPERATION_RUN_STATUS_REASON_PHASE_GATE)
)

func TestRolloutWatchStops(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		last  *flowv1.OperationRunState
		code  int
		msg   string
		frame string
	}{
		{name: "Completed", last: runSt(flowv1.OperationRunStatus_OPERATION_RUN_STATUS_COMPLETED, flowv1.OperationRunStatusReason_OPERATION_RUN_STATUS_REASON_NONE),
			code: 0, frame: "fw  completed  phase 2 of phases 0-2\nmsg completed"},
		{name: "PhaseGate", last: phaseGate, code: 4, frame: "fw  paused/phase_gate  phase 1 of phases 0-2",
			msg: "rollout " + runID + " paused at the phase gate (paused/phase_gate): msg paused/phase_gate\n  open phase 2: flow --server URL rollout advance " + runID + " --expect 2"},
		{name: "SafetyGate", last: runSt(flowv1.OperationRunStatus_OPERATION_RUN_STATUS_PAUSED, flowv1.OperationRunStatusReason_OPERATION_RUN_STATUS_REASON_SAFETY_GATE),
			code: 5, msg: "rollout " + runID + " paused (paused/safety_gate): msg paused/safety_gate\n  look:   flow --server URL rollout get " + runID},
		{name: "OperatorPaused", last: runSt(flowv1.OperationRunStatus_OPERATION_RUN_STATUS_PAUSED, flowv1.OperationRunStatusReason_OPERATION_RUN_STATUS_REASON_OPERATOR_PAUSED),
			code: 5, msg: "go on:  flow --server URL rollout resume " + runID},
		{name: "CompletedWithFailures", last: runSt(flowv1.OperationRunStatus_OPERATION_RUN_STATUS_COMPLETED_WITH_FAILURES, flowv1.OperationRunStatusReason_OPERATION_RUN_STATUS_REASON_NONE),
			code: 3, msg: "rollout " + runID + " ended completed_with_failures: msg completed_with_failures"},
		{name: "Cancelled", last: runSt(flowv1.OperationRunStatus_OPERATION_RUN_STATUS_CANCELLED, flowv1.OperationRunStatusReason_OPERATION_RUN_STATUS_REASON_NONE),
			code: 3, msg: "ended cancelled"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := &fakeRollouts{states: []*flowv1.OperationRunState{running, running, tt.last}}
			url := serveFlow(t, h)
			out, _, err := flow(map[string]string{"FLOW_SERVER": url}, "rollout", "watch", runID, "--interval", "1ms")
			require.Equal(t, tt.code, ExitCode(err), "%v", err)
			require.EqualValues(t, 3, h.polls.Load(), "watch polls until the run stops, then returns")
			if tt.msg != "" {
				require.ErrorContains(t, err, strings.ReplaceAll(tt.msg, "URL", url))
			}
			require.Contains(t, out, "fw  running  phase 0 of phases 0-2\n")
			require.Contains(t, out, tt.frame)
		})
	}
	t.Run("JSON", func(t *testing.T) {
		t.Parallel()
		h := &fakeRollouts{states: []*flowv1.OperationRunState{running, phaseGate}}
		out, _, err := flow(map[string]string{"FLOW_SERVER": serveFlow(t, h)}, "rollout", "watch", runID, "--interval", "1ms", "-o", "json")
		require.Equal(t, 4, ExitCode(err))
		require.True(t, strings.HasPrefix(out, "{\n"), out)
		require.Equal(t, 1, strings.Count(out, `"PAUSED"`)+strings.Count(out, `"OPERATION_RUN_STATUS_PAUSED"`), "only the final run: %s", out)
	})
}

func TestRolloutWatchInterrupted(t *testing.T) {
	t.Parallel()
	h := &fakeRollouts{states: []*flowv1.OperationRunState{running}}
	url := serveFlow(t, h)
	root := &cobra.Command{Use: "flow"}
	AddCommands(root, Options{Getenv: func(string) string { return "" }})
	ctx := interruptAfter(&h.polls, 3)
	var out, errOut bytes.Buffer
	err := Execute(ctx, root, []string{"--server", url, "rollout", "watch", runID, "--interval", "5ms"}, &out, &errOut)
	require.Equal(t, 130, ExitCode(err))
	require.EqualError(t, err, "interrupted: stopped watching; the rollout keeps running on the server\n"+
		"  watch it:  flow --server "+url+" rollout watch "+runID+"\n"+
		"  pause it:  flow --server "+url+" rollout pause "+runID+"\n"+
		"  cancel it: flow --server "+url+" rollout cancel "+runID)
}

func TestRolloutCreateSelection(t *testing.T) {
	t.Parallel()
	h := &fakeRollouts{states: []*flowv1.OperationRunState{running}}
	env := map[string]string{"FLOW_SERVER": serveFlow(t, h)}
	base := []string{"rollout", "create", "--name", "x", "--max-concurrent", "2", "--gate-count", "1"}
	for _, tt := range []struct {
		name string
		args []string
		msg  string
	}{
		{"NoSelection", []string{"--version", "2.0"}, "choose the targets: --all (every rack of the site), --racks R,... (those racks) or --percentage N"},
		{"PercentageZero", []string{"--percentage", "0", "--version", "2.0"}, "--percentage must be 1-100, not 0"},
		{"PercentageOver", []string{"--percentage", "101", "--version", "2.0"}, "--percentage must be 1-100, not 101"},
		{"AllAndRacks", []string{"--all", "--racks", "g1", "--version", "2.0"}, "--all and --racks exclude each other"},
		{"AllAndPercentage", []string{"--all", "--percentage", "50", "--version", "2.0"}, "--all and --percentage exclude each other"},
		{"NoVersion", []string{"--all"}, "want --version V"},
	} {
		_, _, err := flow(env, append(append([]string{}, base...), tt.args...)...)
		require.ErrorContains(t, err, tt.msg, tt.name)
		require.Equal(t, 2, ExitCode(err), tt.name)
	}
	// The required flags, named as flags, before any call.
	for _, tt := range []struct {
		name string
		args []string
		msg  string
	}{
		{"NoMaxConcurrent", []string{"--name", "x", "--gate-count", "1"}, "flow rollout create needs --max-concurrent N (racks upgraded at once); nothing was created"},
		{"NoGate", []string{"--name", "x", "--max-concurrent", "2"}, "flow rollout create needs a safety gate: --gate-rate PERCENT or --gate-count N (or both); nothing was created"},
		{"Neither", []string{"--name", "x"}, "needs --max-concurrent N (racks upgraded at once) and a safety gate: --gate-rate PERCENT or --gate-count N"},
	} {
		_, _, err := flow(env, append([]string{"rollout", "create", "--all", "--version", "2.0"}, tt.args...)...)
		require.ErrorContains(t, err, tt.msg, tt.name)
		require.Equal(t, 2, ExitCode(err), tt.name)
	}
	help, _, err := flow(env, "rollout", "create", "--help")
	require.NoError(t, err)
	require.Contains(t, help, "a gate is required: --gate-rate, --gate-count or both")
	file := filepath.Join(t.TempDir(), "r.yaml")
	require.NoError(t, os.WriteFile(file, []byte("name: y\nmax_concurrent: 1\ngate_count: 1\npercentage: 0\nversion: \"2.0\"\n"), 0o600))
	_, _, err = flow(env, "rollout", "create", "-f", file)
	require.ErrorContains(t, err, "--percentage must be 1-100, not 0", "a file's 0 is refused too")
	require.Empty(t, h.created, "nothing was created")

	out, _, err := flow(env, append(append([]string{}, base...), "--all", "--version", "2.0")...)
	require.NoError(t, err)
	require.Equal(t, "created rollout "+runID+"\n", out)
	// A run awaiting approval says which request, and how to approve it.
	hash := strings.Repeat("ab", 32)
	awaiting := &fakeRollouts{states: []*flowv1.OperationRunState{runSt(flowv1.OperationRunStatus_OPERATION_RUN_STATUS_PENDING, flowv1.OperationRunStatusReason_OPERATION_RUN_STATUS_REASON_NONE)},
		message: "awaiting approval of request " + runID + " (plan hash " + hash + ")"}
	out, _, err = flow(map[string]string{"FLOW_SERVER": serveFlow(t, awaiting)}, append(append([]string{}, base...), "--all", "--version", "2.0")...)
	require.NoError(t, err)
	require.Equal(t, "created rollout "+runID+"\nawaiting approval: request "+runID+", plan hash "+hash+" (a second operator: flow approval approve "+runID+" --hash "+hash+")\n", out)
	_, _, err = flow(env, append(append([]string{}, base...), "--percentage", "30", "--target-version", "3.0")...)
	require.NoError(t, err)
	require.Len(t, h.created, 2)
	all := h.created[0].GetConfiguration()
	require.EqualValues(t, 100, all.GetSelector().GetPercentage().GetPercentage())
	require.Nil(t, all.GetOperation().GetUpgradeFirmware().GetTargetSpec(), "--all: the whole site")
	require.Equal(t, "2.0", all.GetOperation().GetUpgradeFirmware().GetTargetVersion())
	share := h.created[1].GetConfiguration()
	require.EqualValues(t, 30, share.GetSelector().GetPercentage().GetPercentage())
	require.Equal(t, "3.0", share.GetOperation().GetUpgradeFirmware().GetTargetVersion(), "--target-version is the older name of --version")
}

func TestPhaseLabel(t *testing.T) {
	t.Parallel()
	require.Equal(t, "0 (the only phase)", phaseLabel(0, 1))
	require.Equal(t, "1 of phases 0-2", phaseLabel(1, 3))
	require.Equal(t, "0", phaseLabel(0, 0))
	frame := rolloutFrame(&flowv1.OperationRun{Summary: &flowv1.OperationRunSummary{Name: "fw", TotalPhases: 2, State: phaseGate}},
		[]*flowv1.OperationRunTarget{{PhaseIndex: 0, Status: flowv1.OperationRunTargetStatus_OPERATION_RUN_TARGET_STATUS_COMPLETED}}, nil)
	require.Regexp(t, `PHASE\s+TARGETS.*\n0\s+1\s+0\s+0\s+0\s+1\s`, frame, "the table numbers phases as the API does")
	var b bytes.Buffer
	printRollout(&b, &flowv1.OperationRun{Summary: &flowv1.OperationRunSummary{TotalPhases: 2}, Stats: &flowv1.OperationRunStats{CurrentPhaseStats: &flowv1.OperationRunPhaseStats{PhaseIndex: 1}}})
	require.Contains(t, b.String(), "Phase:       1 of phases 0-1 (auto-advance: false)")
}

// TestReachErrors: a call that gets no Flow answer says why, with the
// address tried and what to do.
func TestReachErrors(t *testing.T) {
	t.Parallel()
	refused := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := l.Addr().String()
		require.NoError(t, l.Close())
		return addr
	}()
	notHTTP := rawServer(t, func(c net.Conn) {
		buf := make([]byte, 64)
		_, _ = c.Read(buf) // PostgreSQL reads a startup packet, then hangs up
	})
	garbage := rawServer(t, func(c net.Conn) {
		buf := make([]byte, 64)
		_, _ = c.Read(buf)
		_, _ = c.Write([]byte("E\x00\x00\x00\x10SFATAL\x00\x00\n\n"))
	})
	// A server that answers before reading, and hangs up: the client's
	// write may fail first.
	early := rawServer(t, func(c net.Conn) { _, _ = c.Write([]byte("E\x00\x00\x00\x10SFATAL\x00\x00\n\n")) })
	web := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(web.Close)
	admin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" {
			_, _ = w.Write([]byte("Flow admin listener\n  /healthz       liveness\n"))
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(admin.Close)
	tlsSrv := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(tlsSrv.Close)
	mtls := httptest.NewUnstartedServer(http.NotFoundHandler())
	mtls.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert}
	mtls.StartTLS()
	t.Cleanup(mtls.Close)
	ca := filepath.Join(t.TempDir(), "ca.crt")
	require.NoError(t, os.WriteFile(ca, pemCert(tlsSrv.Certificate().Raw), 0o600))
	for _, tt := range []struct {
		name, server string
		tls          bool
		want         []string
	}{
		{"Refused", refused, false, []string{"cannot reach Flow at http://" + refused + ": connection refused", "Is `flow dev` (or `flow serve`) running?", "FLOW_SERVER"}},
		{"NotHTTP", notHTTP, false, []string{"http://" + notHTTP + " is not a Flow API: it did not answer HTTP", "PostgreSQL"}},
		{"Garbage", garbage, false, []string{"is not a Flow API: it did not answer HTTP"}},
		{"AnswersEarly", early, false, []string{"is not a Flow API: it did not answer HTTP"}},
		{"NotFound", web.URL, false, []string{web.URL + " is not a Flow API: POST /v1.Flow/GetListOfRacks answers 404 Not Found (the Flow admin listener, a NICo Core or PSM simulator", "FLOW_LISTEN_ADDR"}},
		{"AdminListener", admin.URL, false, []string{"it is Flow's admin listener"}},
		{"WantsTLS", strings.TrimPrefix(tlsSrv.URL, "https://"), false, []string{"wants TLS, but the CLI spoke cleartext: give --ca FILE", "--cert and --key"}},
		{"WantsClientCert", strings.TrimPrefix(mtls.URL, "https://"), true, []string{"refused the TLS handshake (", "give --cert and --key"}},
		{"SpeaksCleartext", strings.TrimPrefix(web.URL, "http://"), true, []string{"answers in cleartext, but the CLI speaks TLS", "use http://"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"FLOW_SERVER": tt.server}
			if tt.tls {
				env["FLOW_TLS_CA"] = ca
			}
			_, _, err := flow(env, "rack", "list")
			require.Error(t, err)
			require.Equal(t, 1, ExitCode(err))
			for _, w := range tt.want {
				require.Contains(t, err.Error(), w)
			}
			require.NotContains(t, err.Error(), "unavailable:", "the cause, not Connect's code")
		})
	}
}

// rawServer accepts TCP connections and hands each to serve, then closes
// it: a server that does not speak HTTP.
func rawServer(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	return l.Addr().String()
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
