package schedule_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/nicoflow/flow/engine"
	"github.com/nicoflow/flow/firmware"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/logtest"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/opstest"
	"github.com/nicoflow/flow/operations/schedule"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// clock is a test clock the schedule service reads.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

// Now returns the set time, or the real time while none is set.
func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.t.IsZero() {
		return time.Now()
	}
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

type unimplemented struct {
	flowv1connect.UnimplementedFlowHandler
}

func pbID(id uuid.UUID) *flowv1.UUID { return &flowv1.UUID{Id: id.String()} }

// scheduleFlow serves the schedule methods; everything else is
// unimplemented (embedded one level deeper, as in app).
type scheduleFlow struct {
	unimplemented
	*schedule.Handler
}

// schedBundle is the schedule service on a fresh database with three demo
// racks, served over Connect. Its River client inserts jobs but works
// none: tests fire schedules themselves, at times of the test clock.
type schedBundle struct {
	pool   *pgxpool.Pool
	inv    *inventory.Service
	tasks  *operations.Tasks
	svc    *schedule.Service
	clock  *clock
	client flowv1connect.FlowClient
	url    string
	racks  []inventory.Rack
	logs   *syncBuffer
	river  *river.Client[pgx.Tx]
	engine *engine.Engine
	// refusals are what OnRefused heard, in order.
	refusals []schedule.Refusal
}

// syncBuffer is the schedule service's log.
type syncBuffer = logtest.Buffer

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func setupSchedules(t testing.TB, keys *firmware.Keyring) *schedBundle {
	t.Helper()
	ctx := context.Background()
	b := &schedBundle{clock: &clock{t: t0}, logs: &syncBuffer{}}
	logger := slog.New(slog.NewTextHandler(b.logs, nil))
	worker := &schedule.Worker{}
	m := opstest.NewTasks(t, opstest.Config{Keys: keys, Logger: logger, RunEnded: true, River: func(rc *river.Config) {
		rc.Queues[schedule.Queue] = river.QueueConfig{MaxWorkers: 5}
		river.AddWorker(rc.Workers, worker)
	}})
	b.pool, b.inv, b.tasks, b.river, b.engine = m.Pool, m.Inv, m.Tasks, m.River, m.Engine
	for i := 1; i <= 3; i++ {
		full, err := b.inv.Rack(ctx, b.pool, m.AddRack(t, i).ID, true)
		require.NoError(t, err)
		b.racks = append(b.racks, full)
	}
	b.svc = schedule.NewService(schedule.Config{
		Pool: b.pool, Tasks: b.tasks, Inv: b.inv, Keys: keys, Logger: logger, Now: b.clock.Now, Fire: schedule.RiverFireScheduler(b.river),
		OnRefused: func(_ context.Context, _ pgx.Tx, r schedule.Refusal) error {
			b.refusals = append(b.refusals, r)
			return nil
		},
	})
	worker.Service = b.svc
	srv := opstest.Serve(t, scheduleFlow{Handler: schedule.NewHandler(b.pool, b.svc)})
	b.client, b.url = srv.Client, srv.URL
	return b
}

func rackSpec(racks ...inventory.Rack) *flowv1.OperationTargetSpec {
	var ts []*flowv1.RackTarget
	for _, r := range racks {
		ts = append(ts, &flowv1.RackTarget{Identifier: &flowv1.RackTarget_Id{Id: pbID(r.ID)}})
	}
	return &flowv1.OperationTargetSpec{Targets: &flowv1.OperationTargetSpec_Racks{Racks: &flowv1.RackTargets{Targets: ts}}}
}

func typedRackSpec(r inventory.Rack, types ...flowv1.ComponentType) *flowv1.OperationTargetSpec {
	return &flowv1.OperationTargetSpec{Targets: &flowv1.OperationTargetSpec_Racks{Racks: &flowv1.RackTargets{Targets: []*flowv1.RackTarget{
		{Identifier: &flowv1.RackTarget_Id{Id: pbID(r.ID)}, ComponentTypes: types},
	}}}}
}

func componentSpec(ids ...uuid.UUID) *flowv1.OperationTargetSpec {
	var ts []*flowv1.ComponentTarget
	for _, id := range ids {
		ts = append(ts, &flowv1.ComponentTarget{Identifier: &flowv1.ComponentTarget_Id{Id: pbID(id)}})
	}
	return &flowv1.OperationTargetSpec{Targets: &flowv1.OperationTargetSpec_Components{Components: &flowv1.ComponentTargets{Targets: ts}}}
}

func powerOnOp(spec *flowv1.OperationTargetSpec) *flowv1.ScheduledOperation {
	return &flowv1.ScheduledOperation{Operation: &flowv1.ScheduledOperation_PowerOn{PowerOn: &flowv1.PowerOnRackRequest{TargetSpec: spec, Description: "ignored"}}}
}

func intervalReq(name, every string, op *flowv1.ScheduledOperation) *flowv1.CreateTaskScheduleRequest {
	return &flowv1.CreateTaskScheduleRequest{
		Schedule:  &flowv1.ScheduleConfig{Name: name, Spec: &flowv1.ScheduleSpec{Type: flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_INTERVAL, Spec: every}},
		Operation: op,
	}
}

func (b *schedBundle) create(t *testing.T, req *flowv1.CreateTaskScheduleRequest) *flowv1.TaskSchedule {
	t.Helper()
	s, err := b.client.CreateTaskSchedule(context.Background(), req)
	require.NoError(t, err)
	return s
}

func sid(s *flowv1.TaskSchedule) uuid.UUID { return uuid.MustParse(s.GetId().GetId()) }

// snapshot dumps the schedule tables, tasks and schedule jobs.
func (b *schedBundle) snapshot(t *testing.T) string {
	t.Helper()
	var out string
	err := b.pool.QueryRow(context.Background(), `SELECT
		coalesce((SELECT json_agg(s ORDER BY id)::text FROM task_schedule s), '') || '|' ||
		coalesce((SELECT json_agg(c ORDER BY id)::text FROM task_schedule_scope c), '') || '|' ||
		(SELECT count(*) FROM task)::text || '|' ||
		(SELECT count(*) FROM river_job WHERE kind = 'operations.schedule_fire')::text`).Scan(&out)
	require.NoError(t, err)
	return out
}

// armed returns the scheduled times of the schedule's waiting firing jobs.
func (b *schedBundle) armed(t *testing.T, id uuid.UUID) []time.Time {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT scheduled_at FROM river_job
		WHERE kind = 'operations.schedule_fire' AND args->>'schedule_id' = $1 AND state IN ('scheduled', 'available') ORDER BY scheduled_at`, id.String())
	require.NoError(t, err)
	times, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	require.NoError(t, err)
	for i := range times {
		times[i] = times[i].UTC()
	}
	return times
}

// childTasks returns the descriptions of the schedule's child tasks per rack.
func (b *schedBundle) childTasks(t *testing.T, id uuid.UUID) map[string]int {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT description || ' @ ' || rack_id::text FROM task WHERE trigger_type = 'task_schedule' AND trigger_id = $1`, id.String())
	require.NoError(t, err)
	descs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	out := map[string]int{}
	for _, d := range descs {
		out[d]++
	}
	return out
}

