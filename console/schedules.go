package console

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"connectrpc.com/connect"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// ---- Schedules ----

// scheduleRow is one schedule as the page says it: when in its own time
// zone and in UTC, one operation label, its scope and its last result.
type scheduleRow struct {
	ID, Name, Operation string
	// When is the spec in words ("cron 0 2 * * * in Europe/Paris");
	// Zone the zone its cron is read in.
	When, Zone string
	Enabled    bool
	// Next is the next firing in the schedule's zone and in UTC ("":
	// none); NextAt the instant.
	NextZone, NextUTC string
	NextAt            time.Time
	LastAt            time.Time
	// Scope is the racks it fires on (names, with their type filter).
	Scope []scopeRow
	// Last is the tasks the latest firing created, one per scope entry.
	Last []lastTask
	// LastSummary counts the last firing's tasks by status.
	LastSummary string
}

type scopeRow struct {
	RackID, RackName, Filter string
}

type lastTask struct {
	ID, RackName, Status, Message string
}

func (c *Console) schedules(r *http.Request) (view, error) {
	ctx := apiCtx(r)
	res, err := c.flow.ListTaskSchedules(ctx, (&flowv1.ListTaskSchedulesRequest{Pagination: &flowv1.Pagination{Limit: 200}}))
	if err != nil {
		return view{}, err
	}
	names, err := c.rackNames(r.Context())
	if err != nil {
		return view{}, err
	}
	var rows []scheduleRow
	var taskIDs []*flowv1.UUID
	lastOf := map[string][]string{} // schedule ID → its last task IDs
	for _, s := range res.GetTaskSchedules() {
		row := scheduleRow{ID: s.GetId().GetId(), Name: s.GetName(), Operation: s.GetDescription(), Enabled: s.GetEnabled()}
		if row.Operation == "" {
			row.Operation = strings.ToLower(strings.ReplaceAll(s.GetOperationType(), "_", " "))
		}
		row.When, row.Zone = scheduleWhen(s.GetSpec())
		if s.NextRunAt != nil {
			row.NextAt = s.GetNextRunAt().AsTime()
			row.NextZone, row.NextUTC = inZone(row.NextAt, row.Zone)
		}
		if s.LastRunAt != nil {
			row.LastAt = s.GetLastRunAt().AsTime()
		}
		sc, err := c.flow.ListTaskScheduleScopes(ctx, &flowv1.ListTaskScheduleScopesRequest{ScheduleId: s.GetId()})
		if err != nil {
			return view{}, err
		}
		for _, e := range sc.GetScopes() {
			id := e.GetRackId().GetId()
			sr := scopeRow{RackID: id, RackName: names[id]}
			if sr.RackName == "" {
				sr.RackName = shortID(id)
			}
			if ts := e.GetTypes().GetTypes(); len(ts) > 0 {
				var ws []string
				for _, t := range ts {
					ws = append(ws, enumWord(t, "COMPONENT_TYPE_"))
				}
				sr.Filter = strings.Join(ws, ", ")
			} else if cs := e.GetComponents().GetTargets(); len(cs) > 0 {
				sr.Filter = plural(len(cs), "component")
			}
			row.Scope = append(row.Scope, sr)
			if t := e.GetLastTaskId().GetId(); t != "" {
				taskIDs = append(taskIDs, &flowv1.UUID{Id: t})
				lastOf[row.ID] = append(lastOf[row.ID], t)
			}
		}
		sort.SliceStable(row.Scope, func(i, j int) bool { return natCompare(row.Scope[i].RackName, row.Scope[j].RackName) < 0 })
		rows = append(rows, row)
	}
	if len(taskIDs) > 0 {
		ts, err := c.flow.GetTasksByIDs(ctx, &flowv1.GetTasksByIDsRequest{TaskIds: taskIDs})
		if err != nil {
			return view{}, err
		}
		byID := map[string]*flowv1.Task{}
		for _, t := range ts.GetTasks() {
			byID[t.GetId().GetId()] = t
		}
		for i := range rows {
			counts := map[string]int{}
			for _, id := range lastOf[rows[i].ID] {
				t := byID[id]
				if t == nil {
					continue // pruned
				}
				lt := lastTask{ID: id, RackName: names[t.GetRackId().GetId()], Status: enumWord(t.GetStatus(), "TASK_STATUS_"), Message: t.GetMessage()}
				counts[lt.Status]++
				rows[i].Last = append(rows[i].Last, lt)
			}
			rows[i].LastSummary = statusCounts(counts)
		}
	}
	return view{"schedules", "Schedules", "schedules", []string{"schedules", "tasks"}, rows}, nil
}

