package console

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"

	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// ---- Starting work: firmware upgrades and component power ----
//
// Each is a form, then the API's own dry run (PreviewSubmission: the racks,
// their conflicts, open leaks, whether a second person must approve, the
// plan hash), then a confirm naming how many racks it touches. The confirm
// carries the hash of the plan reviewed: a plan that changed since is
// shown again, not submitted. The submission is the v1 call itself, as
// the user; the API refuses a viewer whatever the console shows.

// workForm is the fields of a firmware upgrade or a component power
// form, as entered.
type workForm struct {
	Kind        string   // "upgrade" or "power"
	Racks       string   // upgrade: rack names or IDs, separated by commas, spaces or lines
	Types       []string // upgrade: compute, nvswitch, powershelf (none: every type)
	Version     string   // upgrade: the version ("" the bundle's default)
	Op          string   // power: on, off or reset
	Components  []string // power: component IDs
	Description string
}

func readWorkForm(r *http.Request, kind string) workForm {
	_ = r.ParseForm()
	f := workForm{Kind: kind, Racks: strings.TrimSpace(r.PostFormValue("racks")), Version: strings.TrimSpace(r.PostFormValue("version")),
		Op: r.PostFormValue("op"), Description: strings.TrimSpace(r.PostFormValue("description"))}
	for _, t := range r.PostForm["type"] {
		if slices.Contains(complianceTypes, t) && !slices.Contains(f.Types, t) {
			f.Types = append(f.Types, t)
		}
	}
	for _, c := range r.PostForm["component"] {
		if c = strings.TrimSpace(c); c != "" && !slices.Contains(f.Components, c) {
			f.Components = append(f.Components, c)
		}
	}
	return f
}

// HasType reports whether the form selects component type t.
func (f workForm) HasType(t string) bool { return slices.Contains(f.Types, t) }

