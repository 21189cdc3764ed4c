package console

import (
	"bytes"
	"context"
	"log/slog"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/db/dbtest"
	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
)

// The filters live in the URL: what the page reads it writes back, and
// every link keeps the other filters.
func TestComplianceFilterInTheURL(t *testing.T) {
	t.Parallel()
	q, err := url.ParseQuery("state=upgrade&type=compute&rack=demo-0001&row=02&hall=h1&offset=100&bogus=1")
	require.NoError(t, err)
	f := parseComplianceFilter(q)
	require.Equal(t, complianceFilter{States: []string{"upgrade"}, Type: "compute", Rack: "demo-0001", Row: "02", Hall: "h1", Offset: 100}, f)
	require.Equal(t, "/ui/compliance?hall=h1&offset=100&rack=demo-0001&row=02&state=upgrade&type=compute", f.URL())
	require.Equal(t, f, parseComplianceFilter(mustQuery(t, f.URL())), "what the page writes it reads back")

	req := f.request()
	require.Equal(t, []string{"upgrade"}, req.GetStates())
	require.Equal(t, []string{"demo-0001"}, req.GetRacks())
	require.Equal(t, "compute", req.GetComponentType())
	require.Equal(t, int32(100), req.GetOffset())
	require.Equal(t, int32(compliancePage), req.GetLimit())
	require.ElementsMatch(t, []string{"hall", "row", "nvl_domain", "rack"}, req.GetGroupBy())

	for _, tt := range []struct{ name, got, want string }{
		{"StateKeepsTheOtherFilters", f.WithState("unknown"), "/ui/compliance?hall=h1&rack=demo-0001&row=02&state=unknown&type=compute"},
		{"AnyState", f.WithState(""), "/ui/compliance?hall=h1&rack=demo-0001&row=02&type=compute"},
		{"Row", f.WithGroup("row", "hall-2/07", "hall-2 / 07"), "/ui/compliance?hall=hall-2&rack=demo-0001&row=07&state=upgrade&type=compute"},
		{"RowWithoutHall", complianceFilter{}.WithGroup("row", "/07", "07"), "/ui/compliance?row=07"},
		{"Rack", complianceFilter{}.WithGroup("rack", "5d7c…", "demo-0002"), "/ui/compliance?rack=demo-0002"},
		{"DomainWithoutName", complianceFilter{}.WithGroup("nvl_domain", "0b8e", ""), "/ui/compliance?domain=0b8e"},
		{"NextPage", f.Page(150), "/ui/compliance?hall=h1&offset=150&rack=demo-0001&row=02&state=upgrade&type=compute"},
		{"FirstPage", f.Page(-50), "/ui/compliance?hall=h1&rack=demo-0001&row=02&state=upgrade&type=compute"},
		{"Nothing", complianceFilter{}.URL(), "/ui/compliance"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.got)
		})
	}
	require.Equal(t, []string{"upgrade", "unknown"}, parseComplianceFilter(url.Values{"state": {"upgrade,unknown", "upgrade"}}).States)
	off := complianceFilter{}.WithState(offStates...)
	require.Equal(t, "/ui/compliance?state=updating%2Cupgrade%2Cdowngrade%2Cunknown", off)
	g := parseComplianceFilter(mustQuery(t, off))
	require.Equal(t, offStates, g.States)
	require.Equal(t, g.OffStates(), g.State(), "the state field says the not-at-baseline selection")
	require.True(t, f.Narrowed())
	require.False(t, complianceFilter{States: []string{"upgrade"}}.Narrowed(), "a state narrows only the table")
}

func mustQuery(t *testing.T, u string) url.Values {
	t.Helper()
	p, err := url.Parse(u)
	require.NoError(t, err)
	return p.Query()
}

func group(kind, name, state string, c *adminv1.ComplianceCounts) *adminv1.ComplianceGroup {
	return &adminv1.ComplianceGroup{Kind: kind, Key: name + "-id", Name: name, State: state, Counts: c}
}

