package console

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// view is what a page handler returns: the template, the title, the nav
// entry it lights, the topics that refresh it, and its data.
type view struct {
	name, title, nav string
	topics           []string
	data             any
}

// pageData is every template's dot.
type pageData struct {
	Title, Nav string
	User       User
	CSRF       string
	Topics     string
	// LiveOff says the page would be live but ?live=0 turned its stream
	// off.
	LiveOff bool
	Open    bool
	Notice  string
	Data    any
	Now     time.Time
}

// page serves fn's view: the whole page, or only its main part when the
// console's script asks for it (X-Console-Partial) to refresh a live view.
func (c *Console) page(fn func(*http.Request) (view, error)) http.HandlerFunc {
	return c.pageOf(fn, nil)
}

// sharedPage is page for a view whose main part is the same for every
// user of a role (no form token; controls only by role): while the change
// feed is live, its main part is rendered once per change of topics and
// role, and the same bytes go to every open page that fetches it again,
// so many open pages cost one render, not one each.
func (c *Console) sharedPage(topics []string, fn func(*http.Request) (view, error)) http.HandlerFunc {
	return c.pageOf(fn, topics)
}

func (c *Console) pageOf(fn func(*http.Request) (view, error), shared []string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		u := userFrom(r.Context())
		partial := r.Header.Get("X-Console-Partial") == "1"
		var key string
		var gen uint64
		var live bool
		if partial && shared != nil {
			key = u.Role + " " + r.URL.RequestURI()
			gen, live = c.feed.Generation(shared...)
			if b, ok := c.parts.get(key, gen, live); ok {
				writeHTML(w, http.StatusOK, b)
				return
			}
		}
		v, err := fn(r)
		if err != nil {
			status := statusOf(err)
			if connect.CodeOf(err) == connect.CodeInvalidArgument {
				status = http.StatusBadRequest // a page's URL the API cannot read: no conflict, a bad request
			}
			c.fail(w, r, u, status, err)
			return
		}
		d := pageData{Title: v.title, Nav: v.nav, User: u, Topics: joinTopics(v.topics), Open: c.opts.Open,
			Notice: r.URL.Query().Get("notice"), Data: v.data, Now: time.Now()}
		if r.URL.Query().Get("live") == "0" && d.Topics != "" {
			// No stream: a page that keeps no request open, for
			// Chromium's --virtual-time-budget (screenshots, --dump-dom).
			d.Topics, d.LiveOff = "", true
		}
		if shared == nil {
			d.CSRF = csrfToken(w, r)
		}
		b, ok := c.execute(w, v.name, partial, d)
		if !ok {
			return
		}
		if key != "" && live {
			c.parts.put(key, gen, b)
		}
		writeHTML(w, http.StatusOK, b)
	}
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, d pageData) {
	if b, ok := c.execute(w, name, r.Header.Get("X-Console-Partial") == "1", d); ok {
		writeHTML(w, status, b)
	}
}

// execute renders template name: the whole page, or its main part.
func (c *Console) execute(w http.ResponseWriter, name string, partial bool, d pageData) ([]byte, bool) {
	what := "layout"
	if partial {
		what = "main"
	}
	var buf bytes.Buffer
	if err := c.tmpl[name].ExecuteTemplate(&buf, what, d); err != nil {
		c.logger.Error("console template", "template", name, "error", err.Error())
		http.Error(w, "internal error", http.StatusInternalServerError)
		return nil, false
	}
	return buf.Bytes(), true
}

