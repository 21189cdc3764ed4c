package cli_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/pglocal"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/notify"
	"github.com/nicoflow/flow/sim/nicosim"
)

// hookReceiver is a real webhook receiver that verifies every request's
// signature.
type hookReceiver struct {
	mu     sync.Mutex
	events []notify.CloudEvent
	bad    int
	status int
	srv    *httptest.Server
}

func newHookReceiver(t *testing.T, secret string) *hookReceiver {
	r := &hookReceiver{status: http.StatusOK}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		if err := notify.Verify([]byte(secret), req.Header.Get(notify.SignatureHeader), body, time.Now(), notify.ReplayWindow); err != nil {
			r.bad++
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var ce notify.CloudEvent
		if err := json.Unmarshal(body, &ce); err != nil || req.Header.Get("Content-Type") != notify.ContentType {
			r.bad++
		}
		if r.status == http.StatusOK {
			r.events = append(r.events, ce)
		}
		w.WriteHeader(r.status)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *hookReceiver) got() []notify.CloudEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]notify.CloudEvent(nil), r.events...)
}

// TestCLIWebhooks: webhooks from the CLI on a real server: bad input
// refused naming the field with nothing saved; a task's end reaches a
// subscribed receiver as a signed CloudEvent naming its rack; test,
// deliveries, a dead letter redriven, delete.
func TestCLIWebhooks(t *testing.T) {
	t.Parallel()
	s := startServer(t, map[string]string{
		"FLOW_DATA_ENCRYPTION_KEY_PATH": newKeyFile(t), "FLOW_DEV_MODE": "true",
		"FLOW_NOTIFY_BACKOFF_MIN": "50ms", "FLOW_NOTIFY_BACKOFF_MAX": "100ms", "FLOW_SITE_NAME": "lab-1",
	})
	b := s.bundle()
	rack := s.addRack(t, 0, rackOptions{})
	const secret = "a-shared-secret-of-the-receiver"
	rcv := newHookReceiver(t, secret)

	requireFlowError(t, b, "invalid_argument: url: not a URL", "webhook", "create", "--url", "ht!tp://%zz", "--events", "*", "--secret", secret)
	requireFlowError(t, b, "invalid_argument: url: want an https:// URL", "webhook", "create", "--url", "ftp://example.com", "--events", "*", "--secret", secret)
	requireFlowError(t, b, `invalid_argument: event_types[0]: unknown event type "flow.task.exploded"`, "webhook", "create", "--url", rcv.srv.URL, "--events", "flow.task.exploded", "--secret", secret)
	requireFlowError(t, b, "invalid_argument: event_types: name at least one", "webhook", "create", "--url", rcv.srv.URL, "--secret", secret)
	requireFlowError(t, b, "invalid_argument: secret: is required", "webhook", "create", "--url", rcv.srv.URL, "--events", "*", "--secret", "")
	requireFlowError(t, b, "invalid_argument: racks[0]:", "webhook", "create", "--url", rcv.srv.URL, "--events", "*", "--secret", secret, "--rack", "nope")
	require.Equal(t, "no webhooks", b.mustFlow(t, "webhook", "list"))

	out := b.mustFlow(t, "webhook", "create", "--url", rcv.srv.URL, "--events", "flow.task.completed,flow.task.failed", "--secret", secret, "--rack", rack.Name, "--description", "on-call")
	id := regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f-]{27}`).FindString(out)
	require.NotEmpty(t, id, out)
	require.Contains(t, out, "flow.task.completed,flow.task.failed")
	require.Contains(t, out, "rack="+rack.ID.String())
	require.NotContains(t, b.mustFlow(t, "webhook", "get", id, "-o", "json"), secret, "the secret is never returned")
	require.Contains(t, b.mustFlow(t, "webhook", "list"), id)

	// A generated secret is printed once, on stderr.
	_, stderr, err := b.flow("webhook", "create", "--url", rcv.srv.URL, "--events", "flow.run.failed")
	require.NoError(t, err)
	require.Contains(t, stderr, "signing secret (shown once")

	// A task's end reaches the receiver.
	b.mustFlow(t, "power", "on", rack.Name, "--wait", "--interval", "20ms")
	require.Eventually(t, func() bool { return len(rcv.got()) >= 1 }, 20*time.Second, 20*time.Millisecond)
	ce := rcv.got()[0]
	require.Equal(t, string(notify.TaskCompleted), ce.Type)
	require.Equal(t, "/flow/lab-1", ce.Source)
	require.Equal(t, "rack/"+rack.ID.String(), ce.Subject)
	var data notify.Data
	require.NoError(t, json.Unmarshal(ce.Data, &data))
	require.Equal(t, rack.Name, data.Rack.Name)
	require.Equal(t, "lab-1", data.Site.Name)
	require.Equal(t, "power_on", data.Task.Operation)
	require.Equal(t, "completed", data.Task.Status)

	// test, deliveries.
	out = b.mustFlow(t, "webhook", "test", id)
	require.Contains(t, out, "test event queued: delivery")
	require.Eventually(t, func() bool { return len(rcv.got()) >= 2 }, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, string(notify.WebhookTest), rcv.got()[1].Type)
	// The receiver has the event before the delivery's record says so
	// (the job records the answer after it): wait for the record.
	require.Eventually(t, func() bool {
		out = b.mustFlow(t, "webhook", "deliveries", id)
		return strings.Count(out, "delivered") >= 2
	}, 10*time.Second, 20*time.Millisecond, "both deliveries recorded delivered")
	require.Contains(t, out, "flow.webhook.test")

	// A receiver that answers 410 dead-letters; redrive once it is back.
	rcv.mu.Lock()
	rcv.status = http.StatusGone
	rcv.mu.Unlock()
	b.mustFlow(t, "webhook", "test", id)
	require.Eventually(t, func() bool {
		return strings.Contains(b.mustFlow(t, "webhook", "deliveries", id, "--status", "dead"), "HTTP 410")
	}, 10*time.Second, 50*time.Millisecond)
	rcv.mu.Lock()
	rcv.status = http.StatusOK
	rcv.mu.Unlock()
	require.Contains(t, b.mustFlow(t, "webhook", "redrive", "--webhook", id), "redriven: 1 deliveries")
	require.Eventually(t, func() bool { return len(rcv.got()) >= 3 }, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, "no deliveries", b.mustFlow(t, "webhook", "deliveries", id, "--status", "dead"))
	require.Zero(t, rcv.bad, "every request verified")

	// The console lists the subscription and its deliveries.
	res, err := http.Get(s.url + "/ui/webhooks")
	require.NoError(t, err)
	page, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode, string(page))
	require.Contains(t, string(page), `<tr data-id="`+id+`">`)
	require.Contains(t, string(page), `data-status="delivered"`)
	require.Contains(t, string(page), "flow.webhook.test")

	// Batched delivery: limits only with --batch, within range; the list
	// and the console say how a subscription is delivered.
	requireFlowError(t, b, "invalid_argument: batch_max: is only for batched delivery", "webhook", "create", "--url", rcv.srv.URL, "--events", "*", "--secret", secret, "--batch-max", "5")
	requireFlowError(t, b, "invalid_argument: batch_max: must be 1 to 1000 events, not 5000", "webhook", "create", "--url", rcv.srv.URL, "--events", "*", "--secret", secret, "--batch", "--batch-max", "5000")
	out = b.mustFlow(t, "webhook", "create", "--url", rcv.srv.URL, "--events", "*", "--secret", secret, "--batch", "--batch-max", "10")
	require.Contains(t, out, "batches of 10 events, 1048576 bytes")
	batched := regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f-]{27}`).FindString(out)
	require.Contains(t, b.mustFlow(t, "webhook", "list"), "one event a request")
	require.Contains(t, b.mustFlow(t, "webhook", "get", batched, "-o", "json"), `"batchMax": 10`)
	res, err = http.Get(s.url + "/ui/webhooks")
	require.NoError(t, err)
	page, err = io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Contains(t, string(page), "batches of up to 10 events, 1048576 bytes")
	b.mustFlow(t, "webhook", "delete", batched)

	out = b.mustFlow(t, "webhook", "delete", id)
	require.Contains(t, out, "deleted webhook "+id)
	requireFlowError(t, b, "not_found", "webhook", "get", id)
}