func TestScheduleCreateAndGet(t *testing.T) {
	t.Parallel()
	b := setupSchedules(t, nil)
	ctx := context.Background()
	s := b.create(t, intervalReq("nightly on", "6h", powerOnOp(rackSpec(b.racks[0], b.racks[1]))))
	require.Equal(t, "nightly on", s.GetName())
	require.True(t, s.GetEnabled())
	require.Equal(t, flowv1.OverlapPolicy_OVERLAP_POLICY_SKIP, s.GetOverlapPolicy(), "unspecified means skip")
	require.Equal(t, "POWER_ON", s.GetOperationType())
	require.Equal(t, "Power On", s.GetDescription())
	require.Equal(t, t0.Add(6*time.Hour), s.GetNextRunAt().AsTime(), "creation never fires at once")
	require.Nil(t, s.GetLastRunAt())
	require.Equal(t, []time.Time{t0.Add(6 * time.Hour)}, b.armed(t, sid(s)), "the first firing's job is inserted with the schedule")

	got, err := b.client.GetTaskSchedule(ctx, &flowv1.GetTaskScheduleRequest{Id: s.GetId()})
	require.NoError(t, err)
	require.Equal(t, s.GetName(), got.GetName())
	require.Equal(t, "6h", got.GetSpec().GetSpec())
	require.Empty(t, got.GetSpec().GetTimezone(), "an interval schedule given no timezone has none, as upstream")

	scopes, err := b.client.ListTaskScheduleScopes(ctx, &flowv1.ListTaskScheduleScopesRequest{ScheduleId: s.GetId()})
	require.NoError(t, err)
	require.Len(t, scopes.GetScopes(), 2)
	for _, sc := range scopes.GetScopes() {
		require.Nil(t, sc.GetComponentFilter(), "rack targets without types take the whole rack")
		require.Nil(t, sc.GetLastTaskId())
	}

	// Cron with a timezone, components and a forced reset.
	comp := b.racks[2].Components[0].ID
	cronReq := &flowv1.CreateTaskScheduleRequest{
		Schedule: &flowv1.ScheduleConfig{Name: "berlin reset", OverlapPolicy: flowv1.OverlapPolicy_OVERLAP_POLICY_QUEUE,
			Spec: &flowv1.ScheduleSpec{Type: flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_CRON, Spec: "0 2 * * *", Timezone: "Europe/Berlin"}},
		Operation: &flowv1.ScheduledOperation{Operation: &flowv1.ScheduledOperation_PowerReset{PowerReset: &flowv1.PowerResetRackRequest{TargetSpec: componentSpec(comp), Forced: true}}},
	}
	c := b.create(t, cronReq)
	require.Equal(t, "Power Reset (forced)", c.GetDescription())
	require.Equal(t, "POWER_RESET", c.GetOperationType())
	require.Equal(t, time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC), c.GetNextRunAt().AsTime(), "02:00 in Berlin (CET) is 01:00 UTC")
	cs, err := b.client.ListTaskScheduleScopes(ctx, &flowv1.ListTaskScheduleScopesRequest{ScheduleId: c.GetId()})
	require.NoError(t, err)
	require.Len(t, cs.GetScopes(), 1)
	require.Equal(t, comp.String(), cs.GetScopes()[0].GetComponents().GetTargets()[0].GetId().GetId())

	// One-time, firmware with a version.
	ot := b.create(t, &flowv1.CreateTaskScheduleRequest{
		Schedule: &flowv1.ScheduleConfig{Name: "xmas", Spec: &flowv1.ScheduleSpec{Type: flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_ONE_TIME, Spec: "2026-12-24T02:00:00+01:00"}},
		Operation: &flowv1.ScheduledOperation{Operation: &flowv1.ScheduledOperation_UpgradeFirmware{UpgradeFirmware: &flowv1.UpgradeFirmwareRequest{
			TargetSpec: typedRackSpec(b.racks[0], flowv1.ComponentType_COMPONENT_TYPE_COMPUTE), TargetVersion: strPtr("v2.3.1")}}},
	})
	require.Equal(t, "Upgrade Firmware to v2.3.1", ot.GetDescription())
	require.Equal(t, time.Date(2026, 12, 24, 1, 0, 0, 0, time.UTC), ot.GetNextRunAt().AsTime())
	require.Equal(t, "2026-12-24T02:00:00+01:00", ot.GetSpec().GetSpec(), "a one-time time is echoed as written, as upstream")
	require.Empty(t, ot.GetSpec().GetTimezone())
	require.Equal(t, "Europe/Berlin", c.GetSpec().GetTimezone())

	// Connect JSON, as curl sends it.
	res, err := http.Post(b.url+"/v1.Flow/GetTaskSchedule", "application/json", strings.NewReader(fmt.Sprintf(`{"id":{"id":%q}}`, s.GetId().GetId())))
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode, string(body))
	require.Contains(t, string(body), `"name":"nightly on"`)
}

func strPtr(s string) *string { return &s }