// Roll-ups list the most urgent first: by state, then by how many devices
// are off the baseline, then by name; each kind is cut to a few unless
// all are asked for.
func TestRollUpsMostUrgentFirst(t *testing.T) {
	t.Parallel()
	groups := []*adminv1.ComplianceGroup{
		group("rack", "r-ok", "compliant", &adminv1.ComplianceCounts{Total: 35, Compliant: 35}),
		group("rack", "r-10", "upgrade", &adminv1.ComplianceCounts{Total: 35, Upgrade: 1, Compliant: 34}),
		group("rack", "r-9", "upgrade", &adminv1.ComplianceCounts{Total: 35, Upgrade: 1, Compliant: 34}),
		group("rack", "r-many", "upgrade", &adminv1.ComplianceCounts{Total: 35, Upgrade: 5, Compliant: 30}),
		group("rack", "r-up", "updating", &adminv1.ComplianceCounts{Total: 35, Updating: 2, Compliant: 33}),
		group("rack", "r-nc", "not_covered", &adminv1.ComplianceCounts{Total: 2, NotCovered: 2}),
		group("rack", "r-unk", "unknown", &adminv1.ComplianceCounts{Total: 35, Unknown: 3, Compliant: 32}),
		group("rack", "r-above", "downgrade", &adminv1.ComplianceCounts{Total: 35, Downgrade: 1, Compliant: 34}),
		group("hall", "h1", "upgrade", &adminv1.ComplianceCounts{Total: 70, Upgrade: 1}),
	}
	tables := groupTables(complianceFilter{}, groups)
	require.Equal(t, []string{"hall", "row", "nvl_domain", "rack"}, []string{tables[0].Kind, tables[1].Kind, tables[2].Kind, tables[3].Kind})
	var names []string
	for _, r := range tables[3].Rows {
		names = append(names, r.GetName())
	}
	require.Equal(t, []string{"r-up", "r-many", "r-9", "r-10", "r-above", "r-unk", "r-ok", "r-nc"}, names)
	require.Equal(t, "/ui/compliance?rack=r-many", tables[3].Rows[1].Filter)
	require.Equal(t, "5 of 35 devices below the baseline", tables[3].Rows[1].Summary)
	require.Empty(t, tables[1].Rows)

	var many []*adminv1.ComplianceGroup
	for range groupsShown + 3 {
		many = append(many, group("row", "r", "compliant", &adminv1.ComplianceCounts{Total: 1, Compliant: 1}))
	}
	cut := groupTables(complianceFilter{}, many)[1]
	require.Len(t, cut.Rows, groupsShown)
	require.Equal(t, 3, cut.More)
	require.Equal(t, groupsShown+3, cut.Total)
	require.Len(t, groupTables(complianceFilter{All: true}, many)[1].Rows, groupsShown+3)
}

// On the floor map a rack's compliance colour is said in words too.
func TestComplianceCellSaysItInWords(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name       string
		g          *adminv1.ComplianceGroup
		active     bool
		class, say string
	}{
		{"Below", group("rack", "a", "upgrade", &adminv1.ComplianceCounts{Total: 35, Upgrade: 2, Compliant: 33}), true, "cs-upgrade", "compliance below baseline: 2 of 35 devices below the baseline"},
		{"Above", group("rack", "a", "downgrade", &adminv1.ComplianceCounts{Total: 35, Downgrade: 1, Compliant: 34}), true, "cs-downgrade", "compliance above baseline: 1 of 35 devices above the baseline"},
		{"Updating", group("rack", "a", "updating", &adminv1.ComplianceCounts{Total: 35, Updating: 18}), true, "cs-updating", "compliance updating: 18 of 35 devices updating"},
		{"Compliant", group("rack", "a", "compliant", &adminv1.ComplianceCounts{Total: 35, Compliant: 27, NotCovered: 8}), true, "cs-compliant", "compliance compliant: 27 of 35 devices compliant, 8 not covered"},
		{"AllCompliant", group("rack", "a", "compliant", &adminv1.ComplianceCounts{Total: 35, Compliant: 35}), true, "cs-compliant", "compliance compliant: all 35 devices compliant"},
		{"NotCovered", group("rack", "a", "not_covered", &adminv1.ComplianceCounts{Total: 9, NotCovered: 9}), true, "cs-not_covered", "compliance not covered: none of 9 devices covered by the baseline"},
		{"NoDevices", nil, true, "cs-none", "compliance: no devices"},
		{"NoBaseline", nil, false, "cs-none", "compliance: no active baseline"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			class, say := complianceCell(tt.g, tt.active)
			require.Equal(t, tt.class, class)
			require.Equal(t, tt.say, say)
		})
	}
	for _, l := range complianceLegend {
		require.NotEmpty(t, l.Label, l.Class)
	}
}

func TestApplyFormRequest(t *testing.T) {
	t.Parallel()
	req, err := defaultApplyForm().request(true)
	require.NoError(t, err)
	require.Equal(t, &adminv1.ApplyBaselineRequest{CanaryRacks: 1, Waves: 2, MaxConcurrent: 10, MaxFailures: 1, DryRun: true}, req)
	req, err = applyForm{CanaryRacks: "4", Waves: "", MaxConcurrent: "3", MaxFailures: "2", IncludeDowngrades: true, RunName: "bring-up"}.request(false)
	require.NoError(t, err)
	require.Equal(t, &adminv1.ApplyBaselineRequest{CanaryRacks: 4, MaxConcurrent: 3, MaxFailures: 2, IncludeDowngrades: true, RunName: "bring-up"}, req)
	for _, tt := range []struct {
		form applyForm
		want string
	}{
		{applyForm{CanaryRacks: "0"}, `canary racks (canary_racks): give a whole number from 1 to 10000, not "0"`},
		{applyForm{Waves: "two"}, `waves after the canary (waves): give a whole number from 1 to 10000, not "two"`},
		{applyForm{MaxConcurrent: "-1"}, `racks at once (max_concurrent)`},
		{applyForm{MaxFailures: "1e3"}, `failures per wave (max_failures)`},
	} {
		_, err := tt.form.request(true)
		require.ErrorContains(t, err, tt.want)
	}
}