func (r *hookReceiver) types() []string {
	var out []string
	for _, ce := range r.got() {
		out = append(out, ce.Type)
	}
	return out
}

func (r *hookReceiver) first(t *testing.T, typ notify.Type) notify.Data {
	t.Helper()
	for _, ce := range r.got() {
		if ce.Type == string(typ) {
			var d notify.Data
			require.NoError(t, json.Unmarshal(ce.Data, &d))
			return d
		}
	}
	t.Fatalf("no %s among %v", typ, r.types())
	return notify.Data{}
}

// TestCLIWebhookEvents: a rollout's phase start and completion, and a
// leak's detection and clearing, reach a receiver subscribed to every
// event type, naming the run, and the component and rack.
func TestCLIWebhookEvents(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, "flowconfig.yaml", "leak_detection_interval: 1s\ninventory_run_frequency: 1h\n")
	s := startServer(t, map[string]string{
		"FLOW_DATA_ENCRYPTION_KEY_PATH": newKeyFile(t), "FLOW_DEV_MODE": "true", "FLOW_CONFIG_FILE": cfg,
		"FLOW_EVENT_RULE_LEAK_DETECTION_ENABLED": "true",
	})
	b := s.bundle()
	rack := s.addRack(t, 73, rackOptions{linked: true})
	const secret = "a-shared-secret-of-the-receiver"
	rcv := newHookReceiver(t, secret)
	b.mustFlow(t, "webhook", "create", "--url", rcv.srv.URL, "--events", "*", "--secret", secret)

	b.mustFlow(t, "rollout", "create", "--name", "hooked", "--racks", rack.Name, "--max-concurrent", "1", "--phase-counts", "1", "--auto-advance", "--gate-count", "1", "--version", "2.0")
	b.mustFlow(t, "rollout", "watch", "hooked", "--interval", "50ms")
	require.Eventually(t, func() bool {
		return slices.Contains(rcv.types(), string(notify.RunCompleted))
	}, 20*time.Second, 20*time.Millisecond, "%v", rcv.types())
	started := rcv.first(t, notify.RunPhaseStarted)
	require.Equal(t, "hooked", started.Run.Name)
	require.Equal(t, 0, *started.Run.Phase)
	require.Equal(t, "completed", rcv.first(t, notify.RunCompleted).Run.Status)

	var tray inventory.Component
	for _, c := range rack.Components {
		if c.Type == inventory.ComponentTypeCompute {
			tray = c
			break
		}
	}
	require.NoError(t, s.sims.NICo.SetLeak(tray.ExternalID, true))
	require.Eventually(t, func() bool { return slices.Contains(rcv.types(), string(notify.LeakDetected)) }, 20*time.Second, 50*time.Millisecond)
	leak := rcv.first(t, notify.LeakDetected)
	require.Equal(t, tray.Name, leak.Component.Name)
	require.Equal(t, rack.Name, leak.Rack.Name)
	require.Equal(t, rack.ID.String(), leak.Rack.ID)
	// The built-in rule's leak response powers the tray off: handled.
	require.Eventually(t, func() bool { return slices.Contains(rcv.types(), string(notify.LeakHandled)) }, 30*time.Second, 50*time.Millisecond, "%v", rcv.types())
	handled := rcv.first(t, notify.LeakHandled)
	require.Equal(t, rack.Name, handled.Rack.Name)
	require.Equal(t, "completed", handled.Task.Status)
	b.mustFlow(t, "leak", "override", tray.ID.String(), "--reason", "dry: checked by hand")
	require.Eventually(t, func() bool { return slices.Contains(rcv.types(), string(notify.LeakOverridden)) }, 10*time.Second, 20*time.Millisecond)
	over := rcv.first(t, notify.LeakOverridden)
	require.Equal(t, tray.Name, over.Component.Name)
	require.Equal(t, rack.Name, over.Rack.Name)
	require.Contains(t, over.Message, "dry: checked by hand")
	require.NoError(t, s.sims.NICo.SetLeak(tray.ExternalID, false))
	require.Eventually(t, func() bool { return slices.Contains(rcv.types(), string(notify.LeakCleared)) }, 20*time.Second, 50*time.Millisecond)
	require.Equal(t, leak.Leak.OccurrenceID, rcv.first(t, notify.LeakCleared).Leak.OccurrenceID)

	// Core stops reporting the tray: the sync finds the drift; it reports
	// it again: the drift is cleared.
	dev, ok := s.sims.NICo.State(tray.ExternalID)
	require.True(t, ok)
	require.True(t, s.sims.NICo.Remove(tray.ExternalID))
	b.mustFlow(t, "sync", "run")
	require.Eventually(t, func() bool { return slices.Contains(rcv.types(), string(notify.SyncDriftFound)) }, 20*time.Second, 20*time.Millisecond, "%v", rcv.types())
	found := rcv.first(t, notify.SyncDriftFound)
	require.Equal(t, "missing_in_actual", found.Drift.Kind)
	require.Equal(t, tray.Name, found.Component.Name)
	require.Equal(t, rack.Name, found.Rack.Name)
	require.NoError(t, s.sims.Seed([]nicosim.Device{{Kind: "compute", ID: tray.ExternalID, Name: tray.Name, Serial: tray.SerialNumber,
		BMCMAC: tray.BMCs[0].MAC.String(), RackID: rack.ID.String(), Firmware: map[string]string{"bmc": "1.0"},
		SlotID: int(tray.Position.SlotID), TrayIndex: int(tray.Position.TrayIdx), PoweredOff: dev.Power == "off"}}))
	b.mustFlow(t, "sync", "run")
	require.Eventually(t, func() bool { return slices.Contains(rcv.types(), string(notify.SyncDriftCleared)) }, 20*time.Second, 20*time.Millisecond, "%v", rcv.types())
	require.Equal(t, found.Component.ID, rcv.first(t, notify.SyncDriftCleared).Component.ID)
	require.Zero(t, rcv.bad)
}

