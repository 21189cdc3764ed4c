package app

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
	"github.com/nicoflow/flow/proto/gen/flow/admin/v1/adminv1connect"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// TestPowerBudgetHoldsFeedTransitions (issue 45): 40 racks of feed bw-a
// powered on at once under a budget of 4 transitions never have more than
// 4 racks in transition in the Core simulator's journal (from a rack's
// first power-control call to its last), and all 40 finish; the waiting
// tasks say why in their reports; 8 racks of feed bw-b started at the same
// time never wait (bw-b's budget of 10 covers them) and all start in the
// first wave; a power-off of a bw-a rack while bw-a's budget is full is
// not held (it ends while bw-a's wave still has racks waiting); the
// metric shows the feed's limit and use.
func TestPowerBudgetHoldsFeedTransitions(t *testing.T) {
	t.Parallel()
	e := startE2E(t, time.Millisecond, withAdmin)
	ctx := context.Background()
	admin := adminv1connect.NewAdminServiceClient(http.DefaultClient, e.url)
	// Present from the start for a configured feed (set below, before any
	// transition).
	var aNames, bNames []string
	macs := map[string]string{} // BMC MAC → rack name
	add := func(i int, feed string, off bool) string {
		r := e.addRack(t, i, off)
		for _, c := range r.Components {
			for _, b := range c.BMCs {
				macs[strings.ToLower(b.MAC.String())] = r.Name
			}
		}
		_, err := admin.SetRackPlacement(ctx, &adminv1.SetRackPlacementRequest{Rack: r.Name, PowerFeed: &feed, CoolantLoop: ptr("cdu-" + feed)})
		require.NoError(t, err)
		return r.Name
	}
	for i := range 40 {
		aNames = append(aNames, add(i, "bw-a", true))
	}
	for i := range 8 {
		bNames = append(bNames, add(100+i, "bw-b", true))
	}
	offRack := add(200, "bw-a", false) // powered on: powered off during the wave

	_, err := admin.SetPowerBudget(ctx, &adminv1.SetPowerBudgetRequest{Feed: "bw-a", MaxTransitions: 4})
	require.NoError(t, err)
	_, err = admin.SetPowerBudget(ctx, &adminv1.SetPowerBudgetRequest{Feed: "bw-b", MaxTransitions: 10, MaxKw: ptr(2000.0)})
	require.NoError(t, err)

	// Both feeds at once, in one request.
	res, err := e.client.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(append(slices.Clone(aNames), bNames...)...)})
	require.NoError(t, err)
	require.Len(t, res.GetTaskIds(), 48)

	// While the wave runs: bw-a's use never exceeds its limit; some task
	// waits with the reason in its report; no bw-b task ever waits.
	// The console's budget page, fetched alongside, lists bw-a's waiting
	// steps linked to their tasks, and never a waiting step of bw-b.
	var mu sync.Mutex
	var reasons []string
	maxInUse := 0
	var sawPage bool
	var pageProblem string
	aTasks := map[string]bool{}
	for _, id := range res.GetTaskIds()[:40] {
		aTasks[id.GetId()] = true
	}
	taskLink := regexp.MustCompile(`<a href="/ui/tasks/([0-9a-f-]{36})">`)
	stop := make(chan struct{})
	var watch sync.WaitGroup
	watch.Add(1)
	go func() {
		defer watch.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			l, err := admin.ListPowerBudgets(ctx, &adminv1.ListPowerBudgetsRequest{})
			if err != nil {
				continue
			}
			tasks, err := e.client.GetTasksByIDs(ctx, &flowv1.GetTasksByIDsRequest{TaskIds: res.GetTaskIds()})
			page := ""
			if r, perr := http.Get(e.url + "/ui/power?live=0"); perr == nil {
				b, _ := io.ReadAll(r.Body)
				r.Body.Close()
				page = string(b)
			}
			mu.Lock()
			if strings.Contains(page, `Waiting for feed <a href="#feed-bw-b">`) {
				pageProblem = "the budget page lists a step waiting for bw-b"
			}
			if i := strings.Index(page, `Waiting for feed <a href="#feed-bw-a">bw-a</a>`); i >= 0 {
				for _, m := range taskLink.FindAllStringSubmatch(page[i:], -1) {
					sawPage = sawPage || aTasks[m[1]]
				}
			}
			for _, b := range l.GetBudgets() {
				if b.GetFeed() == "bw-a" {
					maxInUse = max(maxInUse, int(b.GetTransitionsInUse()))
				}
			}
			if err == nil {
				for _, task := range tasks.GetTasks() {
					if i := strings.Index(task.GetReport(), "waiting for "); i >= 0 {
						reasons = append(reasons, task.GetReport()[i:min(len(task.GetReport()), i+120)])
					}
				}
			}
			mu.Unlock()
		}
	}()

	// A power off on bw-a once its budget is full and racks wait.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(reasons) > 0
	}, 60*time.Second, 10*time.Millisecond)
	off, err := e.client.PowerOffRack(ctx, &flowv1.PowerOffRackRequest{TargetSpec: rackSpec(offRack)})
	require.NoError(t, err)
	offTask := e.wait(t, off.GetTaskIds()[0])
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_COMPLETED, offTask.GetStatus(), offTask.GetMessage())

	var lastA time.Time
	for i, id := range res.GetTaskIds() {
		task := e.wait(t, id)
		require.Equal(t, flowv1.TaskStatus_TASK_STATUS_COMPLETED, task.GetStatus(), task.GetMessage())
		if i < 40 && task.GetFinishedAt().AsTime().After(lastA) {
			lastA = task.GetFinishedAt().AsTime()
		}
	}
	close(stop)
	watch.Wait()
	require.True(t, offTask.GetFinishedAt().AsTime().Before(lastA), "the power off waited for bw-a's wave")

	mu.Lock()
	require.LessOrEqual(t, maxInUse, 4)
	require.True(t, sawPage, "the console's budget page listed a bw-a step waiting, linked to its task")
	require.Empty(t, pageProblem)
	for _, r := range reasons {
		require.Regexp(t, `^waiting for power budget of feed bw-a: [0-4] of 4 transitions in progress(, \d+ waiting ahead)?`, r)
	}
	mu.Unlock()

	// The journal: each rack's power-control calls (the wave's, the off
	// rack's aside) from first to last.
	type span struct{ from, to time.Time }
	spans := map[string]*span{}
	for _, c := range e.sims.nico.Journal().Calls("ComponentPowerControl") {
		if len(c.Devices) == 0 {
			continue
		}
		rack := macs[strings.ToLower(c.Devices[0])]
		if rack == "" || rack == offRack {
			continue
		}
		if s, ok := spans[rack]; ok {
			s.to = c.Time
		} else {
			spans[rack] = &span{c.Time, c.Time}
		}
	}
	require.Len(t, spans, 48)
	inTransition := func(at time.Time, names []string) int {
		n := 0
		for _, name := range names {
			if s := spans[name]; !s.from.After(at) && !s.to.Before(at) {
				n++
			}
		}
		return n
	}
	for _, name := range aNames {
		require.LessOrEqual(t, inTransition(spans[name].from, aNames), 4, "bw-a racks in transition when %s started", name)
	}
	// bw-b never waited: all its racks started before bw-a's fifth rack
	// (bw-a's second wave at the earliest).
	aStarts := make([]time.Time, 0, len(aNames))
	for _, name := range aNames {
		aStarts = append(aStarts, spans[name].from)
	}
	slices.SortFunc(aStarts, func(x, y time.Time) int { return x.Compare(y) })
	for _, name := range bNames {
		require.True(t, spans[name].from.Before(aStarts[4]), "bw-b rack %s started after bw-a's first wave", name)
	}

	// The metric: bw-a's and bw-b's limits, nothing in use now.
	m := e.scrape(t)
	require.Equal(t, 4.0, m[`flow_power_budget_transitions{feed="bw-a",kind="limit"}`])
	require.Equal(t, 0.0, m[`flow_power_budget_transitions{feed="bw-a",kind="in_use"}`])
	require.Equal(t, 10.0, m[`flow_power_budget_transitions{feed="bw-b",kind="limit"}`])
}