func TestScheduleCreateErrors(t *testing.T) {
	t.Parallel()
	b := setupSchedules(t, nil)
	ctx := context.Background()
	b.create(t, intervalReq("taken", "1h", powerOnOp(rackSpec(b.racks[0]))))
	deleted := inventory.DemoRack(9)
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) (err error) {
		if deleted.ID, err = b.inv.CreateRack(ctx, tx, deleted); err != nil {
			return err
		}
		return b.inv.DeleteRack(ctx, tx, deleted.ID)
	}))
	before := b.snapshot(t)
	spec := func(typ flowv1.ScheduleSpecType, s, tz string) *flowv1.CreateTaskScheduleRequest {
		return &flowv1.CreateTaskScheduleRequest{
			Schedule:  &flowv1.ScheduleConfig{Name: "new", Spec: &flowv1.ScheduleSpec{Type: typ, Spec: s, Timezone: tz}},
			Operation: powerOnOp(rackSpec(b.racks[0])),
		}
	}
	secret := "s3cret"
	for _, tt := range []struct {
		name string
		req  *flowv1.CreateTaskScheduleRequest
		code connect.Code
		msg  string
	}{
		{"NoSchedule", &flowv1.CreateTaskScheduleRequest{Operation: powerOnOp(rackSpec(b.racks[0]))}, connect.CodeInvalidArgument, "schedule is required"},
		{"NoSpec", &flowv1.CreateTaskScheduleRequest{Schedule: &flowv1.ScheduleConfig{Name: "x"}, Operation: powerOnOp(rackSpec(b.racks[0]))}, connect.CodeInvalidArgument, "schedule.spec is required"},
		{"EmptyName", intervalReq("  ", "1h", powerOnOp(rackSpec(b.racks[0]))), connect.CodeInvalidArgument, "schedule.name: is required"},
		{"DuplicateName", intervalReq("taken", "1h", powerOnOp(rackSpec(b.racks[0]))), connect.CodeAlreadyExists, `"taken"`},
		{"ZeroInterval", intervalReq("z", "0s", powerOnOp(rackSpec(b.racks[0]))), connect.CodeInvalidArgument, "schedule.spec.spec: interval must be greater than zero"},
		{"NegativeInterval", intervalReq("z", "-5m", powerOnOp(rackSpec(b.racks[0]))), connect.CodeInvalidArgument, "schedule.spec.spec: interval must be greater than zero"},
		{"BadInterval", intervalReq("z", "daily", powerOnOp(rackSpec(b.racks[0]))), connect.CodeInvalidArgument, "schedule.spec.spec: invalid interval"},
		{"EmptySpec", spec(flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_CRON, "", ""), connect.CodeInvalidArgument, "schedule.spec.spec: is required"},
		{"BadCron", spec(flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_CRON, "61 * * * *", ""), connect.CodeInvalidArgument, "schedule.spec.spec: invalid cron expression"},
		{"SixFieldCron", spec(flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_CRON, "0 0 2 * * *", ""), connect.CodeInvalidArgument, "schedule.spec.spec: invalid cron expression"},
		{"TZInCron", spec(flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_CRON, "CRON_TZ=Europe/Berlin 0 2 * * *", ""), connect.CodeInvalidArgument, "schedule.spec.timezone"},
		{"UnknownTimezone", spec(flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_CRON, "0 2 * * *", "Mars/Olympus"), connect.CodeInvalidArgument, `schedule.spec.timezone: unknown IANA timezone "Mars/Olympus"`},
		{"OneTimeNoOffset", spec(flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_ONE_TIME, "2026-12-24T02:00:00", ""), connect.CodeInvalidArgument, "schedule.spec.spec: invalid one-time spec"},
		{"UnspecifiedType", spec(flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_UNSPECIFIED, "1h", ""), connect.CodeInvalidArgument, "schedule.spec.type"},
		{"BadOverlap", &flowv1.CreateTaskScheduleRequest{Schedule: &flowv1.ScheduleConfig{Name: "o", OverlapPolicy: 7, Spec: &flowv1.ScheduleSpec{Type: 1, Spec: "1h"}}, Operation: powerOnOp(rackSpec(b.racks[0]))}, connect.CodeInvalidArgument, "schedule.overlap_policy"},
		{"NoOperation", &flowv1.CreateTaskScheduleRequest{Schedule: &flowv1.ScheduleConfig{Name: "o", Spec: &flowv1.ScheduleSpec{Type: 1, Spec: "1h"}}}, connect.CodeInvalidArgument, "operation is required"},
		{"EmptyOperation", intervalReq("o", "1h", &flowv1.ScheduledOperation{}), connect.CodeInvalidArgument, "operation: one of power_on"},
		{"NoTargetSpec", intervalReq("o", "1h", powerOnOp(nil)), connect.CodeInvalidArgument, "operation.power_on.target_spec is required"},
		{"EmptyTargetSpec", intervalReq("o", "1h", powerOnOp(&flowv1.OperationTargetSpec{})), connect.CodeInvalidArgument, "operation.power_on.target_spec"},
		{"UnknownRack", intervalReq("o", "1h", powerOnOp(rackSpec(inventory.Rack{ID: uuid.New()}))), connect.CodeNotFound, "rack"},
		{"DeletedRack", intervalReq("o", "1h", powerOnOp(rackSpec(deleted))), connect.CodeNotFound, "rack"},
		{"UnknownComponent", intervalReq("o", "1h", powerOnOp(componentSpec(uuid.New()))), connect.CodeNotFound, "component"},
		{"BadRuleID", intervalReq("o", "1h", &flowv1.ScheduledOperation{Operation: &flowv1.ScheduledOperation_PowerOn{PowerOn: &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(b.racks[0]), RuleId: &flowv1.UUID{Id: "nope"}}}}), connect.CodeInvalidArgument, "operation.power_on.rule_id"},
		{"NegativeQueueTimeout", intervalReq("o", "1h", &flowv1.ScheduledOperation{Operation: &flowv1.ScheduledOperation_PowerOn{PowerOn: &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(b.racks[0]), QueueOptions: &flowv1.QueueOptions{QueueTimeoutSeconds: -1}}}}), connect.CodeInvalidArgument, "operation.power_on.queue_options.queue_timeout_seconds"},
		{"CredentialsWithoutKey", intervalReq("o", "1h", &flowv1.ScheduledOperation{Operation: &flowv1.ScheduledOperation_UpgradeFirmware{UpgradeFirmware: &flowv1.UpgradeFirmwareRequest{
			TargetSpec: rackSpec(b.racks[0]), AuthenticationData: &flowv1.FirmwareAuthenticationData{Value: &flowv1.FirmwareAuthenticationData_Shared{Shared: secret}}}}}), connect.CodeFailedPrecondition, "FLOW_DATA_ENCRYPTION_KEY_PATH"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := b.client.CreateTaskSchedule(ctx, tt.req)
			opstest.RequireCode(t, err, tt.code, tt.msg)
		})
	}
	require.Equal(t, before, b.snapshot(t), "refused requests change nothing")

	// A one-time time in the past is accepted and due at once.
	past := b.create(t, spec(flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_ONE_TIME, "2026-11-30T23:00:00-01:00", ""))
	require.Equal(t, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), past.GetNextRunAt().AsTime())
}

