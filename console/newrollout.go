package console

import (
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// ---- Creating a rollout: form, the API's dry run, confirm ----

// runForm is the new-rollout form's fields, as entered.
type runForm struct {
	Name, Description, Version, Racks string
	Percent, Phases, MaxConcurrent    string
	MaxFailures                       string
	AutoAdvance                       bool
	// The seeds of the plan reviewed (set by the dry run): the confirm
	// creates that very plan.
	SelectorSeed, OrderingSeed string
}

func defaultRunForm() runForm {
	return runForm{Percent: "100", Phases: "2", MaxConcurrent: "10", MaxFailures: "1"}
}

func readRunForm(r *http.Request) runForm {
	v := func(k string) string { return strings.TrimSpace(r.PostFormValue(k)) }
	return runForm{Name: v("name"), Description: v("description"), Version: v("version"), Racks: v("racks"),
		Percent: v("percent"), Phases: v("phases"), MaxConcurrent: v("max_concurrent"), MaxFailures: v("max_failures"),
		AutoAdvance: r.PostFormValue("auto_advance") == "1", SelectorSeed: v("selector_seed"), OrderingSeed: v("ordering_seed")}
}

// request is the v1 CreateOperationRun request of the form; an error
// names the field.
func (f runForm) request() (*flowv1.CreateOperationRunRequest, error) {
	num := func(field, label, s string, least, most int) (int32, error) {
		n, err := strconv.Atoi(s)
		if err != nil || n < least || n > most {
			return 0, fmt.Errorf("%s (%s): give a whole number from %d to %d, not %q", label, field, least, most, s)
		}
		return int32(n), nil
	}
	if f.Name == "" {
		return nil, fmt.Errorf("name: give the rollout a name")
	}
	pct, err := num("percent", "share of the racks", f.Percent, 1, 100)
	if err != nil {
		return nil, err
	}
	phases, err := num("phases", "phases", f.Phases, 1, 100)
	if err != nil {
		return nil, err
	}
	conc, err := num("max_concurrent", "racks at once", f.MaxConcurrent, 1, 10000)
	if err != nil {
		return nil, err
	}
	fails, err := num("max_failures", "failures per phase", f.MaxFailures, 1, 10000)
	if err != nil {
		return nil, err
	}
	fw := &flowv1.UpgradeFirmwareRequest{Description: cmp.Or(f.Description, "rollout "+f.Name)}
	if f.Version != "" {
		fw.TargetVersion = &f.Version
	}
	if refs := rackRefs(f.Racks); len(refs) > 0 {
		fw.TargetSpec = rackSpec(refs, nil)
	}
	return &flowv1.CreateOperationRunRequest{
		Name: f.Name, Description: f.Description,
		Configuration: &flowv1.OperationRunConfiguration{
			Selector: &flowv1.OperationRunSelector{Selector: &flowv1.OperationRunSelector_Percentage{Percentage: &flowv1.PercentageSelector{Percentage: pct, Seed: f.SelectorSeed}}},
			Options: &flowv1.OperationRunOptions{
				MaxConcurrentTargets: conc,
				SafetyPolicy: &flowv1.OperationRunSafetyPolicy{Gates: []*flowv1.OperationRunSafetyGate{{Gate: &flowv1.OperationRunSafetyGate_FailureCount{
					FailureCount: &flowv1.OperationRunFailureCountGate{FailureThresholdCount: fails}}}}},
				OrderingPolicy: &flowv1.OperationRunOrderingPolicy{Ordering: &flowv1.OperationRunOrderingPolicy_Random{Random: &flowv1.OperationRunRandomOrdering{Seed: f.OrderingSeed}}},
				PhasePolicy: &flowv1.OperationRunPhasePolicy{Plan: &flowv1.OperationRunPhasePolicy_Equal{Equal: &flowv1.EqualOperationRunPhases{PhaseCount: phases}},
					AdvancePolicy: &flowv1.OperationRunPhaseAdvancePolicy{AutoAdvance: f.AutoAdvance}},
			},
			Operation: &flowv1.OperationRunOperation{Operation: &flowv1.OperationRunOperation_UpgradeFirmware{UpgradeFirmware: fw}},
		},
	}, nil
}

type newRunData struct {
	Form     runForm
	Versions []string
	Err      string
	Preview  *adminv1.PreviewOperationRunResponse
	Racks    int
	// Operation and Gates say the run in words, as its page will.
	Operation string
	Gates     []string
}

// newRolloutPage is the new-rollout form (GET).
func (c *Console) newRolloutPage(r *http.Request) (view, error) {
	if err := needOperator(r, "creating a rollout"); err != nil {
		return view{}, err
	}
	d := newRunData{Form: defaultRunForm(), Versions: c.baselineVersions(r)}
	d.Form.Racks = strings.Join(rackRefs(strings.Join(r.URL.Query()["racks"], ",")), ", ")
	return view{"newrollout", "New rollout", "rollouts", nil, d}, nil
}

// createRollout is the new-rollout form's post: without confirm the API's
// dry run (PreviewOperationRun: phases and racks, overlapping runs,
// approval, windows, plan hash) with a confirm naming how many racks the
// run touches; with confirm the run, created (admin CreateOperationRun)
// with the seeds of the plan reviewed when its hash is still the same.
func (c *Console) createRollout(w http.ResponseWriter, r *http.Request) {
	u := userFrom(r.Context())
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if !c.sameSiteOr403(w, r, u) {
		return
	}
	if err := needOperator(r, "creating a rollout"); err != nil {
		c.fail(w, r, u, http.StatusForbidden, err)
		return
	}
	d := newRunData{Form: readRunForm(r), Versions: c.baselineVersions(r)}
	show := func(status int, notice string) {
		c.render(w, r, status, "newrollout", pageData{Title: "New rollout", Nav: "rollouts", User: u, CSRF: csrfToken(w, r),
			Open: c.opts.Open, Notice: notice, Data: d, Now: time.Now()})
	}
	confirm := r.PostFormValue("confirm") == "1"
	if !confirm {
		// A new dry run draws new seeds.
		d.Form.SelectorSeed, d.Form.OrderingSeed = "", ""
	}
	req, err := d.Form.request()
	if err != nil {
		d.Err = err.Error()
		show(http.StatusUnprocessableEntity, "")
		return
	}
	ctx := apiCtx(r)
	p, err := c.admin.PreviewOperationRun(ctx, &adminv1.PreviewOperationRunRequest{Request: req})
	if err != nil {
		if isFormError(err) {
			d.Err = connectMessage(err)
			show(http.StatusConflict, "")
			return
		}
		c.fail(w, r, u, statusOf(err), err)
		return
	}
	d.Preview = p
	d.Form.SelectorSeed, d.Form.OrderingSeed = p.GetSelectorSeed(), p.GetOrderingSeed()
	for _, ph := range p.GetPhases() {
		d.Racks += len(ph.GetRacks())
	}
	d.Operation, _ = runOperation(req.GetConfiguration())
	d.Gates = gateWords(req.GetConfiguration().GetOptions())
	if !confirm {
		show(http.StatusOK, "")
		return
	}
	if r.PostFormValue("plan") != p.GetPlanHash() {
		show(http.StatusConflict, "The plan changed since you reviewed it (the racks or their components moved on): review this one, then create the rollout.")
		return
	}
	if len(p.GetOverlappingRuns()) > 0 {
		show(http.StatusConflict, "")
		return
	}
	req.Configuration.Selector.GetPercentage().Seed = p.GetSelectorSeed()
	req.Configuration.Options.OrderingPolicy.GetRandom().Seed = p.GetOrderingSeed()
	res, err := c.admin.CreateOperationRun(ctx, &adminv1.CreateOperationRunRequest{Request: req})
	if err != nil {
		if s := statusOf(err); s == http.StatusConflict {
			d.Err = connectMessage(err)
			show(s, "")
			return
		}
		c.fail(w, r, u, statusOf(err), err)
		return
	}
	if a := res.GetApprovalId(); a != "" {
		http.Redirect(w, r, Prefix+"approvals/"+url.PathEscape(a)+"?notice="+url.QueryEscape(fmt.Sprintf("rollout %q created (%s): it starts once a second person approves its plan", d.Form.Name, plural(d.Racks, "rack"))), http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, Prefix+"rollouts/"+url.PathEscape(res.GetId())+"?notice="+url.QueryEscape(fmt.Sprintf("rollout created: %s in %s", plural(d.Racks, "rack"), plural(len(p.GetPhases()), "phase"))), http.StatusSeeOther)
}
