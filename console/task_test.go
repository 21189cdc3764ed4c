package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/operations/opstest"
)

// report is a task report with one stage of the given steps.
func report(t *testing.T, steps ...taskStep) taskReport {
	t.Helper()
	var rep taskReport
	b, err := json.Marshal(map[string]any{"stages": []map[string]any{{"number": 1, "status": "failed", "steps": steps}}})
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &rep))
	return rep
}

// A component's outcome is its own: one tray of 18 failing leaves the 17
// others completed; a step that failed whole fails them all; a step the
// task's end stopped is stopped, not failed.
func TestTypeOutcomes(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		steps []taskStep
		want  map[string]string
	}{
		{"OneOfEighteen", []taskStep{
			{ComponentType: "Compute", Status: "failed", TotalComponents: 18, CompletedComponents: 17, FailedComponents: 1},
			{ComponentType: "PowerShelf", Status: "completed", TotalComponents: 8, CompletedComponents: 8},
		}, map[string]string{"Compute": "completed", "PowerShelf": "completed"}},
		{"StoppedByAnother", []taskStep{
			{ComponentType: "Compute", Status: "failed", TotalComponents: 18, CompletedComponents: 12, FailedComponents: 1},
			{ComponentType: "NVSwitch", Status: "failed", TotalComponents: 9, Error: "1 of 18 target(s) failed"},
		}, map[string]string{"Compute": "stopped", "NVSwitch": "stopped"}},
		{"FailedWhole", []taskStep{
			{ComponentType: "Compute", Status: "failed", TotalComponents: 18, FailedComponents: 18},
		}, map[string]string{"Compute": "failed"}},
		{"FailedWithoutCounts", []taskStep{
			{ComponentType: "Compute", Status: "failed", TotalComponents: 18, Error: "rack not ready"},
		}, map[string]string{"Compute": "failed"}},
		{"LaterStepToDo", []taskStep{
			{ComponentType: "Compute", Status: "completed", TotalComponents: 18, CompletedComponents: 18},
			{ComponentType: "Compute", Status: "pending", TotalComponents: 18},
		}, map[string]string{"Compute": "running"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, typeOutcomes(report(t, tt.steps...)))
		})
	}
}

// A power-off where 1 of 18 trays failed: that tray alone is failed, by
// name beside its ID, each error once; an operator can retry exactly it,
// as a new task through the same API call.
func TestTaskPageOutcomeAsItWas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupPages(t)
	r0 := b.m.AddRack(t, 0)
	req := opstest.PowerOn(r0)
	ids, err := b.m.Submit(t, req)
	require.NoError(t, err)
	task := ids[0]
	var comps []struct{ ID, Name string }
	rows, err := b.m.Pool.Query(ctx, `SELECT c.id::text, c.name FROM task t JOIN component c ON c.id = ANY (t.component_ids)
		WHERE t.id = $1 AND c.type = 'Compute' ORDER BY c.name`, task)
	require.NoError(t, err)
	for rows.Next() {
		var c struct{ ID, Name string }
		require.NoError(t, rows.Scan(&c.ID, &c.Name))
		comps = append(comps, c)
	}
	require.NoError(t, rows.Err())
	require.Len(t, comps, 18)
	bad := comps[3]
	msg := fmt.Sprintf("1 of 18 target(s) failed: %s: BMC unreachable", bad.ID)
	rep := map[string]any{"version": 1, "error": msg, "components_targeted": 18, "not_targeted": []any{},
		"stages": []map[string]any{{"number": 1, "status": "failed", "targets": 18, "completed": 17, "failed": 1, "error": msg,
			"steps": []map[string]any{{"component_type": "Compute", "status": "failed", "total_components": 18, "completed_components": 17, "failed_components": 1, "error": msg}}}}}
	rb, err := json.Marshal(rep)
	require.NoError(t, err)
	var runID int64
	require.NoError(t, b.m.Pool.QueryRow(ctx, `UPDATE task SET status = 'failed', message = $2, report = $3, finished_at = now(), queue_expires_at = NULL
		WHERE id = $1 RETURNING run_id`, task, msg, rb).Scan(&runID))
	tag, err := b.m.Pool.Exec(ctx, `UPDATE engine_step SET failed_targets = jsonb_build_object($2::text, 'BMC unreachable')
		WHERE id = (SELECT min(id) FROM engine_step WHERE run_id = $1)`, runID, bad.ID)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())

	w := b.get(t, "olivia", "/ui/tasks/"+task.String()[:8])
	page := w.Body.String()
	require.Equal(t, http.StatusOK, w.Code, page)
	accessible(t, page)
	require.Equal(t, 17, strings.Count(page, `<span class="st st-completed">completed</span></td>`), "the 17 others completed")
	require.Equal(t, 1, strings.Count(page, `<span class="st st-failed">failed</span></td>`), "one failed")
	require.Contains(t, page, `#c-`+bad.ID+`">`+bad.Name+`</a></td><td>Compute</td><td><span class="st st-failed">failed</span></td><td></td><td><span class="bad">BMC unreachable</span>`)
	named := fmt.Sprintf("1 of 18 target(s) failed: %s (%s): BMC unreachable", bad.Name, bad.ID)
	require.Equal(t, 1, strings.Count(page, named), "each error once, its component named beside its ID")
	require.NotContains(t, page, `id="task-message"`, "the message says the error above again")
	require.Contains(t, page, `id="retry-failed" data-confirm="Submit a new power_on task for the 1 component that failed on rack demo-0000?">Retry the 1 failed component</button>`)

	viewer := b.get(t, "victor", "/ui/tasks/"+task.String()).Body.String()
	require.NotContains(t, viewer, `id="retry-failed"`, "a viewer gets no retry")
	require.Equal(t, http.StatusForbidden, b.post(t, "victor", "/ui/tasks/"+task.String()+"/retry").Code, "and the API refuses a forged one")

	w = b.post(t, "olivia", "/ui/tasks/"+task.String()+"/retry")
	require.Equal(t, http.StatusSeeOther, w.Code, w.Body.String())
	loc := w.Header().Get("Location")
	require.True(t, strings.HasPrefix(loc, "/ui/tasks/"), loc)
	retry, err := uuid.Parse(strings.SplitN(strings.TrimPrefix(loc, "/ui/tasks/"), "?", 2)[0])
	require.NoError(t, err)
	var got []string
	var op, desc string
	require.NoError(t, b.m.Pool.QueryRow(ctx, `SELECT component_ids::text[], operation_code, description FROM task WHERE id = $1`, retry).Scan(&got, &op, &desc))
	require.Equal(t, []string{bad.ID}, got, "exactly the failed component")
	require.Equal(t, "power_on", op)
	require.Contains(t, desc, "retry of the 1 failed component(s) of task "+task.String())
}