func TestScheduleCredentialsAreSealed(t *testing.T) {
	t.Parallel()
	key := bytes.Repeat([]byte{7}, 32)
	keys, err := firmware.NewKeyring(key)
	require.NoError(t, err)
	b := setupSchedules(t, keys)
	secret := "very-s3cret-download-token"
	s := b.create(t, intervalReq("fw", "24h", &flowv1.ScheduledOperation{Operation: &flowv1.ScheduledOperation_UpgradeFirmware{UpgradeFirmware: &flowv1.UpgradeFirmwareRequest{
		TargetSpec: typedRackSpec(b.racks[0], flowv1.ComponentType_COMPONENT_TYPE_COMPUTE), TargetVersion: strPtr("1.2"),
		AuthenticationData: &flowv1.FirmwareAuthenticationData{Value: &flowv1.FirmwareAuthenticationData_Shared{Shared: secret}}}}}))
	require.NotContains(t, b.snapshot(t), secret)
	var args string
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT string_agg(args::text, ' ') FROM river_job`).Scan(&args))
	require.NotContains(t, args, secret)
	var tmpl string
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT operation_template::text FROM task_schedule`).Scan(&tmpl))
	require.Contains(t, tmpl, `"key_id"`, "the credentials are stored as a sealed envelope")

	// Firing opens and re-seals them for the child task.
	ids, err := b.svc.Trigger(context.Background(), sid(s))
	if err != nil {
		// The demo rack's firmware rule may not apply without backends; the
		// secret must not leak either way.
		require.NotContains(t, err.Error(), secret)
	} else {
		require.Len(t, ids, 1)
	}
	var info string
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT coalesce(string_agg(information::text, ' '), '') FROM task`).Scan(&info))
	require.NotContains(t, info, secret)
	require.NotContains(t, b.logs.String(), secret)
}

func TestScheduleList(t *testing.T) {
	t.Parallel()
	b := setupSchedules(t, nil)
	ctx := context.Background()
	var ids []string
	for i := range 5 {
		b.clock.Set(t0.Add(time.Duration(i) * time.Second))
		s := b.create(t, intervalReq(fmt.Sprintf("s%d", i), "1h", powerOnOp(rackSpec(b.racks[i%2]))))
		ids = append(ids, s.GetId().GetId())
	}
	_, err := b.client.PauseTaskSchedule(ctx, &flowv1.PauseTaskScheduleRequest{Id: &flowv1.UUID{Id: ids[1]}})
	require.NoError(t, err)
	names := func(res *flowv1.ListTaskSchedulesResponse) []string {
		var out []string
		for _, s := range res.GetTaskSchedules() {
			out = append(out, s.GetName())
		}
		return out
	}
	all, err := b.client.ListTaskSchedules(ctx, &flowv1.ListTaskSchedulesRequest{})
	require.NoError(t, err)
	require.Equal(t, []string{"s0", "s1", "s2", "s3", "s4"}, names(all), "oldest first")
	require.EqualValues(t, 5, all.GetTotal())
	require.NotNil(t, all.GetTaskSchedules()[1].GetNextRunAt(), "a paused schedule keeps its next_run_at, as upstream")

	enabled := true
	onRack, err := b.client.ListTaskSchedules(ctx, &flowv1.ListTaskSchedulesRequest{RackId: pbID(b.racks[1].ID), EnabledOnly: &enabled})
	require.NoError(t, err)
	require.Equal(t, []string{"s3"}, names(onRack))
	page, err := b.client.ListTaskSchedules(ctx, &flowv1.ListTaskSchedulesRequest{Pagination: &flowv1.Pagination{Offset: 1, Limit: 2}})
	require.NoError(t, err)
	require.Equal(t, []string{"s1", "s2"}, names(page))
	require.EqualValues(t, 5, page.GetTotal(), "total is counted before paging")

	_, err = b.client.ListTaskSchedules(ctx, &flowv1.ListTaskSchedulesRequest{Pagination: &flowv1.Pagination{Offset: -1}})
	opstest.RequireCode(t, err, connect.CodeInvalidArgument, "pagination.offset")
	_, err = b.client.ListTaskSchedules(ctx, &flowv1.ListTaskSchedulesRequest{RackId: &flowv1.UUID{Id: "x"}})
	opstest.RequireCode(t, err, connect.CodeInvalidArgument, "rack_id")
}

func mask(paths ...string) *fieldmaskpb.FieldMask { return &fieldmaskpb.FieldMask{Paths: paths} }

func TestScheduleUpdate(t *testing.T) {
	t.Parallel()
	b := setupSchedules(t, nil)
	ctx := context.Background()
	s := b.create(t, intervalReq("a", "1h", powerOnOp(rackSpec(b.racks[0]))))
	b.create(t, intervalReq("b", "1h", powerOnOp(rackSpec(b.racks[0]))))
	before := b.snapshot(t)
	cfg := &flowv1.ScheduleConfig{Name: "renamed", OverlapPolicy: flowv1.OverlapPolicy_OVERLAP_POLICY_QUEUE,
		Spec: &flowv1.ScheduleSpec{Type: flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_CRON, Spec: "30 4 * * *", Timezone: "America/New_York"}}
	for _, tt := range []struct {
		name string
		req  *flowv1.UpdateTaskScheduleRequest
		code connect.Code
		msg  string
	}{
		{"NoID", &flowv1.UpdateTaskScheduleRequest{Schedule: cfg, UpdateMask: mask("schedule.name")}, connect.CodeInvalidArgument, "id is required"},
		{"NoMask", &flowv1.UpdateTaskScheduleRequest{Id: s.GetId(), Schedule: cfg}, connect.CodeInvalidArgument, "update_mask is required"},
		{"UnknownPath", &flowv1.UpdateTaskScheduleRequest{Id: s.GetId(), Schedule: cfg, UpdateMask: mask("schedule.name", "operation")}, connect.CodeInvalidArgument, `update_mask.paths[1]: unknown path "operation"`},
		{"NoSchedule", &flowv1.UpdateTaskScheduleRequest{Id: s.GetId(), UpdateMask: mask("schedule.name")}, connect.CodeInvalidArgument, "schedule is required"},
		{"EmptyName", &flowv1.UpdateTaskScheduleRequest{Id: s.GetId(), Schedule: &flowv1.ScheduleConfig{}, UpdateMask: mask("schedule.name")}, connect.CodeInvalidArgument, "schedule.name"},
		{"DuplicateName", &flowv1.UpdateTaskScheduleRequest{Id: s.GetId(), Schedule: &flowv1.ScheduleConfig{Name: "b"}, UpdateMask: mask("schedule.name")}, connect.CodeAlreadyExists, `"b"`},
		{"UnknownOverlap", &flowv1.UpdateTaskScheduleRequest{Id: s.GetId(), Schedule: &flowv1.ScheduleConfig{OverlapPolicy: 7}, UpdateMask: mask("schedule.overlap_policy")}, connect.CodeInvalidArgument, "schedule.overlap_policy"},
		{"TimezoneWithoutSpec", &flowv1.UpdateTaskScheduleRequest{Id: s.GetId(), Schedule: &flowv1.ScheduleConfig{}, UpdateMask: mask("schedule.spec.timezone")}, connect.CodeInvalidArgument, "schedule.spec is required by update_mask path schedule.spec.timezone"},
		{"BadSpec", &flowv1.UpdateTaskScheduleRequest{Id: s.GetId(), Schedule: &flowv1.ScheduleConfig{Spec: &flowv1.ScheduleSpec{Type: 1, Spec: "0s"}}, UpdateMask: mask("schedule.spec")}, connect.CodeInvalidArgument, "schedule.spec.spec"},
		{"BadTimezone", &flowv1.UpdateTaskScheduleRequest{Id: s.GetId(), Schedule: &flowv1.ScheduleConfig{Spec: &flowv1.ScheduleSpec{Type: 2, Spec: "0 1 * * *", Timezone: "Nowhere/Land"}}, UpdateMask: mask("schedule.spec", "schedule.spec.timezone")}, connect.CodeInvalidArgument, "schedule.spec.timezone"},
		{"UnknownSchedule", &flowv1.UpdateTaskScheduleRequest{Id: pbID(uuid.New()), Schedule: cfg, UpdateMask: mask("schedule.name")}, connect.CodeNotFound, "schedule"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := b.client.UpdateTaskSchedule(ctx, tt.req)
			opstest.RequireCode(t, err, tt.code, tt.msg)
		})
	}
	require.Equal(t, before, b.snapshot(t))

	b.clock.Set(t0.Add(10 * time.Minute))
	got, err := b.client.UpdateTaskSchedule(ctx, &flowv1.UpdateTaskScheduleRequest{Id: s.GetId(), Schedule: cfg, UpdateMask: mask("schedule.name", "schedule.overlap_policy")})
	require.NoError(t, err)
	require.Equal(t, "renamed", got.GetName())
	require.Equal(t, flowv1.OverlapPolicy_OVERLAP_POLICY_QUEUE, got.GetOverlapPolicy())
	require.Equal(t, "1h", got.GetSpec().GetSpec(), "paths not in the mask stay")
	require.Equal(t, t0.Add(time.Hour), got.GetNextRunAt().AsTime())

	got, err = b.client.UpdateTaskSchedule(ctx, &flowv1.UpdateTaskScheduleRequest{Id: s.GetId(), Schedule: cfg, UpdateMask: mask("schedule.spec", "schedule.spec.timezone")})
	require.NoError(t, err)
	require.Equal(t, flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_CRON, got.GetSpec().GetType())
	require.Equal(t, "America/New_York", got.GetSpec().GetTimezone())
	// 04:30 in New York (EST, UTC-5) after 10:10 UTC is 09:30 UTC next day.
	want := time.Date(2026, 12, 2, 9, 30, 0, 0, time.UTC)
	require.Equal(t, want, got.GetNextRunAt().AsTime())
	require.Contains(t, b.armed(t, sid(s)), want, "the new time is armed")

	got, err = b.client.UpdateTaskSchedule(ctx, &flowv1.UpdateTaskScheduleRequest{Id: s.GetId(), Schedule: &flowv1.ScheduleConfig{Spec: &flowv1.ScheduleSpec{Timezone: "Asia/Tokyo"}}, UpdateMask: mask("schedule.spec.timezone")})
	require.NoError(t, err)
	require.Equal(t, "Asia/Tokyo", got.GetSpec().GetTimezone())
	require.Equal(t, time.Date(2026, 12, 1, 19, 30, 0, 0, time.UTC), got.GetNextRunAt().AsTime(), "04:30 JST is 19:30 UTC")

	// Unspecified overlap means skip, here as at creation (as upstream).
	got, err = b.client.UpdateTaskSchedule(ctx, &flowv1.UpdateTaskScheduleRequest{Id: s.GetId(), Schedule: &flowv1.ScheduleConfig{}, UpdateMask: mask("schedule.overlap_policy")})
	require.NoError(t, err)
	require.Equal(t, flowv1.OverlapPolicy_OVERLAP_POLICY_SKIP, got.GetOverlapPolicy())
	// A name is kept as given.
	got, err = b.client.UpdateTaskSchedule(ctx, &flowv1.UpdateTaskScheduleRequest{Id: s.GetId(), Schedule: &flowv1.ScheduleConfig{Name: " spaced "}, UpdateMask: mask("schedule.name")})
	require.NoError(t, err)
	require.Equal(t, " spaced ", got.GetName())

	// A consumed one-time schedule cannot be re-armed.
	ot := b.create(t, &flowv1.CreateTaskScheduleRequest{
		Schedule:  &flowv1.ScheduleConfig{Name: "once", Spec: &flowv1.ScheduleSpec{Type: 3, Spec: "2026-12-01T10:30:00Z"}},
		Operation: powerOnOp(rackSpec(b.racks[1])),
	})
	b.clock.Set(t0.Add(30 * time.Minute))
	require.NoError(t, b.svc.Fire(ctx, sid(ot), time.Date(2026, 12, 1, 10, 30, 0, 0, time.UTC), nil))
	_, err = b.client.UpdateTaskSchedule(ctx, &flowv1.UpdateTaskScheduleRequest{Id: ot.GetId(), Schedule: &flowv1.ScheduleConfig{Spec: &flowv1.ScheduleSpec{Type: 1, Spec: "1h"}}, UpdateMask: mask("schedule.spec")})
	opstest.RequireCode(t, err, connect.CodeFailedPrecondition, "already fired")
}

func TestSchedulePauseResumeDelete(t *testing.T) {
	t.Parallel()
	b := setupSchedules(t, nil)
	ctx := context.Background()
	s := b.create(t, intervalReq("p", "1h", powerOnOp(rackSpec(b.racks[0]))))
	p, err := b.client.PauseTaskSchedule(ctx, &flowv1.PauseTaskScheduleRequest{Id: s.GetId()})
	require.NoError(t, err)
	require.False(t, p.GetEnabled())
	require.Equal(t, s.GetNextRunAt().AsTime(), p.GetNextRunAt().AsTime(), "a paused schedule keeps its next_run_at, as upstream")
	again, err := b.client.PauseTaskSchedule(ctx, &flowv1.PauseTaskScheduleRequest{Id: s.GetId()})
	require.NoError(t, err)
	require.Equal(t, p.GetUpdatedAt().AsTime(), again.GetUpdatedAt().AsTime(), "pausing a paused schedule is a no-op")

	// The paused schedule's job finds it disabled and fires nothing.
	b.clock.Set(t0.Add(time.Hour))
	require.NoError(t, b.svc.Fire(ctx, sid(s), t0.Add(time.Hour), nil))
	require.Empty(t, b.childTasks(t, sid(s)))

	// Resume counts from now: no instant firing of the missed hour.
	b.clock.Set(t0.Add(3*time.Hour + 15*time.Minute))
	r, err := b.client.ResumeTaskSchedule(ctx, &flowv1.ResumeTaskScheduleRequest{Id: s.GetId()})
	require.NoError(t, err)
	require.True(t, r.GetEnabled())
	require.Equal(t, t0.Add(4*time.Hour+15*time.Minute), r.GetNextRunAt().AsTime())
	require.Contains(t, b.armed(t, sid(s)), t0.Add(4*time.Hour+15*time.Minute))
	r2, err := b.client.ResumeTaskSchedule(ctx, &flowv1.ResumeTaskScheduleRequest{Id: s.GetId()})
	require.NoError(t, err)
	require.Equal(t, r.GetNextRunAt().AsTime(), r2.GetNextRunAt().AsTime(), "resuming an enabled schedule is a no-op")
	require.Empty(t, b.childTasks(t, sid(s)))

	for _, call := range []func() error{
		func() error {
			_, err := b.client.PauseTaskSchedule(ctx, &flowv1.PauseTaskScheduleRequest{})
			return err
		},
		func() error {
			_, err := b.client.ResumeTaskSchedule(ctx, &flowv1.ResumeTaskScheduleRequest{})
			return err
		},
		func() error {
			_, err := b.client.DeleteTaskSchedule(ctx, &flowv1.DeleteTaskScheduleRequest{})
			return err
		},
		func() error {
			_, err := b.client.TriggerTaskSchedule(ctx, &flowv1.TriggerTaskScheduleRequest{})
			return err
		},
		func() error { _, err := b.client.GetTaskSchedule(ctx, &flowv1.GetTaskScheduleRequest{}); return err },
	} {
		opstest.RequireCode(t, call(), connect.CodeInvalidArgument, "id is required")
	}
	unknown := pbID(uuid.New())
	_, err = b.client.PauseTaskSchedule(ctx, &flowv1.PauseTaskScheduleRequest{Id: unknown})
	opstest.RequireCode(t, err, connect.CodeNotFound, "schedule")
	_, err = b.client.ResumeTaskSchedule(ctx, &flowv1.ResumeTaskScheduleRequest{Id: unknown})
	opstest.RequireCode(t, err, connect.CodeNotFound, "schedule")

	// Paused one-time: resume keeps its time; consumed: pause/resume refused.
	ot := b.create(t, &flowv1.CreateTaskScheduleRequest{
		Schedule:  &flowv1.ScheduleConfig{Name: "once", Spec: &flowv1.ScheduleSpec{Type: 3, Spec: "2026-12-01T20:00:00Z"}},
		Operation: powerOnOp(rackSpec(b.racks[1])),
	})
	_, err = b.client.PauseTaskSchedule(ctx, &flowv1.PauseTaskScheduleRequest{Id: ot.GetId()})
	require.NoError(t, err)
	r, err = b.client.ResumeTaskSchedule(ctx, &flowv1.ResumeTaskScheduleRequest{Id: ot.GetId()})
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC), r.GetNextRunAt().AsTime())
	b.clock.Set(time.Date(2026, 12, 1, 20, 0, 1, 0, time.UTC))
	require.NoError(t, b.svc.Fire(ctx, sid(ot), time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC), nil))
	_, err = b.client.PauseTaskSchedule(ctx, &flowv1.PauseTaskScheduleRequest{Id: ot.GetId()})
	opstest.RequireCode(t, err, connect.CodeFailedPrecondition, "already fired")
	_, err = b.client.ResumeTaskSchedule(ctx, &flowv1.ResumeTaskScheduleRequest{Id: ot.GetId()})
	opstest.RequireCode(t, err, connect.CodeFailedPrecondition, "already fired")

	_, err = b.client.DeleteTaskSchedule(ctx, &flowv1.DeleteTaskScheduleRequest{Id: s.GetId()})
	require.NoError(t, err)
	_, err = b.client.GetTaskSchedule(ctx, &flowv1.GetTaskScheduleRequest{Id: s.GetId()})
	opstest.RequireCode(t, err, connect.CodeNotFound, "schedule")
	_, err = b.client.DeleteTaskSchedule(ctx, &flowv1.DeleteTaskScheduleRequest{Id: s.GetId()})
	opstest.RequireCode(t, err, connect.CodeNotFound, "schedule")
	var scopes int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM task_schedule_scope WHERE schedule_id = $1`, sid(s)).Scan(&scopes))
	require.Zero(t, scopes, "scopes cascade")
	require.NoError(t, b.svc.Fire(ctx, sid(s), t0.Add(4*time.Hour+15*time.Minute), nil), "a deleted schedule's job is a no-op")
}