// scheduleWhen says a schedule's spec in words, and the zone its cron is
// read in (UTC for intervals and one-time schedules).
func scheduleWhen(s *flowv1.ScheduleSpec) (string, string) {
	zone := s.GetTimezone()
	if zone == "" {
		zone = "UTC"
	}
	switch s.GetType() {
	case flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_CRON:
		return "cron " + s.GetSpec() + " in " + zone, zone
	case flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_INTERVAL:
		return "every " + s.GetSpec(), "UTC"
	case flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_ONE_TIME:
		return "once at " + s.GetSpec(), "UTC"
	}
	return s.GetSpec(), "UTC"
}

// inZone is t in zone (with the zone's abbreviation) and in UTC; in UTC
// only when the zone is UTC or unknown here.
func inZone(t time.Time, zone string) (string, string) {
	utc := t.UTC().Format("2006-01-02 15:04 UTC")
	if zone == "UTC" {
		return "", utc
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return "", utc
	}
	return t.In(loc).Format("2006-01-02 15:04 MST") + " (" + zone + ")", utc
}

// statusCounts says counts by status, most first ("2 completed, 1 failed").
func statusCounts(m map[string]int) string {
	type kv struct {
		k string
		n int
	}
	var out []kv
	for k, n := range m {
		out = append(out, kv{k, n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].n != out[j].n {
			return out[i].n > out[j].n
		}
		return out[i].k < out[j].k
	})
	var ws []string
	for _, e := range out {
		ws = append(ws, fmt.Sprintf("%d %s", e.n, e.k))
	}
	return strings.Join(ws, ", ")
}

func (c *Console) scheduleAction(r *http.Request) (string, string, error) {
	id := &flowv1.UUID{Id: r.PathValue("id")}
	ctx := apiCtx(r)
	op := r.PathValue("op")
	switch op {
	case "pause":
		if _, err := c.flow.PauseTaskSchedule(ctx, (&flowv1.PauseTaskScheduleRequest{Id: id})); err != nil {
			return "", "", err
		}
	case "resume":
		if _, err := c.flow.ResumeTaskSchedule(ctx, (&flowv1.ResumeTaskScheduleRequest{Id: id})); err != nil {
			return "", "", err
		}
	case "delete":
		s, err := c.flow.GetTaskSchedule(ctx, &flowv1.GetTaskScheduleRequest{Id: id})
		if err != nil {
			return "", "", err
		}
		if _, err := c.flow.DeleteTaskSchedule(ctx, &flowv1.DeleteTaskScheduleRequest{Id: id}); err != nil {
			return "", "", err
		}
		return Prefix + "schedules", fmt.Sprintf("schedule %q deleted", s.GetName()), nil
	case "trigger":
		res, err := c.flow.TriggerTaskSchedule(ctx, (&flowv1.TriggerTaskScheduleRequest{Id: id}))
		if err != nil {
			return "", "", err
		}
		return Prefix + "schedules", fmt.Sprintf("triggered: %d tasks submitted", len(res.GetTaskIds())), nil
	default:
		return "", "", connect.NewError(connect.CodeNotFound, fmt.Errorf("schedule action %q: want pause, resume, trigger or delete", op))
	}
	return Prefix + "schedules", op + " done", nil
}
