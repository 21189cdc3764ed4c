package console

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
)

// Compliance states, most urgent first (firmware/baseline.States: a
// roll-up's state is its most urgent device's).
var complianceStates = []string{"updating", "upgrade", "downgrade", "unknown", "compliant", "not_covered"}

// offStates are the states of a device not known to be at the baseline,
// the page's "not at baseline" selection.
var offStates = []string{"updating", "upgrade", "downgrade", "unknown"}

// complianceTypes are the component types a baseline covers.
var complianceTypes = []string{"compute", "nvswitch", "powershelf"}

// stateWord says a compliance state in words.
func stateWord(s string) string {
	switch s {
	case "upgrade":
		return "below baseline"
	case "downgrade":
		return "above baseline"
	case "not_covered":
		return "not covered"
	case "":
		return "no devices"
	}
	return s
}

func stateRank(s string) int {
	if i := slices.Index(complianceStates, s); i >= 0 {
		return i
	}
	return len(complianceStates)
}

// countOf returns c's count of state.
func countOf(c *adminv1.ComplianceCounts, state string) int32 {
	switch state {
	case "compliant":
		return c.GetCompliant()
	case "upgrade":
		return c.GetUpgrade()
	case "downgrade":
		return c.GetDowngrade()
	case "unknown":
		return c.GetUnknown()
	case "updating":
		return c.GetUpdating()
	case "not_covered":
		return c.GetNotCovered()
	}
	return 0
}

// notAtBaseline counts c's devices that are not known to be at the
// baseline: below, above, unknown or updating.
func notAtBaseline(c *adminv1.ComplianceCounts) int32 {
	return c.GetUpgrade() + c.GetDowngrade() + c.GetUnknown() + c.GetUpdating()
}

// byUrgency orders roll-up groups most urgent first: by state, then by
// how many devices are not at the baseline, then by name.
func byUrgency(a, b *adminv1.ComplianceGroup) int {
	return cmp.Or(cmp.Compare(stateRank(a.GetState()), stateRank(b.GetState())),
		cmp.Compare(notAtBaseline(b.GetCounts()), notAtBaseline(a.GetCounts())),
		cmp.Compare(countOf(b.GetCounts(), a.GetState()), countOf(a.GetCounts(), a.GetState())),
		natCompare(a.GetName(), b.GetName()))
}

func natCompare(a, b string) int {
	switch {
	case a == b:
		return 0
	case natLess(a, b):
		return -1
	}
	return 1
}

// complianceSummary says a roll-up's counts in words: what makes its
// state, and how many devices it has.
func complianceSummary(state string, c *adminv1.ComplianceCounts) string {
	n := c.GetTotal()
	switch state {
	case "":
		return "no devices"
	case "updating":
		return fmt.Sprintf("%d of %d devices updating", c.GetUpdating(), n)
	case "upgrade":
		return fmt.Sprintf("%d of %d devices below the baseline", c.GetUpgrade(), n)
	case "downgrade":
		return fmt.Sprintf("%d of %d devices above the baseline", c.GetDowngrade(), n)
	case "unknown":
		return fmt.Sprintf("%d of %d devices unknown", c.GetUnknown(), n)
	case "compliant":
		if c.GetNotCovered() > 0 {
			return fmt.Sprintf("%d of %d devices compliant, %d not covered", c.GetCompliant(), n, c.GetNotCovered())
		}
		return fmt.Sprintf("all %d devices compliant", n)
	case "not_covered":
		return fmt.Sprintf("none of %d devices covered by the baseline", n)
	}
	return state
}

// ---- Filters ----

// complianceFilter is the compliance page's selection, read from and
// written to its URL query, so that a filtered view can be shared.
type complianceFilter struct {
	States                        []string
	Type, Rack, Domain, Row, Hall string
	Offset                        int
	// All lists every roll-up group, not only the most urgent.
	All bool
}

// compliancePage is how many devices a page of the table shows.
const compliancePage = 50

// groupsShown is how many roll-up groups of each kind the page lists
// unless asked for all.
const groupsShown = 10