// startAlertmanager runs a real Alertmanager (Debian's
// prometheus-alertmanager, which .ci/run installs) on a free loopback port
// until the test ends and returns its URL.
func startAlertmanager(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus-alertmanager")
	if err != nil {
		bin, err = exec.LookPath("alertmanager")
	}
	require.NoError(t, err, "Alertmanager is not installed: apt-get install -y prometheus-alertmanager (.ci/run does)")
	dir := t.TempDir()
	cfg := writeFile(t, "alertmanager.yml", "route:\n  receiver: blackhole\nreceivers:\n  - name: blackhole\n")
	port, err := pglocal.FreePort()
	require.NoError(t, err)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(bin, "--config.file="+cfg, "--storage.path="+dir, "--web.listen-address="+addr, "--cluster.listen-address=", "--log.level=warn")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	u := "http://" + addr
	require.Eventually(t, func() bool {
		res, err := http.Get(u + "/-/ready")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	}, 20*time.Second, 50*time.Millisecond, "alertmanager ready")
	return u
}

type amAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	Status      struct {
		State string `json:"state"`
	} `json:"status"`
	EndsAt time.Time `json:"endsAt"`
}

func activeAlerts(t *testing.T, am string) []amAlert {
	t.Helper()
	res, err := http.Get(am + "/api/v2/alerts")
	require.NoError(t, err)
	defer res.Body.Close()
	var all, out []amAlert
	require.NoError(t, json.NewDecoder(res.Body).Decode(&all))
	for _, a := range all {
		if a.Status.State == "active" && a.EndsAt.After(time.Now()) {
			out = append(out, a)
		}
	}
	return out
}