func TestScheduleScopes(t *testing.T) {
	t.Parallel()
	b := setupSchedules(t, nil)
	ctx := context.Background()
	r0, r1, r2 := b.racks[0], b.racks[1], b.racks[2]
	compute := flowv1.ComponentType_COMPONENT_TYPE_COMPUTE
	shelf := flowv1.ComponentType_COMPONENT_TYPE_POWERSHELF
	s := b.create(t, intervalReq("sc", "1h", powerOnOp(typedRackSpec(r0, compute))))
	id := s.GetId()
	list := func() []*flowv1.TaskScheduleScope {
		res, err := b.client.ListTaskScheduleScopes(ctx, &flowv1.ListTaskScheduleScopesRequest{ScheduleId: id})
		require.NoError(t, err)
		return res.GetScopes()
	}

	// types ∪ types
	add, err := b.client.AddTaskScheduleScope(ctx, &flowv1.AddTaskScheduleScopeRequest{ScheduleId: id, TargetSpec: typedRackSpec(r0, shelf)})
	require.NoError(t, err)
	require.Len(t, add.GetScopes(), 1)
	require.ElementsMatch(t, []flowv1.ComponentType{compute, shelf}, add.GetScopes()[0].GetTypes().GetTypes())

	// A new rack with components, then components ∪ components.
	c1, c2 := r1.Components[0].ID, r1.Components[1].ID
	add, err = b.client.AddTaskScheduleScope(ctx, &flowv1.AddTaskScheduleScopeRequest{ScheduleId: id, TargetSpec: componentSpec(c1)})
	require.NoError(t, err)
	require.Len(t, add.GetScopes(), 1)
	require.Equal(t, r1.ID.String(), add.GetScopes()[0].GetRackId().GetId())
	_, err = b.client.AddTaskScheduleScope(ctx, &flowv1.AddTaskScheduleScopeRequest{ScheduleId: id, TargetSpec: componentSpec(c2)})
	require.NoError(t, err)
	require.Len(t, list(), 2)
	require.Len(t, list()[1].GetComponents().GetTargets(), 2)

	// types vs components aborts the whole request, new racks included.
	before := b.snapshot(t)
	mixed := &flowv1.OperationTargetSpec{Targets: &flowv1.OperationTargetSpec_Racks{Racks: &flowv1.RackTargets{Targets: []*flowv1.RackTarget{
		{Identifier: &flowv1.RackTarget_Id{Id: pbID(r2.ID)}},
		{Identifier: &flowv1.RackTarget_Id{Id: pbID(r1.ID)}, ComponentTypes: []flowv1.ComponentType{compute}},
	}}}}
	_, err = b.client.AddTaskScheduleScope(ctx, &flowv1.AddTaskScheduleScopeRequest{ScheduleId: id, TargetSpec: mixed})
	opstest.RequireCode(t, err, connect.CodeInvalidArgument, "target_spec")
	require.Equal(t, before, b.snapshot(t))

	// null absorbs.
	add, err = b.client.AddTaskScheduleScope(ctx, &flowv1.AddTaskScheduleScopeRequest{ScheduleId: id, TargetSpec: rackSpec(r0)})
	require.NoError(t, err)
	require.Len(t, add.GetScopes(), 1)
	require.Nil(t, add.GetScopes()[0].GetComponentFilter())
	add, err = b.client.AddTaskScheduleScope(ctx, &flowv1.AddTaskScheduleScopeRequest{ScheduleId: id, TargetSpec: typedRackSpec(r0, compute)})
	require.NoError(t, err)
	require.Empty(t, add.GetScopes(), "nothing changes: the whole rack already")

	for _, tt := range []struct {
		name string
		req  *flowv1.AddTaskScheduleScopeRequest
		code connect.Code
		msg  string
	}{
		{"NoScheduleID", &flowv1.AddTaskScheduleScopeRequest{TargetSpec: rackSpec(r2)}, connect.CodeInvalidArgument, "schedule_id is required"},
		{"NoTargetSpec", &flowv1.AddTaskScheduleScopeRequest{ScheduleId: id}, connect.CodeInvalidArgument, "target_spec is required"},
		{"UnknownSchedule", &flowv1.AddTaskScheduleScopeRequest{ScheduleId: pbID(uuid.New()), TargetSpec: rackSpec(r2)}, connect.CodeNotFound, "schedule"},
		{"UnknownRack", &flowv1.AddTaskScheduleScopeRequest{ScheduleId: id, TargetSpec: rackSpec(inventory.Rack{ID: uuid.New()})}, connect.CodeNotFound, "rack"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := b.client.AddTaskScheduleScope(ctx, tt.req)
			opstest.RequireCode(t, err, tt.code, tt.msg)
		})
	}

	// Reconcile: drop r0, change r1 to the whole rack, add r2.
	up, err := b.client.UpdateTaskScheduleScope(ctx, &flowv1.UpdateTaskScheduleScopeRequest{ScheduleId: id, DesiredScope: rackSpec(r1, r2)})
	require.NoError(t, err)
	require.EqualValues(t, 1, up.GetAdded())
	require.EqualValues(t, 1, up.GetRemoved())
	require.EqualValues(t, 1, up.GetUpdated())
	require.Len(t, up.GetScopes(), 2)
	_, err = b.client.UpdateTaskScheduleScope(ctx, &flowv1.UpdateTaskScheduleScopeRequest{ScheduleId: id})
	opstest.RequireCode(t, err, connect.CodeInvalidArgument, "desired_scope is required")

	// Remove one; the last one stays.
	scopes := list()
	_, err = b.client.RemoveTaskScheduleScope(ctx, &flowv1.RemoveTaskScheduleScopeRequest{ScopeId: scopes[0].GetId()})
	require.NoError(t, err)
	_, err = b.client.RemoveTaskScheduleScope(ctx, &flowv1.RemoveTaskScheduleScopeRequest{ScopeId: scopes[0].GetId()})
	opstest.RequireCode(t, err, connect.CodeNotFound, "scope")
	_, err = b.client.RemoveTaskScheduleScope(ctx, &flowv1.RemoveTaskScheduleScopeRequest{ScopeId: scopes[1].GetId()})
	opstest.RequireCode(t, err, connect.CodeFailedPrecondition, "last scope")
	require.Len(t, list(), 1)
	_, err = b.client.RemoveTaskScheduleScope(ctx, &flowv1.RemoveTaskScheduleScopeRequest{})
	opstest.RequireCode(t, err, connect.CodeInvalidArgument, "scope_id is required")
	_, err = b.client.ListTaskScheduleScopes(ctx, &flowv1.ListTaskScheduleScopesRequest{ScheduleId: pbID(uuid.New())})
	opstest.RequireCode(t, err, connect.CodeNotFound, "schedule")
}