func parseComplianceFilter(q url.Values) complianceFilter {
	f := complianceFilter{Type: strings.TrimSpace(q.Get("type")), Rack: strings.TrimSpace(q.Get("rack")),
		Domain: strings.TrimSpace(q.Get("domain")), Row: strings.TrimSpace(q.Get("row")), Hall: strings.TrimSpace(q.Get("hall")),
		All: q.Get("all") == "1"}
	for _, s := range q["state"] {
		for _, s := range strings.Split(s, ",") {
			if s = strings.TrimSpace(s); s != "" && !slices.Contains(f.States, s) {
				f.States = append(f.States, s)
			}
		}
	}
	if n, err := strconv.Atoi(q.Get("offset")); err == nil && n > 0 {
		f.Offset = n
	}
	return f
}

// request is the GetCompliance call of f: one page of devices and every
// roll-up.
func (f complianceFilter) request() *adminv1.GetComplianceRequest {
	req := &adminv1.GetComplianceRequest{States: f.States, ComponentType: f.Type, NvlDomain: f.Domain, Row: f.Row, Hall: f.Hall,
		Offset: int32(f.Offset), Limit: compliancePage, GroupBy: []string{"hall", "row", "nvl_domain", "rack"}}
	if f.Rack != "" {
		req.Racks = []string{f.Rack}
	}
	return req
}

// Narrowed reports whether f selects less than the whole site (states
// aside: they narrow only the table).
func (f complianceFilter) Narrowed() bool {
	return f.Type != "" || f.Rack != "" || f.Domain != "" || f.Row != "" || f.Hall != ""
}

// State returns the state selection as the state field says it: one
// state, several joined by commas, "" for any.
func (f complianceFilter) State() string { return strings.Join(f.States, ",") }

// OffStates is the "not at baseline" selection as the state field says it.
func (f complianceFilter) OffStates() string { return strings.Join(offStates, ",") }

// URL is the page's address for f.
func (f complianceFilter) URL() string {
	q := url.Values{}
	if len(f.States) > 0 {
		q.Set("state", strings.Join(f.States, ","))
	}
	for k, v := range map[string]string{"type": f.Type, "rack": f.Rack, "domain": f.Domain, "row": f.Row, "hall": f.Hall} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.Offset > 0 {
		q.Set("offset", strconv.Itoa(f.Offset))
	}
	if f.All {
		q.Set("all", "1")
	}
	if len(q) == 0 {
		return Prefix + "compliance"
	}
	return Prefix + "compliance?" + q.Encode()
}

// WithState is f's address with the table narrowed to states (none:
// every state), from its first page.
func (f complianceFilter) WithState(states ...string) string {
	f.States, f.Offset = nil, 0
	for _, s := range states {
		if s != "" {
			f.States = append(f.States, s)
		}
	}
	return f.URL()
}

// WithGroup is f's address narrowed to one roll-up group (kind and key as
// GetCompliance returns them; name is the group's name), from the first
// page.
func (f complianceFilter) WithGroup(kind, key, name string) string {
	f.Offset = 0
	switch kind {
	case "rack":
		f.Rack = cmp.Or(name, key)
	case "nvl_domain":
		f.Domain = cmp.Or(name, key)
	case "row":
		// The row's key is "hall/row".
		i := strings.LastIndex(key, "/")
		f.Hall, f.Row = key[:max(i, 0)], key[i+1:]
	case "hall":
		f.Hall = key
	}
	return f.URL()
}

// Page is f's address at offset.
func (f complianceFilter) Page(offset int) string {
	f.Offset = max(offset, 0)
	return f.URL()
}

// ShowAll is f's address listing every roll-up group.
func (f complianceFilter) ShowAll() string {
	f.All = true
	return f.URL()
}

// ---- The compliance page ----

type complianceData struct {
	Filter   complianceFilter
	Active   *adminv1.Baseline // nil: no baseline is active
	Err      string            // a filter the API refused
	Report   *adminv1.GetComplianceResponse
	Counts   []stateCount
	Off      stateCount // the devices not at the baseline
	Groups   []groupTable
	From, To int
	Prev     string
	Next     string
	// Baselines are every baseline with its revision history.
	Baselines []*adminv1.Baseline
	RackNames []string
	States    []string
	Types     []string
}

type stateCount struct {
	State   string
	N       int32
	Link    string
	Current bool
}

type groupTable struct {
	Kind, Title, Noun string
	Rows              []groupRow
	More              int // groups not listed
	Total             int
}

type groupRow struct {
	*adminv1.ComplianceGroup
	Filter  string // the page narrowed to the group
	Summary string
}

var groupTitles = []struct{ kind, title, noun string }{
	{"hall", "Halls", "halls"}, {"row", "Rows", "rows"}, {"nvl_domain", "NVLink domains", "domains"}, {"rack", "Racks", "racks"},
}