// TestPowerBudgetBadInput: each call refuses bad input with a precise
// error and changes nothing.
func TestPowerBudgetBadInput(t *testing.T) {
	t.Parallel()
	e := startE2E(t, time.Millisecond)
	ctx := context.Background()
	admin := adminv1connect.NewAdminServiceClient(http.DefaultClient, e.url)
	r := e.addRack(t, 1, true)
	_, err := admin.SetRackPlacement(ctx, &adminv1.SetRackPlacementRequest{Rack: r.Name, PowerFeed: ptr("bw-1"), CoolantLoop: ptr("cdu-1")})
	require.NoError(t, err)
	_, err = admin.SetPowerBudget(ctx, &adminv1.SetPowerBudgetRequest{Feed: "bw-1", MaxTransitions: 3, MaxKw: ptr(500.0)})
	require.NoError(t, err)

	for _, tt := range []struct {
		name string
		call func() error
		code connect.Code
		msg  string
	}{
		{"ZeroTransitions", func() error {
			_, err := admin.SetPowerBudget(ctx, &adminv1.SetPowerBudgetRequest{Feed: "bw-1", MaxTransitions: 0})
			return err
		}, connect.CodeInvalidArgument, "max_transitions: 0"},
		{"NegativeTransitions", func() error {
			_, err := admin.SetPowerBudget(ctx, &adminv1.SetPowerBudgetRequest{Feed: "bw-1", MaxTransitions: -2})
			return err
		}, connect.CodeInvalidArgument, "max_transitions: -2"},
		{"ZeroKW", func() error {
			_, err := admin.SetPowerBudget(ctx, &adminv1.SetPowerBudgetRequest{Feed: "bw-1", MaxTransitions: 2, MaxKw: ptr(0.0)})
			return err
		}, connect.CodeInvalidArgument, "max_kw: 0"},
		{"NegativeKW", func() error {
			_, err := admin.SetPowerBudget(ctx, &adminv1.SetPowerBudgetRequest{Feed: "bw-1", MaxTransitions: 2, MaxKw: ptr(-5.0)})
			return err
		}, connect.CodeInvalidArgument, "max_kw: -5"},
		{"NoFeed", func() error {
			_, err := admin.SetPowerBudget(ctx, &adminv1.SetPowerBudgetRequest{MaxTransitions: 2})
			return err
		}, connect.CodeInvalidArgument, "feed: required"},
		{"UnknownFeed", func() error {
			_, err := admin.SetPowerBudget(ctx, &adminv1.SetPowerBudgetRequest{Feed: "bw-9", MaxTransitions: 2})
			return err
		}, connect.CodeNotFound, `unknown feed "bw-9"`},
		{"DeleteUnknown", func() error {
			_, err := admin.DeletePowerBudget(ctx, &adminv1.DeletePowerBudgetRequest{Feed: "bw-9"})
			return err
		}, connect.CodeNotFound, `feed "bw-9" has no budget`},
		{"DeleteNoFeed", func() error {
			_, err := admin.DeletePowerBudget(ctx, &adminv1.DeletePowerBudgetRequest{})
			return err
		}, connect.CodeInvalidArgument, "feed: required"},
		{"TwoFeeds", func() error {
			_, err := admin.SetRackPlacement(ctx, &adminv1.SetRackPlacementRequest{Rack: r.Name, PowerFeed: ptr("bw-1,bw-2")})
			return err
		}, connect.CodeInvalidArgument, "power_feed"},
		{"BadLoop", func() error {
			_, err := admin.SetRackPlacement(ctx, &adminv1.SetRackPlacementRequest{Rack: r.Name, PowerFeed: ptr("bw-2"), CoolantLoop: ptr("cdu 1")})
			return err
		}, connect.CodeInvalidArgument, "coolant_loop"},
		{"UnknownRack", func() error {
			_, err := admin.SetRackPlacement(ctx, &adminv1.SetRackPlacementRequest{Rack: "no-such-rack", PowerFeed: ptr("bw-2")})
			return err
		}, connect.CodeNotFound, "no-such-rack"},
		{"NothingToSet", func() error {
			_, err := admin.SetRackPlacement(ctx, &adminv1.SetRackPlacementRequest{Rack: r.Name})
			return err
		}, connect.CodeInvalidArgument, "power_feed"},
		{"NoRack", func() error {
			_, err := admin.SetRackPlacement(ctx, &adminv1.SetRackPlacementRequest{PowerFeed: ptr("bw-2")})
			return err
		}, connect.CodeInvalidArgument, "rack"},
	} {
		err := tt.call()
		require.Equal(t, tt.code, connect.CodeOf(err), "%s: %v", tt.name, err)
		require.Contains(t, err.Error(), tt.msg, tt.name)
	}
	// Nothing changed.
	l, err := admin.ListPowerBudgets(ctx, &adminv1.ListPowerBudgetsRequest{})
	require.NoError(t, err)
	require.Len(t, l.GetBudgets(), 1)
	b := l.GetBudgets()[0]
	require.Equal(t, []any{"bw-1", true, int32(3), 500.0, int32(1)}, []any{b.GetFeed(), b.GetHasBudget(), b.GetMaxTransitions(), b.GetMaxKw(), b.GetRacks()})
	set, err := admin.SetRackPlacement(ctx, &adminv1.SetRackPlacementRequest{Rack: r.ID.String(), CoolantLoop: ptr("")})
	require.NoError(t, err)
	require.Equal(t, []string{"bw-1", ""}, []string{set.GetPowerFeed(), set.GetCoolantLoop()}, "the loop cleared, the feed kept")

	// Deleting the budget lifts it; the feed stays listed from its rack.
	_, err = admin.DeletePowerBudget(ctx, &adminv1.DeletePowerBudgetRequest{Feed: "bw-1"})
	require.NoError(t, err)
	l, err = admin.ListPowerBudgets(ctx, &adminv1.ListPowerBudgetsRequest{})
	require.NoError(t, err)
	require.False(t, l.GetBudgets()[0].GetHasBudget())
	require.Equal(t, "bw-1", l.GetBudgets()[0].GetFeed())
}