func TestCheckScheduleConflicts(t *testing.T) {
	t.Parallel()
	b := setupSchedules(t, nil)
	ctx := context.Background()
	r0, r1 := b.racks[0], b.racks[1]
	power := b.create(t, intervalReq("power", "1h", powerOnOp(rackSpec(r0))))
	ingest := b.create(t, intervalReq("ingest", "1h", &flowv1.ScheduledOperation{Operation: &flowv1.ScheduledOperation_Ingest{Ingest: &flowv1.IngestRackRequest{TargetSpec: rackSpec(r0)}}}))
	paused := b.create(t, intervalReq("paused", "1h", powerOnOp(rackSpec(r0))))
	_, err := b.client.PauseTaskSchedule(ctx, &flowv1.PauseTaskScheduleRequest{Id: paused.GetId()})
	require.NoError(t, err)
	b.create(t, intervalReq("other rack", "1h", powerOnOp(rackSpec(r1))))

	names := func(res *flowv1.CheckScheduleConflictsResponse) []string {
		var out []string
		for _, s := range res.GetConflicts() {
			out = append(out, s.GetName())
		}
		return out
	}
	fw := &flowv1.ScheduledOperation{Operation: &flowv1.ScheduledOperation_UpgradeFirmware{UpgradeFirmware: &flowv1.UpgradeFirmwareRequest{TargetSpec: rackSpec(r0)}}}
	res, err := b.client.CheckScheduleConflicts(ctx, &flowv1.CheckScheduleConflictsRequest{Operation: fw})
	require.NoError(t, err)
	require.Equal(t, []string{"power", "ingest"}, names(res), "firmware conflicts with power, and with ingestion (a bring-up task, as upstream); paused and other racks are left out")
	ingestOp := &flowv1.ScheduledOperation{Operation: &flowv1.ScheduledOperation_Ingest{Ingest: &flowv1.IngestRackRequest{TargetSpec: rackSpec(r0)}}}
	res, err = b.client.CheckScheduleConflicts(ctx, &flowv1.CheckScheduleConflictsRequest{Operation: ingestOp})
	require.NoError(t, err)
	require.Equal(t, []string{"power", "ingest"}, names(res), "ingestion conflicts with everything, as upstream and as the task manager decides at run time")
	bring := &flowv1.ScheduledOperation{Operation: &flowv1.ScheduledOperation_BringUp{BringUp: &flowv1.BringUpRackRequest{TargetSpec: rackSpec(r0)}}}
	res, err = b.client.CheckScheduleConflicts(ctx, &flowv1.CheckScheduleConflictsRequest{Operation: bring, ExcludeScheduleId: power.GetId()})
	require.NoError(t, err)
	require.Equal(t, []string{ingest.GetName()}, names(res), "bring-up conflicts with everything; the excluded schedule is left out")
	_, err = b.client.CheckScheduleConflicts(ctx, &flowv1.CheckScheduleConflictsRequest{})
	opstest.RequireCode(t, err, connect.CodeInvalidArgument, "operation is required")
	_, err = b.client.CheckScheduleConflicts(ctx, &flowv1.CheckScheduleConflictsRequest{Operation: fw, ExcludeScheduleId: &flowv1.UUID{Id: "bad"}})
	opstest.RequireCode(t, err, connect.CodeInvalidArgument, "exclude_schedule_id")
}