// complianceTopics are the changes that change the compliance page: the
// sync (installed versions), tasks (updating), baselines and activations.
var complianceTopics = []string{"sync", "tasks", "firmware"}

func (c *Console) compliance(r *http.Request) (view, error) {
	f := parseComplianceFilter(r.URL.Query())
	d := complianceData{Filter: f, States: complianceStates, Types: complianceTypes}
	ctx := apiCtx(r)
	v := view{"compliance", "Firmware compliance", "compliance", complianceTopics, &d}
	list, err := c.admin.ListBaselines(ctx, &adminv1.ListBaselinesRequest{})
	if err != nil {
		return view{}, err
	}
	for _, b := range list.GetBaselines() {
		full, err := c.admin.GetBaseline(ctx, &adminv1.GetBaselineRequest{Name: b.GetName()})
		if err != nil {
			return view{}, err
		}
		d.Baselines = append(d.Baselines, full.GetBaseline())
	}
	act, err := c.admin.GetBaseline(ctx, &adminv1.GetBaselineRequest{})
	switch {
	case connect.CodeOf(err) == connect.CodeFailedPrecondition:
		return v, nil // no baseline is active: the page says how to activate one
	case err != nil:
		return view{}, err
	}
	d.Active = act.GetBaseline()
	names, err := c.rackNames(r.Context())
	if err != nil {
		return view{}, err
	}
	for _, n := range names {
		d.RackNames = append(d.RackNames, n)
	}
	slices.SortFunc(d.RackNames, natCompare)

	rep, err := c.admin.GetCompliance(ctx, f.request())
	if err != nil {
		switch connect.CodeOf(err) {
		case connect.CodeInvalidArgument, connect.CodeNotFound:
			d.Err = connectMessage(err) // a bad filter: said beside the filters
			return v, nil
		}
		return view{}, err
	}
	d.Report = rep
	for _, s := range complianceStates {
		d.Counts = append(d.Counts, stateCount{State: s, N: countOf(rep.GetSite(), s), Link: f.WithState(s), Current: f.State() == s})
	}
	d.Off = stateCount{N: notAtBaseline(rep.GetSite()), Link: f.WithState(offStates...), Current: f.State() == f.OffStates()}
	d.Groups = groupTables(f, rep.GetGroups())
	if n := len(rep.GetDevices()); n > 0 {
		d.From, d.To = f.Offset+1, f.Offset+n
	}
	if f.Offset > 0 {
		d.Prev = f.Page(f.Offset - compliancePage)
	}
	if int32(f.Offset+len(rep.GetDevices())) < rep.GetTotal() {
		d.Next = f.Page(f.Offset + compliancePage)
	}
	return v, nil
}

// groupTables splits the roll-ups by kind, most urgent first, each cut to
// groupsShown unless f asks for all.
func groupTables(f complianceFilter, groups []*adminv1.ComplianceGroup) []groupTable {
	var out []groupTable
	for _, gt := range groupTitles {
		t := groupTable{Kind: gt.kind, Title: gt.title, Noun: gt.noun}
		var gs []*adminv1.ComplianceGroup
		for _, g := range groups {
			if g.GetKind() == gt.kind {
				gs = append(gs, g)
			}
		}
		slices.SortStableFunc(gs, byUrgency)
		t.Total = len(gs)
		if !f.All && len(gs) > groupsShown {
			t.More = len(gs) - groupsShown
			gs = gs[:groupsShown]
		}
		for _, g := range gs {
			t.Rows = append(t.Rows, groupRow{ComplianceGroup: g, Filter: f.WithGroup(g.GetKind(), g.GetKey(), g.GetName()),
				Summary: complianceSummary(g.GetState(), g.GetCounts())})
		}
		out = append(out, t)
	}
	return out
}

// ---- Apply ----

// applyForm is the apply form's fields, as entered.
type applyForm struct {
	CanaryRacks, Waves, MaxConcurrent, MaxFailures string
	IncludeDowngrades                              bool
	RunName                                        string
}

func defaultApplyForm() applyForm {
	return applyForm{CanaryRacks: "1", Waves: "2", MaxConcurrent: "10", MaxFailures: "1"}
}