// TestCLILeakAlert: an event rule's send_alert on a leak fires an alert in
// a real Alertmanager, labelled with the site, rack, component and rule,
// and the alert resolves when the leak clears.
func TestCLILeakAlert(t *testing.T) {
	t.Parallel()
	am := startAlertmanager(t)
	cfg := writeFile(t, "flowconfig.yaml", "leak_detection_interval: 1s\ninventory_run_frequency: 1h\n")
	s := startServer(t, map[string]string{
		"FLOW_CONFIG_FILE": cfg, "FLOW_EVENT_RULE_LEAK_DETECTION_ENABLED": "true", "FLOW_SITE_NAME": "lab-1",
		"FLOW_ALERTMANAGER_URLS": am, "FLOW_ALERTMANAGER_RESEND": "500ms",
	})
	b := s.bundle()
	rack := s.addRack(t, 74, rackOptions{linked: true})
	file := writeFile(t, "rule.yaml", `name: page
eventType: hardware.leak.detected
actions:
  - name: page
    sendAlert: {severity: EVENT_RULE_SEVERITY_CRITICAL, message: "coolant leak: send someone"}
`)
	b.mustFlow(t, "event-rule", "create", "-f", file)
	b.mustFlow(t, "event-rule", "enable", "page")
	b.mustFlow(t, "event-rule", "bind", "page", "--rack", rack.Name)
	var tray inventory.Component
	for _, c := range rack.Components {
		if c.Type == inventory.ComponentTypeCompute {
			tray = c
			break
		}
	}
	require.NoError(t, s.sims.NICo.SetLeak(tray.ExternalID, true))
	require.Eventually(t, func() bool { return len(activeAlerts(t, am)) == 1 }, 30*time.Second, 100*time.Millisecond, "the alert fires")
	a := activeAlerts(t, am)[0]
	require.Equal(t, "FlowLeakDetected", a.Labels["alertname"])
	require.Equal(t, "critical", a.Labels["severity"])
	require.Equal(t, "lab-1", a.Labels["site"])
	require.Equal(t, rack.Name, a.Labels["rack"])
	require.Equal(t, tray.Name, a.Labels["component"])
	require.Equal(t, "page", a.Labels["action"])
	require.Equal(t, "coolant leak: send someone", a.Annotations["description"])
	time.Sleep(3 * time.Second) // several leak cycles and resends: still one alert
	require.Len(t, activeAlerts(t, am), 1)

	require.NoError(t, s.sims.NICo.SetLeak(tray.ExternalID, false))
	require.Eventually(t, func() bool { return len(activeAlerts(t, am)) == 0 }, 30*time.Second, 100*time.Millisecond, "the alert resolves")

	// A rack with no rule bound: the built-in leakage rule powers off and,
	// with an Alertmanager configured, alerts too.
	require.Contains(t, b.mustFlow(t, "event-rule", "get", "built-in"), "alert: send critical alert")
	other := s.addRack(t, 75, rackOptions{linked: true})
	var tray2 inventory.Component
	for _, c := range other.Components {
		if c.Type == inventory.ComponentTypeCompute {
			tray2 = c
			break
		}
	}
	require.NoError(t, s.sims.NICo.SetLeak(tray2.ExternalID, true))
	require.Eventually(t, func() bool { return len(activeAlerts(t, am)) == 1 }, 30*time.Second, 100*time.Millisecond, "the built-in alerts")
	a = activeAlerts(t, am)[0]
	require.Equal(t, other.Name, a.Labels["rack"])
	require.Equal(t, "alert", a.Labels["action"])
	require.Equal(t, "f34b87f7-cb1b-4b08-aa51-30c0b3b58680", a.Labels["rule"])
	require.NoError(t, s.sims.NICo.SetLeak(tray2.ExternalID, false))
	require.Eventually(t, func() bool { return len(activeAlerts(t, am)) == 0 }, 30*time.Second, 100*time.Millisecond, "the built-in's alert resolves")
}