// rackRefs splits a list of rack names or IDs.
func rackRefs(s string) []string {
	var out []string
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ';' || r == ' ' || r == '\n' || r == '\r' || r == '\t' }) {
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

var typeToProto = map[string]flowv1.ComponentType{
	"compute": flowv1.ComponentType_COMPONENT_TYPE_COMPUTE, "nvswitch": flowv1.ComponentType_COMPONENT_TYPE_NVSWITCH,
	"powershelf": flowv1.ComponentType_COMPONENT_TYPE_POWERSHELF,
}

// rackSpec is the target spec of rack names or IDs, narrowed to types.
func rackSpec(refs []string, types []string) *flowv1.OperationTargetSpec {
	var ts []flowv1.ComponentType
	for _, t := range types {
		ts = append(ts, typeToProto[t])
	}
	var out []*flowv1.RackTarget
	for _, ref := range refs {
		rt := &flowv1.RackTarget{ComponentTypes: ts}
		if _, err := uuid.Parse(ref); err == nil {
			rt.Identifier = &flowv1.RackTarget_Id{Id: &flowv1.UUID{Id: ref}}
		} else {
			rt.Identifier = &flowv1.RackTarget_Name{Name: ref}
		}
		out = append(out, rt)
	}
	return &flowv1.OperationTargetSpec{Targets: &flowv1.OperationTargetSpec_Racks{Racks: &flowv1.RackTargets{Targets: out}}}
}

// preview is the form's dry-run request; err names the field at fault.
func (f workForm) preview() (*adminv1.PreviewSubmissionRequest, error) {
	desc := f.Description
	if desc == "" {
		desc = "from the console"
	}
	switch f.Kind {
	case "upgrade":
		refs := rackRefs(f.Racks)
		if len(refs) == 0 {
			return nil, errors.New("racks: name at least one rack")
		}
		req := &flowv1.UpgradeFirmwareRequest{TargetSpec: rackSpec(refs, f.Types), Description: desc}
		if f.Version != "" {
			req.TargetVersion = &f.Version
		}
		return &adminv1.PreviewSubmissionRequest{Request: &adminv1.PreviewSubmissionRequest_UpgradeFirmware{UpgradeFirmware: req}}, nil
	case "power":
		if len(f.Components) == 0 {
			return nil, errors.New("component: tick at least one component")
		}
		var cs []*flowv1.ComponentTarget
		for _, id := range f.Components {
			cs = append(cs, &flowv1.ComponentTarget{Identifier: &flowv1.ComponentTarget_Id{Id: &flowv1.UUID{Id: id}}})
		}
		spec := &flowv1.OperationTargetSpec{Targets: &flowv1.OperationTargetSpec_Components{Components: &flowv1.ComponentTargets{Targets: cs}}}
		switch f.Op {
		case "on":
			return &adminv1.PreviewSubmissionRequest{Request: &adminv1.PreviewSubmissionRequest_PowerOn{PowerOn: &flowv1.PowerOnRackRequest{TargetSpec: spec, Description: desc}}}, nil
		case "off":
			return &adminv1.PreviewSubmissionRequest{Request: &adminv1.PreviewSubmissionRequest_PowerOff{PowerOff: &flowv1.PowerOffRackRequest{TargetSpec: spec, Description: desc}}}, nil
		case "reset":
			return &adminv1.PreviewSubmissionRequest{Request: &adminv1.PreviewSubmissionRequest_PowerReset{PowerReset: &flowv1.PowerResetRackRequest{TargetSpec: spec, Description: desc}}}, nil
		}
		return nil, fmt.Errorf("op: want on, off or reset, not %q", f.Op)
	}
	return nil, fmt.Errorf("unknown kind of work %q", f.Kind)
}

// What says the work in words, for the headings and the confirm.
func (f workForm) What() string {
	if f.Kind == "power" {
		return map[string]string{"on": "Power on", "off": "Power off", "reset": "Power reset"}[f.Op] + " " + plural(len(f.Components), "component")
	}
	s := "Firmware upgrade"
	if len(f.Types) > 0 {
		s += " of the " + strings.Join(f.Types, ", ") + " trays"
	}
	if f.Version != "" {
		return s + " to version " + f.Version
	}
	return s + " to the bundle's default version"
}

type workData struct {
	Form workForm
	// Versions suggests versions: those the baselines name.
	Versions []string
	Err      string
	Preview  *adminv1.PreviewSubmissionResponse
	// Comps counts the components the plan acts on.
	Comps int
}

// Waiting counts the plan's racks whose task would wait behind others.
func (d workData) Waiting() int {
	n := 0
	for _, r := range d.Preview.GetRacks() {
		if r.GetWaiting() {
			n++
		}
	}
	return n
}

// baselineVersions lists the versions the baselines name, for the
// version field's suggestions (none when the user may not read them).
func (c *Console) baselineVersions(r *http.Request) []string {
	res, err := c.admin.ListBaselines(apiCtx(r), &adminv1.ListBaselinesRequest{})
	if err != nil {
		return nil
	}
	var out []string
	for _, b := range res.GetBaselines() {
		for _, e := range b.GetEntries() {
			if !slices.Contains(out, e.GetVersion()) {
				out = append(out, e.GetVersion())
			}
		}
	}
	sort.Strings(out)
	return out
}

func needOperator(r *http.Request, what string) error {
	if !userFrom(r.Context()).Operator() {
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s needs role operator", what))
	}
	return nil
}

// upgradePage is the firmware upgrade form (GET), its racks from ?racks=.
func (c *Console) upgradePage(r *http.Request) (view, error) {
	if err := needOperator(r, "upgrading firmware"); err != nil {
		return view{}, err
	}
	d := workData{Form: workForm{Kind: "upgrade", Racks: strings.Join(rackRefs(strings.Join(r.URL.Query()["racks"], ",")), ", ")}, Versions: c.baselineVersions(r)}
	return view{"work", "Upgrade firmware", "floor", nil, d}, nil
}

// work is the post of a work form: without confirm the dry run, shown with
// a confirm button naming how many racks it touches; with confirm the
// submission itself, when the plan is still the one reviewed.
func (c *Console) work(kind string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		u := userFrom(r.Context())
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if !c.sameSiteOr403(w, r, u) {
			return
		}
		d := workData{Form: readWorkForm(r, kind)}
		title := "Upgrade firmware"
		if kind == "power" {
			title = "Power components"
		} else {
			d.Versions = c.baselineVersions(r)
		}
		show := func(status int, notice string) {
			c.render(w, r, status, "work", pageData{Title: title, Nav: "floor", User: u, CSRF: csrfToken(w, r),
				Open: c.opts.Open, Notice: notice, Data: d, Now: time.Now()})
		}
		if err := needOperator(r, strings.ToLower(title)); err != nil {
			c.fail(w, r, u, http.StatusForbidden, err)
			return
		}
		req, err := d.Form.preview()
		if err != nil {
			d.Err = err.Error()
			show(http.StatusUnprocessableEntity, "")
			return
		}
		ctx := apiCtx(r)
		p, err := c.admin.PreviewSubmission(ctx, req)
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
		for _, rk := range p.GetRacks() {
			d.Comps += len(rk.GetComponentIds())
		}
		if r.PostFormValue("confirm") != "1" {
			show(http.StatusOK, "")
			return
		}
		if r.PostFormValue("plan") != p.GetPlanHash() {
			show(http.StatusConflict, "The plan changed since you reviewed it (racks, conflicts or leaks moved on): review this one, then confirm.")
			return
		}
		if p.GetRefusal() != "" {
			show(http.StatusConflict, "")
			return
		}
		var res *flowv1.SubmitTaskResponse
		switch x := req.GetRequest().(type) {
		case *adminv1.PreviewSubmissionRequest_UpgradeFirmware:
			res, err = c.flow.UpgradeFirmware(ctx, x.UpgradeFirmware)
		case *adminv1.PreviewSubmissionRequest_PowerOn:
			res, err = c.flow.PowerOnRack(ctx, x.PowerOn)
		case *adminv1.PreviewSubmissionRequest_PowerOff:
			res, err = c.flow.PowerOffRack(ctx, x.PowerOff)
		case *adminv1.PreviewSubmissionRequest_PowerReset:
			res, err = c.flow.PowerResetRack(ctx, x.PowerReset)
		}
		if err != nil {
			c.fail(w, r, u, statusOf(err), err)
			return
		}
		http.Redirect(w, r, c.afterSubmit(r, res.GetTaskIds(), p.GetApprovalRequired()), http.StatusSeeOther)
	}
}