func readApplyForm(r *http.Request) applyForm {
	return applyForm{CanaryRacks: strings.TrimSpace(r.PostFormValue("canary_racks")), Waves: strings.TrimSpace(r.PostFormValue("waves")),
		MaxConcurrent: strings.TrimSpace(r.PostFormValue("max_concurrent")), MaxFailures: strings.TrimSpace(r.PostFormValue("max_failures")),
		IncludeDowngrades: r.PostFormValue("include_downgrades") == "1", RunName: strings.TrimSpace(r.PostFormValue("run_name"))}
}

// request is the ApplyBaseline call of the form (always the active
// baseline: the one the compliance page shows).
func (a applyForm) request(dryRun bool) (*adminv1.ApplyBaselineRequest, error) {
	num := func(field, label, s string, least int) (int32, error) {
		if s == "" {
			return 0, nil
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < least || n > 10000 {
			return 0, fmt.Errorf("%s (%s): give a whole number from %d to 10000, not %q", label, field, least, s)
		}
		return int32(n), nil
	}
	req := &adminv1.ApplyBaselineRequest{RunName: a.RunName, IncludeDowngrades: a.IncludeDowngrades, DryRun: dryRun}
	var err error
	if req.CanaryRacks, err = num("canary_racks", "canary racks", a.CanaryRacks, 1); err != nil {
		return nil, err
	}
	if req.Waves, err = num("waves", "waves after the canary", a.Waves, 1); err != nil {
		return nil, err
	}
	if req.MaxConcurrent, err = num("max_concurrent", "racks at once", a.MaxConcurrent, 1); err != nil {
		return nil, err
	}
	if req.MaxFailures, err = num("max_failures", "failures per wave", a.MaxFailures, 1); err != nil {
		return nil, err
	}
	return req, nil
}

// planFingerprint identifies a planned apply: its waves, racks, devices
// and target versions. The confirm carries the fingerprint of the plan the
// operator reviewed; a plan that changed since is shown again, not run.
func planFingerprint(p *adminv1.ApplyBaselineResponse) string {
	q := &adminv1.ApplyBaselineResponse{Waves: p.GetWaves(), Racks: p.GetRacks(), Devices: p.GetDevices(), TargetVersion: p.GetTargetVersion()}
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(q)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

type applyData struct {
	Form        applyForm
	Active      *adminv1.Baseline
	Err         string
	Plan        *adminv1.ApplyBaselineResponse // the dry run; nil before one
	Fingerprint string
}

// applyPage is the apply form (GET): the dry run comes first.
func (c *Console) applyPage(r *http.Request) (view, error) {
	if !userFrom(r.Context()).Operator() {
		return view{}, connect.NewError(connect.CodePermissionDenied, errors.New("applying a baseline needs role operator"))
	}
	d := applyData{Form: defaultApplyForm()}
	act, err := c.admin.GetBaseline(apiCtx(r), &adminv1.GetBaselineRequest{})
	if err != nil && connect.CodeOf(err) != connect.CodeFailedPrecondition {
		return view{}, err
	}
	d.Active = act.GetBaseline()
	return view{"apply", "Apply the baseline", "compliance", nil, d}, nil
}

// applyBaseline is the apply form's post: without confirm a dry run,
// shown with its waves and a confirm button; with confirm the run itself,
// when the plan is still the one reviewed, then the run's page.
func (c *Console) applyBaseline(w http.ResponseWriter, r *http.Request) {
	u := userFrom(r.Context())
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if !c.sameSiteOr403(w, r, u) {
		return
	}
	ctx := apiCtx(r)
	d := applyData{Form: readApplyForm(r)}
	show := func(status int, notice string) {
		c.render(w, r, status, "apply", pageData{Title: "Apply the baseline", Nav: "compliance", User: u, CSRF: csrfToken(w, r),
			Open: c.opts.Open, Notice: notice, Data: d, Now: time.Now()})
	}
	if act, err := c.admin.GetBaseline(ctx, &adminv1.GetBaselineRequest{}); err == nil {
		d.Active = act.GetBaseline()
	} else if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		c.fail(w, r, u, statusOf(err), err)
		return
	}
	req, err := d.Form.request(true)
	if err != nil {
		d.Err = err.Error()
		show(http.StatusUnprocessableEntity, "")
		return
	}
	plan, err := c.admin.ApplyBaseline(ctx, req)
	if err != nil {
		switch connect.CodeOf(err) {
		case connect.CodeInvalidArgument, connect.CodeFailedPrecondition:
			d.Err = connectMessage(err)
			show(http.StatusConflict, "")
			return
		}
		c.fail(w, r, u, statusOf(err), err)
		return
	}
	d.Plan, d.Fingerprint = plan, planFingerprint(plan)
	if r.PostFormValue("confirm") != "1" {
		show(http.StatusOK, "")
		return
	}
	if reviewed := r.PostFormValue("plan"); reviewed != d.Fingerprint {
		show(http.StatusConflict, "The plan changed since you reviewed it (the site's compliance or the baseline moved on): review this one, then create the run.")
		return
	}
	if len(plan.GetWaves()) == 0 {
		http.Redirect(w, r, Prefix+"compliance?notice="+url.QueryEscape(plan.GetMessage()), http.StatusSeeOther)
		return
	}
	req.DryRun = false
	res, err := c.admin.ApplyBaseline(ctx, req)
	if err != nil {
		c.fail(w, r, u, statusOf(err), err)
		return
	}
	if res.GetRunId() == "" {
		http.Redirect(w, r, Prefix+"compliance?notice="+url.QueryEscape(res.GetMessage()), http.StatusSeeOther)
		return
	}
	notice := cmp.Or(res.GetMessage(), "run created")
	http.Redirect(w, r, Prefix+"rollouts/"+url.PathEscape(res.GetRunId())+"?notice="+url.QueryEscape(notice), http.StatusSeeOther)
}

// ---- The floor map's compliance colouring and the rack's devices ----

// rackCompliance returns every rack's roll-up under the active baseline
// (one GetCompliance for the whole site, by rack ID), and what to say
// instead when there is none.
func (c *Console) rackCompliance(r *http.Request) (map[string]*adminv1.ComplianceGroup, *adminv1.GetComplianceResponse, string, error) {
	res, err := c.admin.GetCompliance(apiCtx(r), &adminv1.GetComplianceRequest{Limit: 1, GroupBy: []string{"rack"}})
	if connect.CodeOf(err) == connect.CodeFailedPrecondition {
		return nil, nil, "No firmware baseline is active, so no rack has a compliance state: activate one with flow baseline activate NAME.", nil
	} else if err != nil {
		return nil, nil, "", err
	}
	out := make(map[string]*adminv1.ComplianceGroup, len(res.GetGroups()))
	for _, g := range res.GetGroups() {
		if g.GetKind() == "rack" {
			out[g.GetKey()] = g
		}
	}
	return out, res, "", nil
}

// complianceCell is a rack's colour class and words under the compliance
// colouring; g is its roll-up (nil: no devices a baseline could cover).
func complianceCell(g *adminv1.ComplianceGroup, active bool) (string, string) {
	if !active {
		return "cs-none", "compliance: no active baseline"
	}
	if g == nil || g.GetState() == "" {
		return "cs-none", "compliance: no devices"
	}
	return "cs-" + g.GetState(), "compliance " + stateWord(g.GetState()) + ": " + complianceSummary(g.GetState(), g.GetCounts())
}

var complianceLegend = []legendItem{
	{"cs-updating", "updating"}, {"cs-upgrade", "below baseline"}, {"cs-downgrade", "above baseline"}, {"cs-unknown", "unknown"},
	{"cs-compliant", "compliant"}, {"cs-not_covered", "not covered"}, {"cs-none", "no devices or no baseline"},
}

// rackDevices returns the compliance of rack id's devices by component
// ID, and its roll-up; note says why there is none.
func (c *Console) rackDevices(r *http.Request, id string) (map[string]*adminv1.DeviceCompliance, *adminv1.ComplianceGroup, string) {
	res, err := c.admin.GetCompliance(apiCtx(r), &adminv1.GetComplianceRequest{Racks: []string{id}, Limit: 1000, GroupBy: []string{"rack"}})
	if connect.CodeOf(err) == connect.CodeFailedPrecondition {
		return nil, nil, "No firmware baseline is active."
	} else if err != nil {
		return nil, nil, "Compliance unavailable: " + connectMessage(err)
	}
	out := make(map[string]*adminv1.DeviceCompliance, len(res.GetDevices()))
	for _, d := range res.GetDevices() {
		out[d.GetComponentId()] = d
	}
	var g *adminv1.ComplianceGroup
	for _, x := range res.GetGroups() {
		if x.GetKind() == "rack" {
			g = x
		}
	}
	return out, g, fmt.Sprintf("Against baseline %s revision %d.", res.GetBaseline(), res.GetRevision())
}