// A confirm runs only the plan that was reviewed.
func TestPlanFingerprint(t *testing.T) {
	t.Parallel()
	plan := func(racks ...string) *adminv1.ApplyBaselineResponse {
		return &adminv1.ApplyBaselineResponse{Message: "m", Racks: int32(len(racks)), Devices: 3, TargetVersion: `{"compute":{"bmc":"2.0"}}`,
			Waves: []*adminv1.ApplyWave{{Phase: 0, Racks: racks[:1]}, {Phase: 1, Racks: racks[1:]}}}
	}
	a := planFingerprint(plan("r1", "r2", "r3"))
	require.Len(t, a, 32)
	require.Equal(t, a, planFingerprint(plan("r1", "r2", "r3")))
	b := plan("r1", "r2", "r3")
	b.Message = "another message"
	require.Equal(t, a, planFingerprint(b), "the message is not the plan")
	require.NotEqual(t, a, planFingerprint(plan("r2", "r1", "r3")), "other waves")
	c := plan("r1", "r2", "r3")
	c.TargetVersion = `{"compute":{"bmc":"2.1"}}`
	require.NotEqual(t, a, planFingerprint(c), "other versions")
}

// The compliance page, its apply form and the floor map's colouring are
// accessible: headed tables, a label for every field, states in words
// beside their colours, and the apply controls only for operators.
func TestCompliancePagesRender(t *testing.T) {
	t.Parallel()
	tmpl, err := parseTemplates()
	require.NoError(t, err)
	now := time.Now()
	at := timestamppb.New(now.Add(-time.Hour))
	f := complianceFilter{States: []string{"upgrade"}}
	rep := &adminv1.GetComplianceResponse{Baseline: "gb200", Revision: 3, Total: 1, ComputedAt: timestamppb.New(now),
		Site: &adminv1.ComplianceCounts{Total: 3, Upgrade: 1, Updating: 1, Unknown: 1},
		Devices: []*adminv1.DeviceCompliance{{ComponentId: "c1", Name: "tray-3", ComponentType: "compute", RackId: "r1", RackName: "demo-0001",
			State: "upgrade", SeenAt: at, Differences: []*adminv1.SubComponentCompliance{{Component: "bmc", State: "upgrade", Desired: "2.0", Installed: []string{"1.0"}}}}},
		Groups: []*adminv1.ComplianceGroup{group("rack", "demo-0001", "upgrade", &adminv1.ComplianceCounts{Total: 3, Upgrade: 1})}}
	active := &adminv1.Baseline{Name: "gb200", Revision: 3, ActiveRevision: 3, LatestRevision: 3, ActivatedBy: "olivia", ActivatedAt: at, CreatedAt: at,
		History: []*adminv1.BaselineRevision{{Revision: 3, CreatedAt: at, CreatedBy: "olivia"}},
		Entries: []*adminv1.BaselineEntry{{ComponentType: "compute", Component: "bmc", Version: "2.0"}}}
	d := &complianceData{Filter: f, Active: active, Report: rep, Baselines: []*adminv1.Baseline{active}, States: complianceStates, Types: complianceTypes,
		RackNames: []string{"demo-0001"}, Groups: groupTables(f, rep.GetGroups())}
	for _, s := range complianceStates {
		d.Counts = append(d.Counts, stateCount{State: s, N: countOf(rep.GetSite(), s), Link: f.WithState(s), Current: s == "upgrade"})
	}
	d.Off = stateCount{N: 3, Link: f.WithState(offStates...)}
	render := func(name string, u User, data any) string {
		var b bytes.Buffer
		require.NoError(t, tmpl[name].ExecuteTemplate(&b, "layout", pageData{Title: name, Nav: "compliance", User: u, CSRF: "tok", Data: data, Now: now}))
		return b.String()
	}
	operator, viewer := User{Identity: "olivia", Role: "operator"}, User{Identity: "victor", Role: "viewer"}

	page := render("compliance", operator, d)
	accessible(t, page)
	require.Contains(t, page, `<a href="/ui/compliance" aria-current="page">Compliance</a>`)
	require.Contains(t, page, `Active baseline <strong>gb200</strong> revision <strong>3</strong>`)
	require.Contains(t, page, `activated by olivia`)
	require.Contains(t, page, `<span class="cs cs-upgrade">below baseline</span>`, "the state in words beside its colour")
	require.Contains(t, page, `<code>bmc</code> 1.0 → 2.0`)
	require.Contains(t, page, `href="/ui/racks/r1">demo-0001</a>`)
	require.Contains(t, page, `href="/ui/compliance?state=unknown"`, "each count filters the table")
	require.Contains(t, page, `id="apply-plan"`)
	require.Contains(t, page, `<span class="big">3</span> not at baseline`)
	require.NotContains(t, render("compliance", viewer, d), `id="apply-plan"`, "a viewer gets no apply control")

	none := render("compliance", viewer, &complianceData{States: complianceStates, Types: complianceTypes})
	accessible(t, none)
	require.Contains(t, none, "No baseline is active")
	require.Contains(t, none, "flow baseline activate NAME")

	plan := &adminv1.ApplyBaselineResponse{Message: "3 racks in 2 waves", Racks: 3, Devices: 4, Waves: []*adminv1.ApplyWave{{Phase: 0, Racks: []string{"demo-0001"}}, {Phase: 1, Racks: []string{"demo-0002", "demo-0003"}}}}
	apply := render("apply", operator, applyData{Form: defaultApplyForm(), Active: active, Plan: plan, Fingerprint: planFingerprint(plan)})
	accessible(t, apply)
	require.Contains(t, apply, `<td>canary (0)</td><td class="num">1</td><td>demo-0001</td>`)
	require.Contains(t, apply, `name="plan" value="`+planFingerprint(plan)+`"`)
	require.Contains(t, apply, `name="csrf" value="tok"`)
	require.Contains(t, apply, `id="apply-confirm"`)
	require.Contains(t, apply, `Create the rollout (3 racks, 2 waves)`)
}