// TestScheduleTimezoneAsUpstream pins the timezone and spec a schedule
// reports, as upstream stores them: a cron schedule's zone ("UTC" when
// none), an interval or one-time schedule's as given; a new spec keeps the
// stored zone, a zone alone changes only a cron schedule's.
func TestScheduleTimezoneAsUpstream(t *testing.T) {
	t.Parallel()
	b := setupSchedules(t, nil)
	ctx := context.Background()
	req := intervalReq("berlin interval", "1h", powerOnOp(rackSpec(b.racks[0])))
	req.Schedule.Spec.Timezone = "Europe/Berlin"
	s := b.create(t, req)
	require.Equal(t, "Europe/Berlin", s.GetSpec().GetTimezone(), "kept, though an interval ignores it")
	require.Equal(t, t0.Add(time.Hour), s.GetNextRunAt().AsTime())

	got, err := b.client.UpdateTaskSchedule(ctx, &flowv1.UpdateTaskScheduleRequest{Id: s.GetId(), Schedule: &flowv1.ScheduleConfig{Spec: &flowv1.ScheduleSpec{Timezone: "Asia/Tokyo"}}, UpdateMask: mask("schedule.spec.timezone")})
	require.NoError(t, err)
	require.Equal(t, "Europe/Berlin", got.GetSpec().GetTimezone(), "a zone alone does not change an interval schedule")
	require.Equal(t, t0.Add(time.Hour), got.GetNextRunAt().AsTime())

	got, err = b.client.UpdateTaskSchedule(ctx, &flowv1.UpdateTaskScheduleRequest{Id: s.GetId(), Schedule: &flowv1.ScheduleConfig{Spec: &flowv1.ScheduleSpec{Type: flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_CRON, Spec: "0 2 * * *"}}, UpdateMask: mask("schedule.spec")})
	require.NoError(t, err)
	require.Equal(t, "Europe/Berlin", got.GetSpec().GetTimezone(), "a new spec keeps the stored zone")
	require.Equal(t, time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC), got.GetNextRunAt().AsTime(), "and is read in it: 02:00 CET")

	got, err = b.client.UpdateTaskSchedule(ctx, &flowv1.UpdateTaskScheduleRequest{Id: s.GetId(), Schedule: &flowv1.ScheduleConfig{Spec: &flowv1.ScheduleSpec{Type: flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_INTERVAL, Spec: "2h", Timezone: "Asia/Tokyo"}}, UpdateMask: mask("schedule.spec", "schedule.spec.timezone")})
	require.NoError(t, err)
	require.Equal(t, "Europe/Berlin", got.GetSpec().GetTimezone(), "a zone given with a non-cron spec is not stored")
	require.Equal(t, t0.Add(2*time.Hour), got.GetNextRunAt().AsTime())

	// No zone: an interval turned cron is read in UTC and still shows none.
	plain := b.create(t, intervalReq("plain", "1h", powerOnOp(rackSpec(b.racks[1]))))
	got, err = b.client.UpdateTaskSchedule(ctx, &flowv1.UpdateTaskScheduleRequest{Id: plain.GetId(), Schedule: &flowv1.ScheduleConfig{Spec: &flowv1.ScheduleSpec{Type: flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_CRON, Spec: "0 2 * * *"}}, UpdateMask: mask("schedule.spec")})
	require.NoError(t, err)
	require.Empty(t, got.GetSpec().GetTimezone())
	require.Equal(t, time.Date(2026, 12, 2, 2, 0, 0, 0, time.UTC), got.GetNextRunAt().AsTime())

	// A cron schedule given no zone reports UTC.
	c := b.create(t, &flowv1.CreateTaskScheduleRequest{
		Schedule:  &flowv1.ScheduleConfig{Name: "utc cron", Spec: &flowv1.ScheduleSpec{Type: flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_CRON, Spec: "0 3 * * *"}},
		Operation: powerOnOp(rackSpec(b.racks[2])),
	})
	require.Equal(t, "UTC", c.GetSpec().GetTimezone())

	// One-time: echoed as written, fires at the instant it names.
	ot := b.create(t, &flowv1.CreateTaskScheduleRequest{
		Schedule:  &flowv1.ScheduleConfig{Name: "tokyo once", Spec: &flowv1.ScheduleSpec{Type: flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_ONE_TIME, Spec: "2026-12-02T09:00:00+09:00", Timezone: "Asia/Tokyo"}},
		Operation: powerOnOp(rackSpec(b.racks[0])),
	})
	require.Equal(t, "2026-12-02T09:00:00+09:00", ot.GetSpec().GetSpec())
	require.Equal(t, "Asia/Tokyo", ot.GetSpec().GetTimezone())
	require.Equal(t, time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC), ot.GetNextRunAt().AsTime())
	p, err := b.client.PauseTaskSchedule(ctx, &flowv1.PauseTaskScheduleRequest{Id: ot.GetId()})
	require.NoError(t, err)
	require.Equal(t, ot.GetNextRunAt().AsTime(), p.GetNextRunAt().AsTime())
	r, err := b.client.ResumeTaskSchedule(ctx, &flowv1.ResumeTaskScheduleRequest{Id: ot.GetId()})
	require.NoError(t, err)
	require.Equal(t, ot.GetNextRunAt().AsTime(), r.GetNextRunAt().AsTime(), "an unfired one-time schedule keeps its time")
	require.Equal(t, "2026-12-02T09:00:00+09:00", r.GetSpec().GetSpec())

	before := b.snapshot(t)
	long := intervalReq("long zone", "1h", powerOnOp(rackSpec(b.racks[0])))
	long.Schedule.Spec.Timezone = strings.Repeat("x", 65)
	_, err = b.client.CreateTaskSchedule(ctx, long)
	opstest.RequireCode(t, err, connect.CodeInvalidArgument, "schedule.spec.timezone: must be at most 64 characters")
	require.Equal(t, before, b.snapshot(t))
}