func writeHTML(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// partCache holds shared pages' rendered main parts, each valid while its
// topics' generation stands (and at most partTTL: "3m ago" must move on).
type partCache struct {
	mu      sync.Mutex
	entries map[string]partEntry
}

type partEntry struct {
	gen uint64
	at  time.Time
	b   []byte
}

const partTTL = 5 * time.Second

func (p *partCache) get(key string, gen uint64, live bool) ([]byte, bool) {
	if !live {
		return nil, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.entries[key]
	if !ok || e.gen != gen || time.Since(e.at) > partTTL {
		return nil, false
	}
	return e.b, true
}

func (p *partCache) put(key string, gen uint64, b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.entries == nil || len(p.entries) > 256 {
		p.entries = map[string]partEntry{}
	}
	p.entries[key] = partEntry{gen: gen, at: time.Now(), b: b}
}

// fail answers with an error page.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, u User, status int, err error) {
	msg := err.Error()
	var ce *connect.Error
	if errors.As(err, &ce) {
		msg = ce.Message()
	}
	if errors.Is(err, context.Canceled) {
		return // the browser went away
	}
	if status >= 500 {
		c.logger.Error("console", "path", r.URL.Path, "error", msg)
	}
	c.render(w, r, status, "error", pageData{Title: http.StatusText(status), User: u, Open: c.opts.Open,
		Data: map[string]any{"Status": status, "Message": msg}, Now: time.Now()})
}

// The topics of the shared pages (their main parts are the same for
// every user).
var (
	overviewTopics = []string{"tasks", "racks", "leaks", "runs", "sync"}
	floorTopics    = []string{"racks", "leaks", "tasks", "sync", "firmware"}
	tasksTopics    = []string{"tasks"}
	rolloutsTopics = []string{"runs"}
)

// ---- Overview ----

type overviewData struct {
	Racks           int
	States          []count
	Power           []count
	Running, Queued int
	ActiveTasks     []*flowv1.Task
	Runs            []*flowv1.OperationRunSummary
	Leaks           []Leak
	Sync            *adminv1.SyncCycle
	SyncErr         string
	DriftCount      int
	RackNames       map[string]string
	// PendingApprovals counts the requests awaiting a second person's
	// approval (-1: unknown).
	PendingApprovals int
	// Failed is the tasks that failed in the last 24 hours.
	Failed failures
}

type count struct {
	Name string
	N    int
}

func counted(m map[string]int, order []string) []count {
	var out []count
	for _, k := range order {
		if m[k] > 0 {
			out = append(out, count{k, m[k]})
		}
	}
	return out
}

func (c *Console) overview(r *http.Request) (view, error) {
	ctx := r.Context()
	racks, err := c.racks(ctx)
	if err != nil {
		return view{}, err
	}
	d := overviewData{Racks: len(racks), RackNames: map[string]string{}}
	states, power := map[string]int{}, map[string]int{}
	for _, rc := range racks {
		states[rc.State()]++
		power[rc.Power()]++
		d.RackNames[rc.ID] = rc.Name
	}
	d.States = counted(states, []string{"leak", "busy", "queued", "failed", "alert", "power-on", "power-off", "power-mixed", "power-unknown"})
	d.Power = counted(power, []string{"on", "off", "mixed", "unknown"})
	if d.Running, d.Queued, err = c.taskCounts(ctx); err != nil {
		return view{}, err
	}
	tasks, err := c.flow.ListTasks(apiCtx(r), (&flowv1.ListTasksRequest{ActiveOnly: true, Pagination: &flowv1.Pagination{Limit: 10}}))
	if err != nil {
		return view{}, err
	}
	d.ActiveTasks = tasks.GetTasks()
	if d.Runs, err = c.activeRuns(r); err != nil {
		return view{}, err
	}
	if d.Leaks, err = c.leaks(ctx); err != nil {
		return view{}, err
	}
	if st, err := c.admin.GetSyncStatus(apiCtx(r), (&adminv1.GetSyncStatusRequest{})); err == nil {
		d.Sync = st.GetCycle()
	} else {
		d.SyncErr = connectMessage(err)
	}
	if _, d.DriftCount, err = c.drift(ctx, "", 0); err != nil {
		return view{}, err
	}
	d.PendingApprovals = c.pendingApprovals(r)
	if d.Failed, err = c.failedTasks(ctx); err != nil {
		return view{}, err
	}
	return view{"overview", "Site overview", "overview", overviewTopics, d}, nil
}

func (c *Console) activeRuns(r *http.Request) ([]*flowv1.OperationRunSummary, error) {
	st := func(s flowv1.OperationRunStatus) *flowv1.OperationRunStateFilter {
		return &flowv1.OperationRunStateFilter{Status: &s}
	}
	res, err := c.flow.ListOperationRuns(apiCtx(r), (&flowv1.ListOperationRunsRequest{
		Filter: &flowv1.OperationRunFilter{States: []*flowv1.OperationRunStateFilter{
			st(flowv1.OperationRunStatus_OPERATION_RUN_STATUS_PENDING), st(flowv1.OperationRunStatus_OPERATION_RUN_STATUS_RUNNING), st(flowv1.OperationRunStatus_OPERATION_RUN_STATUS_PAUSED),
		}},
		Pagination: &flowv1.Pagination{Limit: 20},
	}))
	if err != nil {
		return nil, err
	}
	return res.GetOperationRuns(), nil
}

// ---- Floor map (floor.go) ----

var legends = map[string][]legendItem{
	"status": {{"c-leak", "leak"}, {"c-busy", "task running"}, {"c-queued", "task queued"}, {"c-failed", "last task failed"}, {"c-alert", "health alert"}, {"c-on", "powered on"}, {"c-off", "powered off"}, {"c-mixed", "power mixed"}, {"c-unknown", "power unknown"}},
	"power":  {{"c-on", "on"}, {"c-off", "off"}, {"c-mixed", "mixed"}, {"c-unknown", "unknown"}},
	"leak":   {{"c-leak", "leak"}, {"c-ok", "no leak"}},
	"task":   {{"c-busy", "running"}, {"c-queued", "queued"}, {"c-failed", "last task failed"}, {"c-idle", "idle"}},
	"health": {{"c-alert", "alert"}, {"c-ok", "ok"}},
}

// cellClass is a rack's colour class and the words that say the same (the
// colour is never the only sign).
func cellClass(by string, rc RackCell, fw map[string]int) (string, string) {
	switch by {
	case "power":
		return "c-" + rc.Power(), "power " + rc.Power()
	case "leak":
		if rc.Leaks > 0 {
			return "c-leak", fmt.Sprintf("%d leaking", rc.Leaks)
		}
		return "c-ok", "no leak"
	case "task":
		switch {
		case rc.Running > 0:
			return "c-busy", "task running"
		case rc.Queued > 0:
			return "c-queued", "task queued"
		case rc.LastFailed:
			return "c-failed", "last task failed"
		}
		return "c-idle", "idle"
	case "firmware":
		switch rc.Firmware {
		case "mixed":
			return "fw-mixed", "firmware mixed"
		case "":
			return "c-unknown", "firmware unknown"
		}
		return fmt.Sprintf("fw-%d", fw[rc.Firmware]), "firmware " + rc.Firmware
	case "health":
		if rc.Health() == "alert" {
			return "c-alert", "health alert"
		}
		return "c-ok", "healthy"
	case "feed":
		return placementClass("feed", rc.Feed)
	case "loop":
		return placementClass("loop", rc.Loop)
	}
	switch s := rc.State(); s {
	case "leak":
		return "c-leak", fmt.Sprintf("%d leaking", rc.Leaks)
	case "busy":
		return "c-busy", "task running"
	case "queued":
		return "c-queued", "task queued"
	case "failed":
		return "c-failed", "last task failed"
	case "alert":
		return "c-alert", "health alert"
	default:
		return "c-" + rc.Power(), "power " + rc.Power()
	}
}

// ---- Rack ----

type rackData struct {
	Rack  *flowv1.Rack
	ID    string
	Comps []*flowv1.Component
	Tasks []*flowv1.Task
	Drift []Drift
	Leaks int
	// Compliance is each device's firmware compliance by component ID;
	// Firmware the rack's roll-up (nil: none); FirmwareNote what it is
	// measured against, or why there is none.
	Compliance   map[string]*adminv1.DeviceCompliance
	Firmware     *adminv1.ComplianceGroup
	FirmwareNote string
	// HeldLeaks counts the rack's open leaks no admin has overridden:
	// while there is one the API refuses to power the rack on.
	HeldLeaks int
	// Placement is the rack's power feed, coolant loop, isolation and
	// cooling hold (power.go).
	Placement rackPlacement
	// Active is the rack's running task (else its oldest queued one);
	// LastFailed its newest finished task when that one failed.
	Active, LastFailed *flowv1.Task
}

func (c *Console) rack(r *http.Request) (view, error) {
	id, err := c.resolveRack(r.Context(), r.PathValue("id"))
	if err != nil {
		return view{}, err
	}
	res, err := c.flow.GetRackInfoByID(apiCtx(r), (&flowv1.GetRackInfoByIDRequest{Id: &flowv1.UUID{Id: id}, WithComponents: true}))
	if err != nil {
		return view{}, err
	}
	d := rackData{Rack: res.GetRack(), ID: id, Comps: res.GetRack().GetComponents()}
	sort.SliceStable(d.Comps, func(i, j int) bool {
		return d.Comps[i].GetPosition().GetSlotId() < d.Comps[j].GetPosition().GetSlotId()
	})
	for _, cm := range d.Comps {
		if cm.GetLeakStatus() == flowv1.LeakStatus_LEAK_STATUS_DETECTED {
			d.Leaks++
		}
	}
	tasks, err := c.flow.ListTasks(apiCtx(r), (&flowv1.ListTasksRequest{RackId: &flowv1.UUID{Id: id}, Pagination: &flowv1.Pagination{Limit: 15}}))
	if err != nil {
		return view{}, err
	}
	d.Tasks = tasks.GetTasks()
	d.Active, d.LastFailed = headlineTasks(d.Tasks)
	if err := c.pool.QueryRow(r.Context(), `SELECT count(*) FROM component_leak cl JOIN component c ON c.id = cl.component_id
		WHERE c.rack_id = $1 AND c.deleted_at IS NULL AND cl.status = 'detected' AND cl.override_at IS NULL`, id).Scan(&d.HeldLeaks); err != nil {
		return view{}, fmt.Errorf("rack %s: open leaks: %w", id, err)
	}
	if d.Drift, _, err = c.drift(r.Context(), id, 100); err != nil {
		return view{}, err
	}
	d.Compliance, d.Firmware, d.FirmwareNote = c.rackDevices(r, id)
	if d.Placement, err = c.rackPlacement(r, id); err != nil {
		return view{}, err
	}
	return view{"rack", "Rack " + d.Rack.GetInfo().GetName(), "floor", []string{"racks", "leaks", "tasks", "sync", "firmware", "power"}, d}, nil
}

// headlineTasks picks from a rack's tasks (newest first) the one its
// header names: the running one (else the oldest queued one), and the
// newest finished one when it failed.
func headlineTasks(tasks []*flowv1.Task) (active, failed *flowv1.Task) {
	finished := false
	for _, t := range tasks {
		switch t.GetStatus() {
		case flowv1.TaskStatus_TASK_STATUS_RUNNING:
			if active == nil || active.GetStatus() != flowv1.TaskStatus_TASK_STATUS_RUNNING {
				active = t
			}
		case flowv1.TaskStatus_TASK_STATUS_PENDING, flowv1.TaskStatus_TASK_STATUS_WAITING:
			if active == nil || active.GetStatus() != flowv1.TaskStatus_TASK_STATUS_RUNNING {
				active = t // older queued ones come later: the oldest wins
			}
		default:
			if !finished {
				finished = true
				if t.GetStatus() == flowv1.TaskStatus_TASK_STATUS_FAILED {
					failed = t
				}
			}
		}
	}
	return active, failed
}

// ---- Tasks ----

func (c *Console) tasks(r *http.Request) (view, error) {
	active := r.URL.Query().Get("active") == "1"
	res, err := c.flow.ListTasks(apiCtx(r), (&flowv1.ListTasksRequest{ActiveOnly: active, Pagination: &flowv1.Pagination{Limit: 100}}))
	if err != nil {
		return view{}, err
	}
	names, err := c.rackNames(r.Context())
	if err != nil {
		return view{}, err
	}
	return view{"tasks", "Tasks", "tasks", tasksTopics, map[string]any{"Tasks": res.GetTasks(), "Active": active, "RackNames": names}}, nil
}

func (c *Console) rackNames(ctx context.Context) (map[string]string, error) {
	rows, err := c.pool.Query(ctx, `SELECT id::text, name FROM rack`)
	if err != nil {
		return nil, fmt.Errorf("read rack names: %w", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, name string
		if err := rows.Scan(&id, &name); err != nil {
			return nil, err
		}
		out[id] = name
	}
	return out, rows.Err()
}

// ---- Rollouts ----

func (c *Console) rollouts(r *http.Request) (view, error) {
	res, err := c.flow.ListOperationRuns(apiCtx(r), (&flowv1.ListOperationRunsRequest{Pagination: &flowv1.Pagination{Limit: 100}}))
	if err != nil {
		return view{}, err
	}
	return view{"rollouts", "Rollouts", "rollouts", rolloutsTopics, res.GetOperationRuns()}, nil
}

// ---- Schedules, event rules and leaks, sync ----

// windows lists the maintenance windows and freezes (docs/change-safety.md).
func (c *Console) windows(r *http.Request) (view, error) {
	res, err := c.admin.ListWindows(apiCtx(r), &adminv1.ListWindowsRequest{})
	if err != nil {
		return view{}, err
	}
	var ids []string
	for _, w := range res.GetWindows() {
		ids = append(ids, w.GetScope().GetRacks()...)
	}
	names := map[string]string{}
	if len(ids) > 0 {
		rows, err := c.pool.Query(r.Context(), `SELECT id::text, name FROM rack WHERE id = ANY($1::uuid[])`, ids)
		if err != nil {
			return view{}, fmt.Errorf("read rack names: %w", err)
		}
		for rows.Next() {
			var id, name string
			if err := rows.Scan(&id, &name); err != nil {
				rows.Close()
				return view{}, err
			}
			names[id] = name
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return view{}, err
		}
	}
	out := make([]windowRow, len(res.GetWindows()))
	for i, w := range res.GetWindows() {
		out[i].Window = w
		for _, id := range w.GetScope().GetRacks() {
			out[i].Racks = append(out[i].Racks, approvalRack{ID: id, Name: cmp.Or(names[id], id)})
		}
	}
	return view{"windows", "Windows and freezes", "windows", nil, out}, nil
}

// windowRow is a window with the racks of its scope by name.
type windowRow struct {
	*adminv1.Window
	Racks []approvalRack
}

// webhookView is the webhooks page: the subscriptions and the newest
// deliveries.
type webhookView struct {
	Webhooks   []*adminv1.Webhook
	Deliveries []*adminv1.WebhookDelivery
}

// webhooks lists the webhook subscriptions and their newest deliveries
// (docs/notifications.md).
func (c *Console) webhooks(r *http.Request) (view, error) {
	subs, err := c.admin.ListWebhooks(apiCtx(r), &adminv1.ListWebhooksRequest{})
	if err != nil {
		return view{}, err
	}
	ds, err := c.admin.ListWebhookDeliveries(apiCtx(r), &adminv1.ListWebhookDeliveriesRequest{Status: r.URL.Query().Get("status"), Limit: 100})
	if err != nil {
		return view{}, err
	}
	return view{"webhooks", "Webhooks", "webhooks", nil, webhookView{Webhooks: subs.GetWebhooks(), Deliveries: ds.GetDeliveries()}}, nil
}

func (c *Console) sync(r *http.Request) (view, error) {
	st, err := c.admin.GetSyncStatus(apiCtx(r), (&adminv1.GetSyncStatusRequest{}))
	d := map[string]any{}
	if err != nil {
		if connect.CodeOf(err) == connect.CodePermissionDenied {
			return view{}, err
		}
		d["Err"] = connectMessage(err)
	} else {
		d["Cycle"] = st.GetCycle()
	}
	drift, total, err := c.drift(r.Context(), "", 200)
	if err != nil {
		return view{}, err
	}
	d["Drift"], d["DriftTotal"] = drift, total
	return view{"sync", "Inventory sync", "sync", []string{"sync"}, d}, nil
}

// ---- helpers for templates ----

func connectMessage(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

func enumWord(s fmt.Stringer, prefix string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(s.String(), prefix)), "_", " ")
}

func ago(now time.Time, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	future := d < 0
	if future {
		d = -d
	}
	var s string
	switch {
	case d < time.Minute:
		s = fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		s = fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		s = fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		s = fmt.Sprintf("%dd", int(d.Hours()/24))
	}
	if future {
		return "in " + s
	}
	return s + " ago"
}

func parseTemplates() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"ts": func(t *timestamppb.Timestamp) time.Time {
			if t == nil {
				return time.Time{}
			}
			return t.AsTime()
		},
		"ago": ago,
		"utc": func(t time.Time) string {
			if t.IsZero() {
				return ""
			}
			return t.UTC().Format("2006-01-02 15:04:05Z")
		},
		"short":      shortID,
		"taskStatus": func(s flowv1.TaskStatus) string { return enumWord(s, "TASK_STATUS_") },
		"runStatus":  func(s flowv1.OperationRunStatus) string { return enumWord(s, "OPERATION_RUN_STATUS_") },
		"runReason":  func(s flowv1.OperationRunStatusReason) string { return enumWord(s, "OPERATION_RUN_STATUS_REASON_") },
		"targetStatus": func(s flowv1.OperationRunTargetStatus) string {
			return enumWord(s, "OPERATION_RUN_TARGET_STATUS_")
		},
		"compType": func(s flowv1.ComponentType) string { return enumWord(s, "COMPONENT_TYPE_") },
		"leak":     func(s flowv1.LeakStatus) string { return enumWord(s, "LEAK_STATUS_") },
		"leakHandling": func(s flowv1.LeakHandlingStatus) string {
			return enumWord(s, "LEAK_HANDLING_STATUS_")
		},
		"phase":  func(s flowv1.Phase) string { return enumWord(s, "PHASE_") },
		"opType": func(s flowv1.OperationType) string { return enumWord(s, "OPERATION_TYPE_") },
		"alerts": func(h *flowv1.HealthReport) int { return len(h.GetAlerts()) },
		"pct": func(a, b int) int {
			if b == 0 {
				return 0
			}
			return a * 100 / b
		},
		"isOperator": func(u User) bool { return u.Operator() },
		"stateClass": func(s string) string { return strings.TrimPrefix(s, "power-") },
		"spec": func(s *flowv1.ScheduleSpec) string {
			return enumWord(s.GetType(), "SCHEDULE_SPEC_TYPE_") + " " + s.GetSpec()
		},
		"durSecs": func(d interface{ AsDuration() time.Duration }) string {
			return d.AsDuration().Round(time.Millisecond).String()
		},
		"stateWord":       stateWord,
		"linkApproval":    linkApproval,
		"awaitedApproval": awaitedApproval,
		"approvalKind": func(k string) string {
			switch k {
			case "operation_run":
				return "operation_run (a rollout)"
			case "submission":
				return "submission (bulk tasks)"
			}
			return k
		},
		"int":        func(n int32) int { return int(n) },
		"feedAnchor": feedAnchor,
		"add":        func(a, b int) int { return a + b },
		"deref": func(t *time.Time) time.Time {
			if t == nil {
				return time.Time{}
			}
			return *t
		},
		"kw":        func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) },
		"plural":    plural,
		"csSummary": complianceSummary,
		"retryable": retryable,
		"versions": func(vs []string) string {
			if len(vs) == 0 {
				return "none reported"
			}
			return strings.Join(vs, ", ")
		},
		"diffWord": func(s string) string {
			switch s {
			case "upgrade":
				return "below"
			case "downgrade":
				return "above"
			}
			return s
		},
	}
	out := map[string]*template.Template{}
	for _, name := range []string{"overview", "floor", "compliance", "apply", "rack", "tasks", "task", "rollouts", "rollout", "search", "schedules", "windows", "webhooks", "approvals", "approval", "eventrules", "sync", "error", "work", "newrollout", "power"} {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console template %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}