// afterSubmit is where a submission leads: the approval it awaits, its
// one task, or the tasks page, with a notice.
func (c *Console) afterSubmit(r *http.Request, ids []*flowv1.UUID, approval bool) string {
	notice := fmt.Sprintf("%s submitted", plural(len(ids), "task"))
	if approval && len(ids) > 0 {
		if ts, err := c.flow.GetTasksByIDs(apiCtx(r), &flowv1.GetTasksByIDsRequest{TaskIds: ids[:1]}); err == nil && len(ts.GetTasks()) == 1 {
			if a := awaitedApproval(ts.GetTasks()[0].GetMessage()); a != "" {
				return Prefix + "approvals/" + a + "?notice=" + url.QueryEscape(notice+": they wait for a second person's approval of this request")
			}
		}
	}
	if len(ids) == 1 {
		return Prefix + "tasks/" + ids[0].GetId() + "?notice=" + url.QueryEscape(notice)
	}
	return Prefix + "tasks?active=1&notice=" + url.QueryEscape(notice)
}

// AllTypes is the tray types a firmware upgrade may be narrowed to.
func (workData) AllTypes() []string { return complianceTypes }

// isFormError reports whether the API refused a work form's dry run for
// something the user can fix in the form (a bad field, a refused scope, an
// unknown rack): the form is shown again with the API's message.
func isFormError(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument, connect.CodeFailedPrecondition, connect.CodeNotFound:
		return true
	}
	return false
}