// accessible checks what every page owes a screen reader: each table
// headed, each header scoped, each field labelled.
func accessible(t *testing.T, page string) {
	t.Helper()
	require.Equal(t, len(regexp.MustCompile(`<table`).FindAllString(page, -1)), len(regexp.MustCompile(`<thead>`).FindAllString(page, -1)), "every table is headed")
	require.NotRegexp(t, `<th(?: class="num")?>`, page, "every header is scoped")
	labels := map[string]bool{}
	for _, m := range regexp.MustCompile(`<label for="([^"]+)"`).FindAllStringSubmatch(page, -1) {
		labels[m[1]] = true
	}
	for _, m := range regexp.MustCompile(`<(?:input|select)([^>]*)>`).FindAllStringSubmatch(page, -1) {
		attrs := m[1]
		if regexp.MustCompile(`type="(hidden|checkbox)"`).MatchString(attrs) {
			continue // hidden fields; checkboxes sit inside their label
		}
		id := regexp.MustCompile(`id="([^"]+)"`).FindStringSubmatch(attrs)
		require.NotNil(t, id, "a field without an id: %s", m[0])
		require.True(t, labels[id[1]], "no label for %s", id[1])
	}
}

// A baseline's new revision or activation is a change of the "firmware"
// topic: the compliance page, the floor map and rack pages hear of it.
func TestFeedHearsBaselineChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := db.Open(ctx, dbtest.NewDB(t), db.PoolConfig{MaxConns: 2})
	require.NoError(t, err)
	defer pool.Close()
	f := NewFeed(pool, 20*time.Millisecond, slog.New(slog.DiscardHandler))
	defer f.Close()
	s := f.Subscribe([]string{"firmware"})
	require.Eventually(t, func() bool { _, live := f.Generation("firmware"); return live }, 10*time.Second, 5*time.Millisecond)
	hear := func(what string) {
		t.Helper()
		select {
		case <-s.C:
			require.Equal(t, []string{"firmware"}, s.Take(), what)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the page heard nothing", what)
		}
	}
	_, err = pool.Exec(ctx, `INSERT INTO firmware_baseline (id, name, revision) VALUES ('00000000-0000-0000-0000-00000000000b', 'gb200', 1)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO firmware_baseline_revision (baseline_id, revision, entries) VALUES ('00000000-0000-0000-0000-00000000000b', 1, '[]')`)
	require.NoError(t, err)
	hear("a new baseline")
	_, err = pool.Exec(ctx, `INSERT INTO firmware_baseline_activation (baseline_id, revision) VALUES ('00000000-0000-0000-0000-00000000000b', 1)`)
	require.NoError(t, err)
	hear("an activation")
	_, err = pool.Exec(ctx, `INSERT INTO firmware_baseline_revision (baseline_id, revision, entries) VALUES ('00000000-0000-0000-0000-00000000000b', 2, '[]');
		UPDATE firmware_baseline SET revision = 2`)
	require.NoError(t, err)
	hear("a new revision")
}
