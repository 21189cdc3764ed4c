package console

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	"connectrpc.com/connect"

	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// action serves a state-changing form: refused when another site could
// have sent it; otherwise fn makes the API call as the user and says where
// to go next (303, See Other) with a notice. An API error is shown with
// the status it maps to (a viewer's call is 403, and nothing is written:
// the API refused it before its handler ran).
func (c *Console) action(fn func(*http.Request) (string, string, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		u := userFrom(r.Context())
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if !c.sameSiteOr403(w, r, u) {
			return
		}
		next, notice, err := fn(r)
		if err != nil {
			c.fail(w, r, u, statusOf(err), err)
			return
		}
		if notice != "" {
			next += "?notice=" + url.QueryEscape(notice)
		}
		http.Redirect(w, r, next, http.StatusSeeOther)
	}
}

// sameSiteOr403 reports whether r may change state; when another site
// could have sent it, it answers 403 (nothing called) and reports false.
func (c *Console) sameSiteOr403(w http.ResponseWriter, r *http.Request, u User) bool {
	if err := c.checkSameSite(r); err != nil {
		c.logger.Warn("console: cross-site request refused", "path", r.URL.Path, "identity", u.Identity,
			"sec_fetch_site", r.Header.Get("Sec-Fetch-Site"), "origin", r.Header.Get("Origin"))
		c.fail(w, r, u, http.StatusForbidden, err)
		return false
	}
	return true
}

func (c *Console) rackPower(r *http.Request) (string, string, error) {
	id, err := c.resolveRack(r.Context(), r.PathValue("id"))
	if err != nil {
		return "", "", err
	}
	spec := &flowv1.OperationTargetSpec{Targets: &flowv1.OperationTargetSpec_Racks{Racks: &flowv1.RackTargets{Targets: []*flowv1.RackTarget{{Identifier: &flowv1.RackTarget_Id{Id: &flowv1.UUID{Id: id}}}}}}}
	desc := r.PostFormValue("description")
	if desc == "" {
		desc = "from the console"
	}
	ctx := apiCtx(r)
	var res *flowv1.SubmitTaskResponse
	switch op := r.PathValue("op"); op {
	case "on":
		res, err = c.flow.PowerOnRack(ctx, (&flowv1.PowerOnRackRequest{TargetSpec: spec, Description: desc}))
	case "off":
		res, err = c.flow.PowerOffRack(ctx, (&flowv1.PowerOffRackRequest{TargetSpec: spec, Description: desc}))
	case "reset":
		res, err = c.flow.PowerResetRack(ctx, (&flowv1.PowerResetRackRequest{TargetSpec: spec, Description: desc}))
	default:
		return "", "", connect.NewError(connect.CodeNotFound, fmt.Errorf("power operation %q: want on, off or reset", op))
	}
	if err != nil {
		return "", "", err
	}
	ids := res.GetTaskIds()
	if len(ids) == 1 {
		return Prefix + "tasks/" + ids[0].GetId(), "task submitted", nil
	}
	return Prefix + "racks/" + id, fmt.Sprintf("%d tasks submitted", len(ids)), nil
}

func (c *Console) cancelTask(r *http.Request) (string, string, error) {
	id, err := c.resolveTask(r.Context(), r.PathValue("id"))
	if err != nil {
		return "", "", err
	}
	if _, err := c.flow.CancelTask(apiCtx(r), (&flowv1.CancelTaskRequest{TaskId: &flowv1.UUID{Id: id}})); err != nil {
		return "", "", err
	}
	return Prefix + "tasks/" + id, "cancel requested", nil
}

func (c *Console) rolloutAction(r *http.Request) (string, string, error) {
	runID, err := c.resolveRun(r.Context(), r.PathValue("id"))
	if err != nil {
		return "", "", err
	}
	id := &flowv1.UUID{Id: runID}
	ctx := apiCtx(r)
	op := r.PathValue("op")
	switch op {
	case "pause":
		_, err = c.flow.PauseOperationRun(ctx, (&flowv1.PauseOperationRunRequest{Id: id}))
	case "resume":
		_, err = c.flow.ResumeOperationRun(ctx, (&flowv1.ResumeOperationRunRequest{Id: id}))
	case "advance":
		_, err = c.flow.AdvanceOperationRunPhase(ctx, (&flowv1.AdvanceOperationRunPhaseRequest{Id: id}))
	case "cancel":
		_, err = c.flow.CancelOperationRun(ctx, (&flowv1.CancelOperationRunRequest{Id: id}))
	default:
		return "", "", connect.NewError(connect.CodeNotFound, fmt.Errorf("rollout action %q: want pause, resume, advance or cancel", op))
	}
	if err != nil {
		return "", "", err
	}
	return Prefix + "rollouts/" + id.GetId(), op + " done", nil
}

func (c *Console) runSync(r *http.Request) (string, string, error) {
	if _, err := c.admin.RunSync(apiCtx(r), (&adminv1.RunSyncRequest{})); err != nil {
		return "", "", err
	}
	return Prefix + "sync", "sync cycle run", nil
}

// live streams the page's changes as server-sent events: "change" with
// the changed topics, a comment every 25 s to keep proxies from closing
// an idle stream.
func (c *Console) live(w http.ResponseWriter, r *http.Request) {
	var topics []string
	for _, t := range splitComma(r.URL.Query().Get("topics")) {
		topics = append(topics, t)
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	rc := http.NewResponseController(w)
	s := c.feed.Subscribe(topics)
	defer c.feed.Unsubscribe(s)
	if _, err := fmt.Fprint(w, "retry: 2000\n\n"); err != nil {
		return
	}
	if err := rc.Flush(); err != nil {
		return
	}
	beat := time.NewTicker(25 * time.Second)
	defer beat.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case _, ok := <-s.C:
			if !ok {
				return
			}
			if _, err := fmt.Fprintf(w, "event: change\ndata: %s\n\n", joinTopics(s.Take())); err != nil {
				return
			}
		case <-beat.C:
			if _, err := fmt.Fprint(w, ": beat\n\n"); err != nil {
				return
			}
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}
