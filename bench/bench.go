// Package bench is flow bench: it runs an operation on many racks against
// the simulators, through the API of a real server child, and reports
// throughput, latencies and resource use (docs/bench.md).
package bench

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nicoflow/flow/operations/ruledef"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/nicoflow/flow/cli"
	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/db/pglocal"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
	"github.com/nicoflow/flow/proto/gen/flow/admin/v1/adminv1connect"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
	"github.com/nicoflow/flow/sim"
	"github.com/nicoflow/flow/sim/nicosim"
	"github.com/nicoflow/flow/sim/simrun"
)

// benchOptions are the settings of one flow bench run.
type benchOptions struct {
	racks       int
	components  int           // per rack, 1..35: the first of DemoRack(i), one of each type kept
	latency     time.Duration // added to every simulator call
	powerDelay  time.Duration // how long a simulated power change takes
	workload    benchWorkload
	keep        bool
	databaseURL string        // empty: a private PostgreSQL in the work folder
	concurrency int           // API calls in flight while creating racks and submitting
	timeout     time.Duration // for the tasks to end, from the first submit
	poll        time.Duration // how often the task listing is polled
	// serverCommand returns the command that runs `flow serve --migrate`;
	// bench adds the environment, output and process group. Tests replace
	// it, because their executable is not flow.
	serverCommand func() (*exec.Cmd, error)
	progress      io.Writer     // one line every few seconds; nil: silent
	serverEnv     []string      // added last to the server's environment
	pgStats       int           // top statements to report from pg_stat_statements; 0: off
	pgSettings    []string      // name=value settings of the private PostgreSQL
	leaks         int           // leaks to raise on busy racks during the run (bench/leak.go)
	leakInterval  time.Duration // between two leaks
	subscribe     bool          // a webhook to every event type, posting to a receiver in this process
	eventRate     float64       // synthetic events a second during the run; 0: none
	eventsPerTx   int           // synthetic events per transaction (one statement); 0, 1: one
	webhookBatch  int           // the receiver's subscription takes batches of up to this many events; 0: one per request
	// The readers (reads.go): how many, their phases (protocol, method,
	// with components: one after the other, each for readDuration), the
	// page size, a leak raised in the first phase, and whether they read
	// after the workload instead of during it.
	readers      int
	readPhases   []readPhase
	readPage     int
	readDuration time.Duration
	readLeak     bool
	readAfter    bool
}

// benchWorkload is what flow bench drives on every rack. A new workload
// (firmware-upgrade, issue 7) is one type and one line in benchWorkloads.
type benchWorkload interface {
	name() string
	// tune adjusts the simulators' timings, e.g. the firmware phase.
	tune(o *simrun.Options)
	// device sets how one of the rack's devices starts in the simulators.
	device(d *nicosim.Device)
	// submit submits the operation on one rack and returns the task IDs.
	submit(ctx context.Context, c flowv1connect.FlowClient, rack string) ([]*flowv1.UUID, error)
	// rule is the rule the tasks run unless they report an applied rule; it
	// turns report steps into engine steps.
	rule() (operations.Rule, bool)
}

// benchWorkloads are the workloads by --workload name.
var benchWorkloads = map[string]benchWorkload{
	"power-on":         powerOnWorkload{},
	"firmware-upgrade": firmwareUpgradeWorkload{},
	"none":             noWorkload{},
}

// noWorkload submits nothing: with --readers, the run is the reads alone,
// on racks whose devices are on.
type noWorkload struct{}

func (noWorkload) name() string           { return "none" }
func (noWorkload) tune(*simrun.Options)   {}
func (noWorkload) device(*nicosim.Device) {}
func (noWorkload) submit(context.Context, flowv1connect.FlowClient, string) ([]*flowv1.UUID, error) {
	return nil, nil
}
func (noWorkload) rule() (operations.Rule, bool) { return operations.Rule{}, false }

// powerOnWorkload powers on racks whose devices start off, with the
// built-in power_on rule: shelves, then switches, then compute trays, each a
// PowerControl and a VerifyPowerStatus.
type powerOnWorkload struct{}

func (powerOnWorkload) name() string             { return "power-on" }
func (powerOnWorkload) tune(*simrun.Options)     {}
func (powerOnWorkload) device(d *nicosim.Device) { d.PoweredOff = true }

func (powerOnWorkload) submit(ctx context.Context, c flowv1connect.FlowClient, rack string) ([]*flowv1.UUID, error) {
	res, err := c.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: benchRackSpec(rack), Description: "flow bench"})
	if err != nil {
		return nil, err
	}
	return res.GetTaskIds(), nil
}

func (powerOnWorkload) rule() (operations.Rule, bool) {
	return operations.BuiltinRule(operations.OperationTypePowerControl, "power_on")
}

func benchRackSpec(name string) *flowv1.OperationTargetSpec {
	return &flowv1.OperationTargetSpec{Targets: &flowv1.OperationTargetSpec_Racks{Racks: &flowv1.RackTargets{
		Targets: []*flowv1.RackTarget{{Identifier: &flowv1.RackTarget_Name{Name: name}}},
	}}}
}

// Result is what flow bench measured; -o json prints it as is.
type Result struct {
	Workload   string `json:"workload"`
	Racks      int    `json:"racks"`
	Components int    `json:"components_per_rack"`
	Latency    string `json:"backend_latency"`

	Tasks      int `json:"tasks"`
	Completed  int `json:"completed"`
	Failed     int `json:"failed"`     // failed, terminated, or never submitted
	Unfinished int `json:"unfinished"` // still active when the timeout hit
	// PreemptedByLeaks are tasks the bench's own leaks (--leaks)
	// terminated: a leak response pre-empts the rack's running work, as it
	// should, so they are counted apart and are not failures.
	PreemptedByLeaks int `json:"preempted_by_leaks,omitempty"`

	SetupSeconds float64 `json:"setup_seconds"` // PostgreSQL, simulators, server, racks
	// CreateRacksSeconds is the racks' creation alone (CreateExpectedRack
	// with --concurrency in flight), and CreateRack*CPUMs the CPU it cost
	// a rack, the server child's and the private PostgreSQL's: what a
	// rack costs, which the machine's load changes far less than the wall.
	CreateRacksSeconds      float64     `json:"create_racks_seconds"`
	CreateRackServerCPUMs   float64     `json:"create_rack_server_cpu_ms"`
	CreateRackPostgresCPUMs float64     `json:"create_rack_postgres_cpu_ms"`
	CreateStatements        []Statement `json:"create_statements,omitempty"` // --pg-stats: the top statements of the racks' creation
	SubmitSeconds           float64     `json:"submit_seconds"`              // first submit sent → last submit answered
	WallSeconds             float64     `json:"wall_seconds"`                // first submit sent → last task finished

	TasksPerSecond float64 `json:"tasks_per_second"`
	// EngineSteps counts the engine steps of finished rule steps: each
	// rule step in a task report runs one engine step per action.
	EngineSteps        int     `json:"engine_steps"`
	StepsPerSecond     float64 `json:"steps_per_second"`
	BackendCalls       int     `json:"backend_calls"` // simulator journal entries, both simulators
	BackendCallsPerSec float64 `json:"backend_calls_per_second"`
	// Polls counts status polls (the workload's poll methods), if it has any.
	Polls          int     `json:"status_polls,omitempty"`
	PollsPerSecond float64 `json:"status_polls_per_second,omitempty"`

	FirstCallP50Ms float64 `json:"submit_to_first_backend_call_p50_ms"`
	FirstCallP99Ms float64 `json:"submit_to_first_backend_call_p99_ms"`
	CompletedP50Ms float64 `json:"submit_to_completed_p50_ms"`
	CompletedP99Ms float64 `json:"submit_to_completed_p99_ms"`

	ServerPeakRSSBytes int64 `json:"server_peak_rss_bytes"`
	// CPU seconds (user+system) spent from the first submit to the end of
	// the wait: by the server child, by the bench process (simulators and
	// API client) and by PostgreSQL (the private one, or --database-url's whole
	// cluster when it runs on this machine; else 0).
	ServerCPUSeconds   float64  `json:"server_cpu_seconds"`
	BenchCPUSeconds    float64  `json:"bench_cpu_seconds"`
	PostgresCPUSeconds float64  `json:"postgres_cpu_seconds"`
	Failures           []string `json:"failures,omitempty"` // up to 10 reasons
	// Leaks is how many leaks --leaks raised on busy racks; the response
	// time of each is from the simulator raising it to the first power-off
	// command for the tray reaching the simulator (journal timestamps).
	Leaks             int     `json:"leaks,omitempty"`
	LeaksUnanswered   int     `json:"leaks_unanswered,omitempty"`
	LeakResponseP50Ms float64 `json:"leak_to_power_off_p50_ms,omitempty"`
	LeakResponseP99Ms float64 `json:"leak_to_power_off_p99_ms,omitempty"`
	LeakResponseMaxMs float64 `json:"leak_to_power_off_max_ms,omitempty"`
	// LeakStages cut each leak's response time at the points the journal
	// and the database record (bench/leakstages.go); LeakCheck* are the
	// leak check's start-to-start intervals from the first leak on.
	LeakStages             []LeakStage `json:"leak_stages,omitempty"`
	LeakCheckCycles        int         `json:"leak_check_cycles,omitempty"`
	LeakCheckIntervalP50Ms float64     `json:"leak_check_interval_p50_ms,omitempty"`
	LeakCheckIntervalMaxMs float64     `json:"leak_check_interval_max_ms,omitempty"`
	// Reads is what the readers measured (--readers): the first phase's;
	// ReadPhases all of them, in order, when there were several.
	Reads      *ReadResult   `json:"reads,omitempty"`
	ReadPhases []*ReadResult `json:"read_phases,omitempty"`
	// Statements are the top statements of the run by total execution
	// time (--pg-stats), from pg_stat_statements.
	Statements []Statement `json:"statements,omitempty"`
	// Webhook is what the receiver got (Options.Subscribe) and the
	// synthetic stream wrote (Options.EventsPerSecond).
	Webhook *WebhookResult `json:"webhook,omitempty"`
}

// Statement is one pg_stat_statements entry of the run.
type Statement struct {
	Query        string  `json:"query"`
	Calls        int64   `json:"calls"`
	Rows         int64   `json:"rows"`
	TotalMs      float64 `json:"total_ms"`
	MeanMs       float64 `json:"mean_ms"`
	SharedHit    int64   `json:"shared_blks_hit"`
	SharedDirty  int64   `json:"shared_blks_dirtied"`
	WALBytes     int64   `json:"wal_bytes"`
	TotalPercent float64 `json:"total_percent"` // of all statements' total time
}

// Options are the settings of one flow bench run: its flags, and the
// server command tests replace.
type Options struct {
	Racks       int
	Components  int           // per rack, 1..35: the first of DemoRack(i), one of each type kept
	Latency     time.Duration // added to every simulator call
	PowerDelay  time.Duration // how long a simulated power change takes
	Workload    string        // power-on, firmware-upgrade
	Keep        bool          // keep everything running after the summary, until ctx ends
	DatabaseURL string        // empty: a private PostgreSQL in the work folder
	Concurrency int           // API calls in flight while creating racks and submitting
	Timeout     time.Duration // for the tasks to end, from the first submit
	Poll        time.Duration // how often the task listing is polled; 0: 100ms
	// ServerCommand returns the command that runs `flow serve --migrate`;
	// bench adds the environment, output and process group. nil: this
	// executable's serve.
	ServerCommand func() (*exec.Cmd, error)
	Progress      io.Writer // one line every few seconds; nil: silent
	// ServerEnv is added last to the server child's environment.
	ServerEnv []string
	// CompareTelemetry runs the bench twice, on fresh clusters: with the
	// server's metrics and tracing off, then on (spans exported over
	// OTLP/HTTP to a sink in the bench process), and reports both.
	CompareTelemetry bool
	// CompareWebhook runs the bench twice, on fresh clusters: without, then
	// with, a webhook subscribed to every event type (bench/webhook.go).
	CompareWebhook bool
	// PGStats loads pg_stat_statements into the private PostgreSQL and
	// reports this many statements, by total execution time, run between
	// the first submit and the end of the wait. 0: off.
	PGStats int
	// PGSettings are name=value settings of the private PostgreSQL
	// (`-c name=value`), e.g. auto_explain.log_min_duration=100ms.
	PGSettings []string
	// Leaks raises a coolant leak on a compute tray of this many busy racks
	// during the run, one every LeakInterval, and reports the leak → first
	// power-off times (bench/leak.go). 0: none.
	Leaks        int
	LeakInterval time.Duration
	// Subscribe subscribes a webhook to every event type before the run,
	// posting to a receiver in the bench process (the server needs a data
	// key and dev mode: ServerEnv), and reports what it got
	// (Result.Webhook), waiting up to a minute after the run for every
	// event owed.
	Subscribe bool
	// EventsPerSecond, when positive, writes a synthetic event stream of
	// this rate through notify's outbox from the first submit to the end
	// of the wait (bench/events.go); without Subscribe its transactions
	// write nothing.
	EventsPerSecond float64
	// EventsPerStatement is how many synthetic events one transaction
	// writes, in one statement (notify.Service.EmitMany); 0 means 1.
	EventsPerStatement int
	// WebhookBatch, when positive, makes the receiver's subscription
	// batched: CloudEvents batches of up to this many events a request.
	WebhookBatch int
	// Rounds is how many without/with pairs --compare-webhook runs, the
	// order alternating round by round; 0 means 1.
	Rounds int
	// Readers clients call ReadMethod (racks: GetListOfRacks pages of
	// ReadPage; rack: GetRackInfoByID; tasks: ListTasks by rack) in
	// ReadProtocol (json, proto, grpc), with components when
	// ReadWithComponents, for ReadDuration while the workload runs; ReadLeak
	// raises a leak a third of the way in (reads.go). ReadProtocol and
	// ReadMethod may list several, comma-separated (a method suffixed
	// "+components" asks for components): each method in each protocol is
	// a phase of its own, one after the other, with --workload none or
	// after the workload (ReadAfter); the leak is raised in the first.
	Readers            int
	ReadProtocol       string
	ReadMethod         string
	ReadWithComponents bool
	ReadPage           int
	ReadDuration       time.Duration
	ReadLeak           bool
	ReadAfter          bool
}

// options checks o (bad values are usage errors) and fills the defaults.
func (o Options) options() (benchOptions, error) {
	w, ok := benchWorkloads[o.Workload]
	switch {
	case !ok:
		return benchOptions{}, cli.UsageError(fmt.Errorf("--workload %q: want one of %s", o.Workload, strings.Join(benchWorkloadNames(), ", ")))
	case o.Racks < 1:
		return benchOptions{}, cli.UsageError(errors.New("--racks must be at least 1"))
	case o.Components < 1 || o.Components > len(inventory.DemoRack(0).Components):
		return benchOptions{}, cli.UsageError(fmt.Errorf("--components must be within 1..%d", len(inventory.DemoRack(0).Components)))
	case o.Concurrency < 1:
		return benchOptions{}, cli.UsageError(errors.New("--concurrency must be at least 1"))
	case o.PGStats < 0:
		return benchOptions{}, cli.UsageError(errors.New("--pg-stats must not be negative"))
	case o.PGStats > 0 && o.DatabaseURL != "":
		return benchOptions{}, cli.UsageError(errors.New("--pg-stats needs the private PostgreSQL (no --database-url)"))
	case o.Leaks < 0 || o.Leaks > o.Racks:
		return benchOptions{}, cli.UsageError(fmt.Errorf("--leaks must be within 0..%d (--racks)", o.Racks))
	case o.Leaks > 0 && o.LeakInterval <= 0:
		return benchOptions{}, cli.UsageError(errors.New("--leak-interval must be positive"))
	case o.EventsPerSecond < 0:
		return benchOptions{}, cli.UsageError(errors.New("--webhook-events-per-second must not be negative"))
	case o.EventsPerStatement < 0 || o.EventsPerStatement > 1000:
		return benchOptions{}, cli.UsageError(errors.New("--webhook-events-per-statement must be within 0..1000"))
	case o.WebhookBatch < 0 || o.WebhookBatch > 1000:
		return benchOptions{}, cli.UsageError(errors.New("--webhook-batch must be within 0..1000"))
	case o.Rounds < 0:
		return benchOptions{}, cli.UsageError(errors.New("--rounds must not be negative"))
	case len(o.PGSettings) > 0 && o.DatabaseURL != "":
		return benchOptions{}, cli.UsageError(errors.New("--pg-setting needs the private PostgreSQL (no --database-url)"))
	}
	switch {
	case o.Readers < 0:
		return benchOptions{}, cli.UsageError(errors.New("--readers must not be negative"))
	case o.Readers > 0 && (o.ReadPage < 1 || o.ReadDuration < time.Second):
		return benchOptions{}, cli.UsageError(errors.New("--read-page must be at least 1 and --read-duration at least 1s"))
	case o.ReadLeak && o.Readers == 0:
		return benchOptions{}, cli.UsageError(errors.New("--read-leak needs --readers"))
	case o.Workload == "none" && o.Readers == 0:
		return benchOptions{}, cli.UsageError(errors.New("--workload none needs --readers"))
	case o.ReadAfter && (o.Readers == 0 || o.Workload == "none"):
		return benchOptions{}, cli.UsageError(errors.New("--read-after needs --readers and a workload (not none)"))
	}
	var phases []readPhase
	if o.Readers > 0 {
		var err error
		if phases, err = parseReadPhases(o.ReadProtocol, o.ReadMethod, o.ReadWithComponents); err != nil {
			return benchOptions{}, cli.UsageError(err)
		}
		if len(phases) > 1 && o.Workload != "none" && !o.ReadAfter {
			return benchOptions{}, cli.UsageError(errors.New("several read phases (--read-protocol, --read-method lists) need --workload none or --read-after"))
		}
	}
	for _, kv := range o.PGSettings {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return benchOptions{}, cli.UsageError(fmt.Errorf("--pg-setting %q: want name=value", kv))
		}
	}
	bo := benchOptions{racks: o.Racks, components: o.Components, latency: o.Latency, powerDelay: o.PowerDelay, workload: w,
		keep: o.Keep, databaseURL: o.DatabaseURL, concurrency: o.Concurrency, timeout: o.Timeout, poll: o.Poll,
		serverCommand: o.ServerCommand, progress: o.Progress, serverEnv: o.ServerEnv, pgStats: o.PGStats, pgSettings: o.PGSettings,
		leaks: o.Leaks, leakInterval: o.LeakInterval, subscribe: o.Subscribe, eventRate: o.EventsPerSecond,
		eventsPerTx: o.EventsPerStatement, webhookBatch: o.WebhookBatch,
		readers: o.Readers, readPhases: phases, readPage: o.ReadPage, readDuration: o.ReadDuration, readLeak: o.ReadLeak, readAfter: o.ReadAfter}
	if bo.serverCommand == nil {
		bo.serverCommand = func() (*exec.Cmd, error) {
			exe, err := os.Executable()
			if err != nil {
				return nil, err
			}
			return exec.Command(exe, "serve", "--migrate"), nil
		}
	}
	return bo, nil
}

// Start brings up the cluster: PostgreSQL, the simulators and the server
// child. On error the returned Bench, when not nil, still needs Close.
func Start(ctx context.Context, o Options) (*Bench, error) {
	bo, err := o.options()
	if err != nil {
		return nil, err
	}
	return startBench(ctx, bo)
}

// Run creates the racks, seeds the simulators, submits the workload on
// every rack, waits for the tasks and measures.
func (b *Bench) Run(ctx context.Context) (*Result, error) { return b.run(ctx) }

// Close stops the server child, the simulators and PostgreSQL and removes
// the work folder unless Keep.
func (b *Bench) Close(ctx context.Context) error { return b.close(ctx) }

// Command is flow bench (docs/bench.md).
func Command(stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{Use: "bench", Short: "benchmark an operation against the simulators (docs/bench.md)", Args: cobra.NoArgs}
	cmd.Long = `Starts a private PostgreSQL (or uses --database-url), both simulators in this
process and 'flow serve' as a child process, creates N racks of M components
through the API, submits the workload's task on every rack and reports
throughput, latencies and the server's peak memory. See docs/bench.md.`
	o := Options{Progress: stderr}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.IntVar(&o.Racks, "racks", 10, "number of racks")
	fs.IntVar(&o.Components, "components", 35, "components per rack (1-35, from the GB200 demo rack)")
	fs.DurationVar(&o.Latency, "latency", 0, "latency added to every backend (simulator) call")
	fs.DurationVar(&o.PowerDelay, "power-delay", time.Millisecond, "time a simulated power change takes")
	fs.StringVar(&o.Workload, "workload", "power-on", "what to run on every rack: "+strings.Join(benchWorkloadNames(), ", "))
	fs.BoolVar(&o.Keep, "keep", false, "after the summary keep server, simulators and PostgreSQL running until Ctrl-C, and keep the work folder")
	fs.StringVar(&o.DatabaseURL, "database-url", "", "use this (empty) database instead of a private PostgreSQL")
	fs.IntVar(&o.Concurrency, "concurrency", 32, "API calls in flight while creating racks and submitting")
	fs.DurationVar(&o.Timeout, "timeout", 30*time.Minute, "how long to wait for the tasks to end")
	fs.BoolVar(&o.CompareTelemetry, "compare-telemetry", false, "run twice, server metrics and tracing off then on, and compare")
	fs.BoolVar(&o.CompareWebhook, "compare-webhook", false, "run twice, without then with a webhook subscribed to every event type (a receiver in this process), and compare")
	fs.Float64Var(&o.EventsPerSecond, "webhook-events-per-second", 0, "with --compare-webhook: also write this many synthetic events a second through the outbox during each run")
	fs.IntVar(&o.EventsPerStatement, "webhook-events-per-statement", 1, "with --webhook-events-per-second: synthetic events per transaction, written in one statement")
	fs.IntVar(&o.WebhookBatch, "webhook-batch", 0, "with --compare-webhook: the receiver's subscription takes CloudEvents batches of up to this many events a request (0: one event a request)")
	fs.IntVar(&o.Rounds, "rounds", 1, "with --compare-webhook: without/with pairs to run, alternating the order")
	fs.IntVar(&o.PGStats, "pg-stats", 0, "load pg_stat_statements into the private PostgreSQL and report the top N statements of the run by total time")
	fs.StringArrayVar(&o.PGSettings, "pg-setting", nil, "name=value setting of the private PostgreSQL (repeatable; e.g. shared_buffers=256MB)")
	fs.IntVar(&o.Leaks, "leaks", 0, "raise a coolant leak on a compute tray of this many busy racks during the run, and report leak → first power-off p50/p99/max")
	fs.DurationVar(&o.LeakInterval, "leak-interval", 500*time.Millisecond, "time between two leaks of --leaks")
	fs.StringArrayVar(&o.ServerEnv, "server-env", nil, "KEY=VALUE added to the server's environment, last (repeatable; e.g. FLOW_DB_MAX_CONNS=8)")
	fs.IntVar(&o.Readers, "readers", 0, "clients reading as fast as they can while the workload runs (--workload none: alone); reports their p50/p99, calls/s, the server's peak RSS and the leak check's interval")
	fs.StringVar(&o.ReadProtocol, "read-protocol", "json", "the readers' protocol: "+strings.Join(readProtocols, ", ")+" (Connect JSON, Connect binary protobuf, gRPC); a comma-separated list runs each in turn")
	fs.StringVar(&o.ReadMethod, "read-method", "racks", "what the readers call: racks (GetListOfRacks pages), rack (GetRackInfoByID), tasks (ListTasks of a rack); a comma-separated list runs each in turn, and a method suffixed +components asks for components")
	fs.BoolVar(&o.ReadWithComponents, "with-components", false, "the readers ask for components (racks, rack)")
	fs.IntVar(&o.ReadPage, "read-page", 100, "GetListOfRacks page size of the readers")
	fs.DurationVar(&o.ReadDuration, "read-duration", 60*time.Second, "how long the readers read")
	fs.BoolVar(&o.ReadLeak, "read-leak", false, "raise a leak on a compute tray a third of the way into the (first phase's) reads and report its first forced power-off")
	fs.BoolVar(&o.ReadAfter, "read-after", false, "read after the workload has ended (its tasks then exist) instead of during it")
	serverBinary := fs.String("server-binary", "", "run the server child from this flow binary instead of this one (compare two builds under the same bench)")
	output := fs.StringP("output", "o", "table", "output: table or json")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		for _, kv := range o.ServerEnv {
			if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
				return cli.UsageError(fmt.Errorf("--server-env %q: want KEY=VALUE", kv))
			}
		}
		if *output != "table" && *output != "json" {
			return cli.UsageError(fmt.Errorf("-o %q: want table or json", *output))
		}
		if exe := *serverBinary; exe != "" {
			if _, err := os.Stat(exe); err != nil {
				return cli.UsageError(fmt.Errorf("--server-binary: %w", err))
			}
			o.ServerCommand = func() (*exec.Cmd, error) { return exec.Command(exe, "serve", "--migrate"), nil }
		}
		return run(cmd.Context(), o, *output == "json", stdout, stderr)
	}
	return cmd
}

func run(ctx context.Context, o Options, asJSON bool, stdout, stderr io.Writer) error {
	if o.CompareTelemetry {
		return compareTelemetry(ctx, o, asJSON, stdout, stderr)
	}
	if o.CompareWebhook {
		return compareWebhook(ctx, o, asJSON, stdout, stderr)
	}
	b, err := Start(ctx, o)
	if b != nil {
		defer func() {
			if err := b.Close(context.WithoutCancel(ctx)); err != nil {
				fmt.Fprintf(stderr, "bench: cleanup: %v\n", err)
			}
		}()
	}
	if err != nil {
		return err
	}
	res, err := b.Run(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("bench interrupted, cleaning up: %w", ctx.Err())
		}
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		printBenchResult(stdout, res)
	}
	if !asJSON {
		for _, r := range res.readResults() {
			printReadResult(stdout, r)
		}
	}
	if o.Keep {
		fmt.Fprintf(stderr, "\nkept for inspection until Ctrl-C:\n  server     flow task list --server %s   (log %s)\n  database   %s\n  NICo Core  %s/admin/journal\n  PSM        %s/admin/journal\n  folder     %s (kept after exit)\n",
			b.serverAddr, filepath.Join(b.dir, "server.log"), b.dbURL, b.sims.NICoServer.URL(), b.sims.PSMServer.URL(), b.dir)
		<-ctx.Done()
	}
	if res.Failed > 0 || res.Unfinished > 0 {
		return fmt.Errorf("bench: %d of %d tasks failed, %d unfinished", res.Failed, res.Tasks, res.Unfinished)
	}
	return nil
}

func benchWorkloadNames() []string {
	var names []string
	for n := range benchWorkloads {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Bench is a running bench cluster: work folder, PostgreSQL, simulators and
// the server child, torn down in reverse order by close.
type Bench struct {
	o          benchOptions
	dir        string
	dbURL      string
	pgDataDir  string // private PostgreSQL's (or --database-url's, when on this machine), for its CPU time
	sims       *simrun.Simulators
	server     *exec.Cmd
	serverDone chan struct{} // closed when the child has exited
	serverErr  error
	serverAddr string
	client     flowv1connect.FlowClient
	admin      adminv1connect.AdminServiceClient
	started    time.Time
	cleanups   []func(ctx context.Context) error
}

// startBench brings up the cluster. On error the returned bench, when not
// nil, still needs close.
func startBench(ctx context.Context, o benchOptions) (_ *Bench, err error) {
	b := &Bench{o: o, started: time.Now()}
	if b.dir, err = os.MkdirTemp("", "flow-bench-"); err != nil {
		return nil, err
	}
	// PostgreSQL runs as the postgres user when we are root: it must be able
	// to enter the folder.
	if err := os.Chmod(b.dir, 0o755); err != nil {
		return b, err
	}
	b.onClose(func(context.Context) error {
		// The server's errors outlive its folder: a failed run stays
		// diagnosable without --keep.
		b.reportServerErrors()
		if o.keep {
			return nil
		}
		return os.RemoveAll(b.dir)
	})

	b.dbURL = o.databaseURL
	if b.dbURL == "" {
		cluster, err := pglocal.New(filepath.Join(b.dir, "pg"), 0)
		if err != nil {
			return b, err
		}
		cluster.Settings = map[string]string{}
		if o.pgStats > 0 {
			cluster.Settings["shared_preload_libraries"] = "pg_stat_statements"
			cluster.Settings["pg_stat_statements.max"] = "1000"
		}
		for _, kv := range o.pgSettings {
			k, v, _ := strings.Cut(kv, "=")
			if k == "shared_preload_libraries" && cluster.Settings[k] != "" {
				v = cluster.Settings[k] + "," + v
			}
			cluster.Settings[k] = v
		}
		b.progressf("starting private postgres in %s", cluster.DataDir)
		if err := cluster.Init(ctx); err != nil {
			return b, err
		}
		if err := cluster.Start(ctx); err != nil {
			return b, err
		}
		b.onClose(cluster.Stop)
		if err := db.CreateDatabase(ctx, cluster.URL("postgres"), "flow"); err != nil {
			return b, err
		}
		b.dbURL, b.pgDataDir = cluster.URL("flow"), cluster.DataDir
	}
	if _, err := db.Migrate(ctx, b.dbURL); err != nil {
		return b, err
	}
	if b.pgDataDir == "" {
		b.pgDataDir = localDataDir(ctx, b.dbURL)
	}

	so := simrun.Options{NICoAddr: "127.0.0.1:0", PSMAddr: "127.0.0.1:0", PowerDelay: o.powerDelay, FirmwarePhase: time.Millisecond}
	o.workload.tune(&so)
	if b.sims, err = simrun.Start(so); err != nil {
		return b, err
	}
	b.onClose(b.sims.Close)
	if o.latency > 0 {
		for _, fs := range []*sim.Faults{b.sims.NICo.Faults(), b.sims.PSM.Faults()} {
			if _, err := fs.Add(sim.Fault{Kind: sim.FaultLatency, Latency: sim.Duration(o.latency)}); err != nil {
				return b, err
			}
		}
	}

	if err := b.startServer(ctx); err != nil {
		return b, err
	}
	return b, nil
}

// onClose registers a cleanup; close runs them in reverse order.
func (b *Bench) onClose(f func(ctx context.Context) error) { b.cleanups = append(b.cleanups, f) }

// close stops the server child (SIGTERM, then SIGKILL after 30 s), the
// simulators and PostgreSQL and removes the work folder unless --keep.
func (b *Bench) close(ctx context.Context) error {
	var errs []error
	for _, f := range slices.Backward(b.cleanups) {
		errs = append(errs, f(ctx))
	}
	return errors.Join(errs...)
}

// maxServerErrors is how many of the server's ERROR log lines
// reportServerErrors prints at most.
const maxServerErrors = 20

// reportServerErrors prints the server log's ERROR lines (the last
// maxServerErrors of them) to the progress output, if any.
func (b *Bench) reportServerErrors() {
	if b.o.progress == nil {
		return
	}
	f, err := os.Open(filepath.Join(b.dir, "server.log"))
	if err != nil {
		return // no server was started
	}
	defer f.Close()
	var lines []string
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		if l := sc.Text(); strings.Contains(l, `"level":"ERROR"`) {
			n++
			lines = append(lines, l)
			if len(lines) > maxServerErrors {
				lines = lines[1:]
			}
		}
	}
	if n == 0 {
		return
	}
	b.progressf("the server logged %d error(s); the last %d:", n, len(lines))
	for _, l := range lines {
		fmt.Fprintln(b.o.progress, "  "+l)
	}
}

func (b *Bench) progressf(format string, args ...any) {
	if b.o.progress != nil {
		fmt.Fprintf(b.o.progress, "bench: "+format+"\n", args...)
	}
}

// startServer runs `flow serve --migrate` as a child process in its own
// process group (so a Ctrl-C reaches only us, and we stop it in order) and
// waits until it answers.
func (b *Bench) startServer(ctx context.Context) error {
	port, err := pglocal.FreePort()
	if err != nil {
		return err
	}
	b.serverAddr = "127.0.0.1:" + strconv.Itoa(port)
	cmd, err := b.o.serverCommand()
	if err != nil {
		return err
	}
	logFile, err := os.Create(filepath.Join(b.dir, "server.log"))
	if err != nil {
		return err
	}
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env,
		"DATABASE_URL="+b.dbURL,
		"NICO_CORE_API_URL="+b.sims.NICoServer.URL(),
		"PSM_API_URL="+b.sims.PSMServer.URL(),
		"FLOW_LISTEN_ADDR="+b.serverAddr,
		"FLOW_DEV_MODE=false",
		"FLOW_SHUTDOWN_TIMEOUT=10s",
		// The bench measures the engine on loopback, in cleartext, and
		// leaves the admin listener's port to a flow dev on this machine.
		"ALLOW_INSECURE_GRPC=true", "FLOW_TLS_CA=", "FLOW_TLS_CERT=", "FLOW_TLS_KEY=", "CERTDIR=", "FLOW_AUTHZ_POLICY=",
		"FLOW_ADMIN_LISTEN_ADDR=off", "FLOW_ADMIN_LISTEN=off",
	)
	if w, ok := b.o.workload.(benchEnvWorkload); ok {
		cmd.Env = append(cmd.Env, w.serverEnv()...)
	}
	if b.o.readers > 0 {
		cfg, err := b.noSyncConfig()
		if err != nil {
			return err
		}
		cmd.Env = append(cmd.Env, "FLOW_CONFIG_FILE="+cfg)
	}
	cmd.Env = append(cmd.Env, b.o.serverEnv...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start server: %w", err)
	}
	b.server, b.serverDone = cmd, make(chan struct{})
	go func() {
		b.serverErr = cmd.Wait()
		logFile.Close()
		close(b.serverDone)
	}()
	b.onClose(b.stopServer)
	b.progressf("server pid %d on %s, log %s", cmd.Process.Pid, b.serverAddr, logFile.Name())

	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: &p}}
	b.client = flowv1connect.NewFlowLeanClient(hc, "http://"+b.serverAddr)
	b.admin = adminv1connect.NewAdminServiceLeanClient(hc, "http://"+b.serverAddr)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := b.client.Version(ctx, &flowv1.VersionRequest{}); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("server did not answer within 60s (log %s): %w", logFile.Name(), err)
		}
		select {
		case <-b.serverDone:
			return fmt.Errorf("server exited: %v; see %s", b.serverErr, logFile.Name())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (b *Bench) stopServer(ctx context.Context) error {
	select {
	case <-b.serverDone:
		return nil
	default:
	}
	_ = b.server.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.serverDone:
		return nil
	case <-time.After(30 * time.Second):
		_ = b.server.Process.Kill()
		<-b.serverDone
		return errors.New("server did not stop within 30s of SIGTERM; killed")
	}
}

// benchTask is one submitted task and what the bench learns about it.
type benchTask struct {
	rack     int
	id       string
	submitAt time.Time
	task     *flowv1.Task
}

// run creates the racks, seeds the simulators, submits the workload on
// every rack, waits for the tasks and measures.
func (b *Bench) run(ctx context.Context) (*Result, error) {
	o := b.o
	res := &Result{Workload: o.workload.name(), Racks: o.racks, Components: o.components, Latency: o.latency.String()}

	if o.pgStats > 0 {
		if err := b.resetStatements(ctx); err != nil {
			return nil, err
		}
	}
	createCPU, t0 := b.cpu(), time.Now()
	racks, err := b.createRacks(ctx)
	if err != nil {
		return nil, err
	}
	res.CreateRacksSeconds = time.Since(t0).Seconds()
	if cpu := b.cpu().minus(createCPU); len(racks) > 0 {
		res.CreateRackServerCPUMs = 1000 * cpu.server / float64(len(racks))
		res.CreateRackPostgresCPUMs = 1000 * cpu.postgres / float64(len(racks))
	}
	if o.pgStats > 0 {
		if res.CreateStatements, err = b.readStatements(ctx, o.pgStats); err != nil {
			return nil, err
		}
	}
	var devs []nicosim.Device
	macRack := map[string]int{} // device MAC or Core ID → rack index
	for i, r := range racks {
		for _, c := range r.Components {
			d := nicosim.Device{
				Kind: strings.ToLower(string(c.Type)), Name: c.Name, Serial: c.SerialNumber,
				BMCMAC: c.BMCs[0].MAC.String(), RackID: r.ID.String(),
				SlotID: int(c.Position.SlotID), TrayIndex: int(c.Position.TrayIdx),
			}
			o.workload.device(&d)
			devs = append(devs, d)
			macRack[strings.ToLower(d.BMCMAC)] = i
		}
	}
	if err := b.sims.Seed(devs); err != nil {
		return nil, fmt.Errorf("seed simulators: %w", err)
	}
	if err := b.linkInventory(ctx); err != nil {
		return nil, err
	}
	if err := b.waitLeakRows(ctx); err != nil {
		return nil, err
	}
	// Calls to a linked device name it by its Core ID.
	for _, st := range b.sims.NICo.States() {
		if i, ok := macRack[strings.ToLower(st.BMCMAC)]; ok && st.ID != "" {
			macRack[strings.ToLower(st.ID)] = i
		}
	}
	b.sims.NICo.Journal().Reset()
	b.sims.PSM.Journal().Reset()
	if err := b.analyze(ctx); err != nil {
		return nil, err
	}
	res.SetupSeconds = time.Since(b.started).Seconds()

	if o.pgStats > 0 {
		if err := b.resetStatements(ctx); err != nil {
			return nil, err
		}
	}
	var sink *hookSink
	if o.subscribe {
		if sink, err = b.subscribe(ctx, o.webhookBatch); err != nil {
			return nil, err
		}
	}
	if o.readers > 0 && o.workload.name() == "none" {
		return res, b.readPhases(ctx, res, racks)
	}
	if o.readers > 0 && !o.readAfter {
		reads, err := b.startReads(ctx, racks, o.readPhases[0], o.readLeak)
		if err != nil {
			return nil, err
		}
		defer reads.cancel()
		defer func() {
			if res.Reads == nil {
				res.Reads, _ = reads.finish(ctx)
			}
		}()
	}
	b.progressf("submitting %s on %d racks", o.workload.name(), len(racks))
	cpu0 := b.cpu()
	leaks := b.startLeaks(ctx, racks)
	var stream *eventStream
	if o.eventRate > 0 {
		if stream, err = startEventStream(ctx, b.dbURL, o.eventRate, max(o.eventsPerTx, 1), racks); err != nil {
			return nil, err
		}
		defer func() {
			if stream != nil {
				_, _, _, _ = stream.close()
			}
		}()
	}
	tasks, failures, lastSubmit := b.submit(ctx, racks)
	res.Tasks = len(tasks) + len(failures)
	res.Failures = append(res.Failures, failures...)
	if len(tasks) == 0 {
		res.Failed = res.Tasks
		return res, nil
	}
	firstSubmit := slices.MinFunc(tasks, func(a, b *benchTask) int { return a.submitAt.Compare(b.submitAt) }).submitAt
	res.SubmitSeconds = lastSubmit.Sub(firstSubmit).Seconds()

	if err := b.wait(ctx, firstSubmit, len(tasks)); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return nil, err
	}
	waited := time.Now()
	if stream != nil || sink != nil {
		res.Webhook = &WebhookResult{}
	}
	if stream != nil {
		var secs float64
		var err error
		res.Webhook.Emitted, res.Webhook.EmitErrors, secs, err = stream.close()
		if err != nil {
			b.progressf("synthetic events: %d of %d transactions failed, the first: %v", res.Webhook.EmitErrors, res.Webhook.EmitErrors+res.Webhook.Emitted, err)
		}
		res.Webhook.EmittedPerSecond = float64(res.Webhook.Emitted) / secs
		if sink != nil {
			res.Webhook.DuringRun = sink.between(stream.start, stream.end)
			res.Webhook.DeliveredPerSecond = float64(res.Webhook.DuringRun) / secs
		}
		stream = nil
	}
	if o.leaks > 0 {
		l, listings := leaks.wait(ctx)
		b.measureLeaks(ctx, res, l, listings)
	}
	res.ServerPeakRSSBytes = PeakRSS(b.server.Process.Pid)
	cpu := b.cpu().minus(cpu0)
	res.ServerCPUSeconds, res.BenchCPUSeconds, res.PostgresCPUSeconds = cpu.server, cpu.bench, cpu.postgres
	if o.pgStats > 0 {
		if res.Statements, err = b.readStatements(ctx, o.pgStats); err != nil {
			return nil, err
		}
	}
	if err := b.fetch(ctx, tasks); err != nil {
		return nil, err
	}
	b.measure(ctx, res, tasks, macRack, firstSubmit)
	res.Failed += len(failures)
	if sink != nil {
		b.drain(res, sink, waited)
	}
	if o.readAfter {
		return res, b.readPhases(ctx, res, racks)
	}
	return res, nil
}

// linkInventory runs one inventory-sync cycle (AdminService.RunSync), as
// the server's own would within its interval (a minute) of the racks'
// creation: it links every component to its device in NICo Core (Core
// IDs, power states), which a site's inventory has long been. Left to the
// schedule, that first cycle, which rewrites every component, ran in the
// middle of the workload at 3,000 racks (85 s of it, the server's RSS at
// 480 MiB). A server without NICo Core sync (disable_inventory) answers
// FailedPrecondition or Unimplemented: nothing to link.
func (b *Bench) linkInventory(ctx context.Context) error {
	start := time.Now()
	res, err := b.admin.RunSync(ctx, &adminv1.RunSyncRequest{})
	switch code := connect.CodeOf(err); {
	case err == nil:
		b.progressf("inventory sync linked the racks in %s (%d rows changed)", time.Since(start).Round(time.Millisecond), res.GetCycle().GetRowsChanged())
		return nil
	case code == connect.CodeFailedPrecondition || code == connect.CodeUnimplemented || code == connect.CodeUnavailable:
		b.progressf("inventory sync not run: %v", err)
		return nil
	default:
		return fmt.Errorf("inventory sync: %w", err)
	}
}

// waitLeakRows waits (two minutes at most) until leak detection has
// recorded a first status for every linked compute tray and NVLink
// switch: its full pass, every 20th cycle (a minute at 3 s), writes those
// rows once for newly linked components (405,000 at 15,000 racks), which,
// like the linking cycle itself, a site has long had. Left to chance, that
// pass fell in the workload's first minute and was billed to its tasks
// (issue 49). A server without leak detection never writes them: the
// bench goes on after the two minutes, saying so.
func (b *Bench) waitLeakRows(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, b.dbURL)
	if err != nil {
		return fmt.Errorf("leak rows: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	start := time.Now()
	for {
		var missing int64
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM component c LEFT JOIN component_leak l ON l.component_id = c.id
			WHERE c.type IN ('Compute', 'NVSwitch') AND c.external_id IS NOT NULL AND c.deleted_at IS NULL AND l.component_id IS NULL`).Scan(&missing); err != nil {
			return fmt.Errorf("leak rows: %w", err)
		}
		if missing == 0 {
			b.progressf("leak detection's first pass over the linked components came after %s", time.Since(start).Round(time.Millisecond))
			return nil
		}
		if time.Since(start) > 2*time.Minute {
			b.progressf("leak detection has not looked at %d linked components after 2m; going on", missing)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// analyze has PostgreSQL gather statistics of the freshly created racks,
// as autovacuum does within a minute (autovacuum_naptime) of a bulk load.
// Without it the submits' plans come from statistics of empty tables (a
// rack's 35 components found by scanning every component), which no
// server that has been up a minute since the load has.
func (b *Bench) analyze(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, b.dbURL)
	if err != nil {
		return fmt.Errorf("analyze: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "ANALYZE"); err != nil {
		return fmt.Errorf("analyze: %w", err)
	}
	return nil
}

// benchRack returns demo rack i cut to m components: the first m in rack
// order, except that one of each type is kept when m allows.
func benchRack(i, m int) inventory.Rack {
	r := inventory.DemoRack(i)
	if m >= len(r.Components) {
		return r
	}
	pick := make([]bool, len(r.Components))
	n := 0
	seen := map[inventory.ComponentType]bool{}
	for k, c := range r.Components {
		if n < m && !seen[c.Type] {
			seen[c.Type], pick[k] = true, true
			n++
		}
	}
	for k := range r.Components {
		if n < m && !pick[k] {
			pick[k] = true
			n++
		}
	}
	var cs []inventory.Component
	for k, c := range r.Components {
		if pick[k] {
			cs = append(cs, c)
		}
	}
	r.Components = cs
	return r
}

// createRacks registers the racks through CreateExpectedRack.
func (b *Bench) createRacks(ctx context.Context) ([]inventory.Rack, error) {
	racks := make([]inventory.Rack, b.o.racks)
	b.progressf("creating %d racks × %d components", b.o.racks, b.o.components)
	err := parallel(ctx, b.o.concurrency, len(racks), func(ctx context.Context, i int) error {
		r := benchRack(i, b.o.components)
		resp, err := b.client.CreateExpectedRack(ctx, &flowv1.CreateExpectedRackRequest{Rack: inventory.RackToProto(r)})
		if err != nil {
			return fmt.Errorf("create rack %s (the database must not hold the bench racks yet): %w", r.Name, err)
		}
		if r.ID, err = uuid.Parse(resp.GetId().GetId()); err != nil {
			return fmt.Errorf("create rack %s: answer without a valid ID: %w", r.Name, err)
		}
		racks[i] = r
		return nil
	})
	return racks, err
}

// submit submits the workload on every rack, o.concurrency at a time. It
// returns the tasks, the submit errors and when the last answer came.
func (b *Bench) submit(ctx context.Context, racks []inventory.Rack) ([]*benchTask, []string, time.Time) {
	var (
		mu       sync.Mutex
		tasks    []*benchTask
		failures []string
		last     time.Time
	)
	_ = parallel(ctx, b.o.concurrency, len(racks), func(ctx context.Context, i int) error {
		at := time.Now()
		ids, err := b.o.workload.submit(ctx, b.client, racks[i].Name)
		done := time.Now()
		mu.Lock()
		defer mu.Unlock()
		last = later(last, done)
		if err != nil {
			failures = append(failures, fmt.Sprintf("submit on %s: %v", racks[i].Name, err))
			return nil
		}
		for _, id := range ids {
			tasks = append(tasks, &benchTask{rack: i, id: id.GetId(), submitAt: at})
		}
		return nil
	})
	return tasks, failures, last
}

// wait polls the active-task count until it is zero or the timeout passes.
func (b *Bench) wait(ctx context.Context, firstSubmit time.Time, n int) error {
	ctx, cancel := context.WithDeadline(ctx, firstSubmit.Add(b.o.timeout))
	defer cancel()
	poll := cmp.Or(b.o.poll, 100*time.Millisecond)
	lastReport := time.Now()
	for {
		res, err := b.client.ListTasks(ctx, &flowv1.ListTasksRequest{ActiveOnly: true, Pagination: &flowv1.Pagination{Limit: 1}})
		if err != nil {
			return fmt.Errorf("list active tasks: %w", err)
		}
		active := int(res.GetTotal())
		if active == 0 {
			b.progressf("all %d tasks ended after %s", n, time.Since(firstSubmit).Round(time.Millisecond))
			return nil
		}
		if time.Since(lastReport) >= 5*time.Second {
			lastReport = time.Now()
			b.progressf("%d of %d tasks ended (%s)", n-active, n, time.Since(firstSubmit).Round(time.Second))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-b.serverDone:
			return fmt.Errorf("server exited: %v; see %s", b.serverErr, filepath.Join(b.dir, "server.log"))
		case <-time.After(poll):
		}
	}
}

// fetch reads every task, report included, 100 per GetTasksByIDs.
func (b *Bench) fetch(ctx context.Context, tasks []*benchTask) error {
	byID := map[string]*benchTask{}
	for _, t := range tasks {
		byID[t.id] = t
	}
	for batch := range slices.Chunk(tasks, 100) {
		ids := make([]*flowv1.UUID, len(batch))
		for i, t := range batch {
			ids[i] = &flowv1.UUID{Id: t.id}
		}
		res, err := b.client.GetTasksByIDs(ctx, &flowv1.GetTasksByIDsRequest{TaskIds: ids})
		if err != nil {
			return fmt.Errorf("get tasks: %w", err)
		}
		for _, got := range res.GetTasks() {
			if t := byID[got.GetId().GetId()]; t != nil {
				t.task = got
			}
		}
	}
	return nil
}

// leakPreemptedPrefix starts the message of a task a leak response
// pre-empted (operations/eventrule).
const leakPreemptedPrefix = "Terminated: pre-empted by the leak response"

// measure fills res from the fetched tasks and the simulators' journals.
func (b *Bench) measure(ctx context.Context, res *Result, tasks []*benchTask, macRack map[string]int, firstSubmit time.Time) {
	var (
		done      []time.Duration
		lastEnd   time.Time
		rackTasks = map[int][]*benchTask{}
		rules     = map[string]map[stepKey]int{}
	)
	for _, t := range tasks {
		rackTasks[t.rack] = append(rackTasks[t.rack], t)
		switch t.task.GetStatus() {
		case flowv1.TaskStatus_TASK_STATUS_COMPLETED:
			res.Completed++
		case flowv1.TaskStatus_TASK_STATUS_TERMINATED:
			if b.o.leaks > 0 && strings.HasPrefix(t.task.GetMessage(), leakPreemptedPrefix) {
				res.PreemptedByLeaks++
				break
			}
			res.Failed++
			if len(res.Failures) < 10 {
				res.Failures = append(res.Failures, fmt.Sprintf("task %s: %s: %s", t.id, t.task.GetStatus(), t.task.GetMessage()))
			}
		case flowv1.TaskStatus_TASK_STATUS_FAILED:
			res.Failed++
			if len(res.Failures) < 10 {
				res.Failures = append(res.Failures, fmt.Sprintf("task %s: %s: %s", t.id, t.task.GetStatus(), t.task.GetMessage()))
			}
		default:
			res.Unfinished++
			continue
		}
		end := t.task.GetFinishedAt().AsTime()
		lastEnd = later(lastEnd, end)
		done = append(done, end.Sub(t.submitAt))
		res.EngineSteps += b.engineSteps(ctx, t.task, rules)
	}
	if !lastEnd.IsZero() {
		res.WallSeconds = lastEnd.Sub(firstSubmit).Seconds()
	}

	// A journal entry is written when the call ends, after the injected
	// latency: its start is the entry's time minus that latency.
	var first []time.Duration
	seen := map[string]bool{}
	calls := append(b.sims.NICo.Journal().Calls(), b.sims.PSM.Journal().Calls()...)
	res.BackendCalls = len(calls)
	if w, ok := b.o.workload.(benchPoller); ok {
		for _, c := range calls {
			if slices.Contains(w.pollMethods(), c.Method) {
				res.Polls++
			}
		}
	}
	slices.SortFunc(calls, func(a, b sim.Call) int { return a.Time.Compare(b.Time) })
	for _, c := range calls {
		start := c.Time.Add(-b.o.latency)
		for _, d := range c.Devices {
			rack, ok := macRack[strings.ToLower(d)]
			if !ok {
				continue
			}
			for _, t := range rackTasks[rack] {
				// The first call after the task's submit that names one of
				// its devices.
				if !seen[t.id] && !start.Before(t.submitAt) {
					seen[t.id] = true
					first = append(first, start.Sub(t.submitAt))
				}
			}
		}
	}

	if res.WallSeconds > 0 {
		res.TasksPerSecond = float64(res.Completed) / res.WallSeconds
		res.StepsPerSecond = float64(res.EngineSteps) / res.WallSeconds
		res.BackendCallsPerSec = float64(res.BackendCalls) / res.WallSeconds
		res.PollsPerSecond = float64(res.Polls) / res.WallSeconds
	}
	res.FirstCallP50Ms, res.FirstCallP99Ms = percentileMs(first, 50), percentileMs(first, 99)
	res.CompletedP50Ms, res.CompletedP99Ms = percentileMs(done, 50), percentileMs(done, 99)
}

// stepKey names a rule step: its stage and component type.
type stepKey struct {
	stage int
	typ   operations.ComponentType
}

// engineSteps returns how many engine steps the finished rule steps of
// task's report ran: one per engine action of the rule step
// (Step.EngineActions: its own, the firmware read-back, a sleep for
// delay_after). The rule is the applied one when the task names it, else
// the workload's built-in rule; rules caches them by ID.
func (b *Bench) engineSteps(ctx context.Context, task *flowv1.Task, rules map[string]map[stepKey]int) int {
	ruleID := task.GetAppliedRuleId().GetId()
	actions, ok := rules[ruleID]
	if !ok {
		var def ruledef.Definition
		if ruleID == "" {
			r, _ := b.o.workload.rule()
			def = r.Definition
		} else if pr, err := b.client.GetOperationRule(ctx, &flowv1.GetOperationRuleRequest{RuleId: &flowv1.UUID{Id: ruleID}}); err == nil {
			def, _ = ruledef.Parse([]byte(pr.GetRuleDefinitionJson()))
		}
		actions = map[stepKey]int{}
		for _, s := range def.Steps {
			actions[stepKey{s.Stage, s.ComponentType}] = len(s.EngineActions())
		}
		rules[ruleID] = actions
	}
	var rep operations.Report
	if json.Unmarshal([]byte(task.GetReport()), &rep) != nil {
		return 0
	}
	n := 0
	for _, st := range rep.Stages {
		for _, s := range st.Steps {
			if s.Status == "completed" || s.Status == "failed" {
				n += actions[stepKey{st.Number, s.ComponentType}]
			}
		}
	}
	return n
}

// percentileMs returns the nearest-rank p-th percentile of ds in
// milliseconds, 0 for none.
func percentileMs(ds []time.Duration, p int) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	k := (p*len(s) + 99) / 100 // ceil(p/100 · n)
	return float64(s[max(k, 1)-1]) / float64(time.Millisecond)
}

// PeakRSS returns the peak resident set size of process pid (VmHWM in
// /proc/<pid>/status) in bytes, 0 when it cannot be read (not Linux).
func PeakRSS(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(rest) // "123456 kB"
			if len(f) == 2 && f[1] == "kB" {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb * 1024
			}
		}
	}
	return 0
}

// benchCPU is CPU time used so far, in seconds.
type benchCPU struct{ server, bench, postgres float64 }

func (c benchCPU) minus(d benchCPU) benchCPU {
	return benchCPU{c.server - d.server, c.bench - d.bench, c.postgres - d.postgres}
}

// cpu reads the CPU time of the server child, this process and the
// private PostgreSQL: its postmaster, the children it has reaped and its
// live children. Linux only; zeros elsewhere.
func (b *Bench) cpu() benchCPU {
	c := benchCPU{server: procCPU(b.server.Process.Pid, false), bench: procCPU(os.Getpid(), false)}
	if b.pgDataDir == "" {
		return c
	}
	data, err := os.ReadFile(filepath.Join(b.pgDataDir, "postmaster.pid"))
	if err != nil {
		return c
	}
	line, _, _ := strings.Cut(string(data), "\n")
	pm, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return c
	}
	c.postgres = procCPU(pm, true)
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err == nil && procField(pid, 4) == pm {
			c.postgres += procCPU(pid, false)
		}
	}
	return c
}

// localDataDir returns the data folder of the PostgreSQL at url when it
// runs on this machine and its postmaster.pid is readable (a
// --database-url on a local cluster), so its CPU time is measured too; ""
// otherwise. The figure then covers the whole cluster, other databases'
// work included.
func localDataDir(ctx context.Context, url string) string {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return ""
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var dir string
	if err := conn.QueryRow(ctx, "SELECT current_setting('data_directory')").Scan(&dir); err != nil {
		return ""
	}
	if _, err := os.Stat(filepath.Join(dir, "postmaster.pid")); err != nil {
		return ""
	}
	return dir
}

// procCPU returns the user+system CPU seconds of process pid, with reaped
// children's when children is true, from /proc/<pid>/stat.
func procCPU(pid int, children bool) float64 {
	ticks := procField(pid, 14) + procField(pid, 15)
	if children {
		ticks += procField(pid, 16) + procField(pid, 17)
	}
	return float64(ticks) / 100 // USER_HZ is 100 on Linux
}

// procField returns numeric field n (1-based, as in proc(5)) of
// /proc/<pid>/stat, 0 when it cannot be read.
func procField(pid, n int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces; fields restart after ')'.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 || n < 3 {
		return 0
	}
	f := strings.Fields(string(data[i+1:])) // f[0] is field 3
	if len(f) <= n-3 {
		return 0
	}
	v, _ := strconv.Atoi(f[n-3])
	return v
}

// parallel calls f for 0..n-1 with at most limit calls at once and returns
// the first error; after an error no new call starts.
func parallel(ctx context.Context, limit, n int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := f(ctx, i); err != nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func printBenchResult(w io.Writer, r *Result) {
	ms := func(v float64) string {
		return (time.Duration(v * float64(time.Millisecond))).Round(time.Millisecond).String()
	}
	fmt.Fprintf(w, `
flow bench: %s on %d racks × %d components, backend latency %s

  tasks              %d completed, %d failed, %d unfinished (of %d)
  setup              %.1fs (postgres, simulators, server, racks)
  racks created      %.2fs, CPU a rack: server %.2fms, PostgreSQL %.2fms
  submit             %.2fs first submit → last submit answered
  wall               %.2fs first submit → last task finished
  tasks/s            %.1f
  engine steps/s     %.1f (%d steps: one per rule action of each finished rule step)
  backend calls/s    %.1f (%d calls in the simulators' journals)
  submit → 1st call  p50 %s   p99 %s
  submit → done      p50 %s   p99 %s
  server peak RSS    %.1f MiB (VmHWM of the flow serve child)
  CPU during run     server %.1fs, PostgreSQL %.1fs, bench+simulators %.1fs
`, r.Workload, r.Racks, r.Components, r.Latency,
		r.Completed, r.Failed, r.Unfinished, r.Tasks,
		r.SetupSeconds, r.CreateRacksSeconds, r.CreateRackServerCPUMs, r.CreateRackPostgresCPUMs, r.SubmitSeconds, r.WallSeconds, r.TasksPerSecond,
		r.StepsPerSecond, r.EngineSteps, r.BackendCallsPerSec, r.BackendCalls,
		ms(r.FirstCallP50Ms), ms(r.FirstCallP99Ms), ms(r.CompletedP50Ms), ms(r.CompletedP99Ms),
		float64(r.ServerPeakRSSBytes)/(1<<20), r.ServerCPUSeconds, r.PostgresCPUSeconds, r.BenchCPUSeconds)
	if r.Polls > 0 {
		fmt.Fprintf(w, "  status polls/s     %.1f (%d polls)\n", r.PollsPerSecond, r.Polls)
	}
	if r.Leaks > 0 {
		fmt.Fprintf(w, "  leak → power-off   p50 %s   p99 %s   max %s (%d leaks on busy racks, %d unanswered)\n",
			ms(r.LeakResponseP50Ms), ms(r.LeakResponseP99Ms), ms(r.LeakResponseMaxMs), r.Leaks, r.LeaksUnanswered)
		if r.PreemptedByLeaks > 0 {
			fmt.Fprintf(w, "  pre-empted         %d tasks, by the leaks' responses (not failures)\n", r.PreemptedByLeaks)
		}
		printLeakStages(w, r, ms)
	}
	for _, f := range r.Failures {
		fmt.Fprintf(w, "  failure            %s\n", f)
	}
	printStatements(w, "the racks' creation", r.CreateStatements)
	printStatements(w, "first submit → end of wait", r.Statements)
}

// printStatements writes a pg_stat_statements top list, if any.
func printStatements(w io.Writer, what string, stmts []Statement) {
	if len(stmts) == 0 {
		return
	}
	fmt.Fprintf(w, "\n  top statements by total time (pg_stat_statements, %s)\n", what)
	fmt.Fprintf(w, "  %9s %6s %9s %9s %8s %10s  %s\n", "total ms", "%", "calls", "rows", "mean ms", "WAL kB", "query")
	for _, s := range stmts {
		q := []rune(s.Query)
		if len(q) > 150 {
			q = append(q[:150], '…')
		}
		fmt.Fprintf(w, "  %9.0f %5.1f%% %9d %9d %8.3f %10d  %s\n", s.TotalMs, s.TotalPercent, s.Calls, s.Rows, s.MeanMs, s.WALBytes/1024, string(q))
	}
}

// resetStatements empties pg_stat_statements (the extension is created
// first), so that the report covers the workload only.
func (b *Bench) resetStatements(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, b.dbURL)
	if err != nil {
		return fmt.Errorf("pg_stat_statements: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		return fmt.Errorf("pg_stat_statements: %w", err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_stat_statements_reset()"); err != nil {
		return fmt.Errorf("pg_stat_statements: %w", err)
	}
	return nil
}

// readStatements returns the top n statements by total execution time,
// the query text on one line.
func (b *Bench) readStatements(ctx context.Context, n int) ([]Statement, error) {
	conn, err := pgx.Connect(ctx, b.dbURL)
	if err != nil {
		return nil, fmt.Errorf("pg_stat_statements: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `
SELECT query, calls, rows, total_exec_time, mean_exec_time, shared_blks_hit, shared_blks_dirtied, wal_bytes::bigint,
       100 * total_exec_time / nullif(sum(total_exec_time) OVER (), 0)
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
ORDER BY total_exec_time DESC LIMIT $1`, n)
	if err != nil {
		return nil, fmt.Errorf("pg_stat_statements: %w", err)
	}
	defer rows.Close()
	var out []Statement
	for rows.Next() {
		var s Statement
		var pct *float64
		if err := rows.Scan(&s.Query, &s.Calls, &s.Rows, &s.TotalMs, &s.MeanMs, &s.SharedHit, &s.SharedDirty, &s.WALBytes, &pct); err != nil {
			return nil, fmt.Errorf("pg_stat_statements: %w", err)
		}
		if pct != nil {
			s.TotalPercent = *pct
		}
		s.Query = strings.Join(strings.Fields(s.Query), " ")
		out = append(out, s)
	}
	return out, rows.Err()
}

// TelemetryComparison is --compare-telemetry's result: the same bench with
// the server's metrics and tracing off, then on.
type TelemetryComparison struct {
	Off *Result `json:"telemetry_off"`
	On  *Result `json:"telemetry_on"`
	// TasksPerSecondRatio is On's tasks/s over Off's.
	TasksPerSecondRatio float64 `json:"tasks_per_second_ratio"`
}

// compareTelemetry runs the bench with FLOW_METRICS=false and no OTLP
// endpoint, then with FLOW_METRICS=true and every span exported over
// OTLP/HTTP to a sink in this process (which reads and drops them).
func compareTelemetry(ctx context.Context, o Options, asJSON bool, stdout, stderr io.Writer) error {
	if o.Keep {
		return cli.UsageError(errors.New("--compare-telemetry and --keep do not go together"))
	}
	var spans atomic.Int64
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		if n > 0 {
			spans.Add(1)
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer sink.Close()
	once := func(env ...string) (*Result, error) {
		o := o
		o.ServerEnv = append(append([]string(nil), o.ServerEnv...), env...)
		b, err := Start(ctx, o)
		if b != nil {
			defer func() {
				if err := b.Close(context.WithoutCancel(ctx)); err != nil {
					fmt.Fprintf(stderr, "bench: cleanup: %v\n", err)
				}
			}()
		}
		if err != nil {
			return nil, err
		}
		return b.Run(ctx)
	}
	var cmp TelemetryComparison
	var err error
	if cmp.Off, err = once("FLOW_METRICS=false", "OTEL_EXPORTER_OTLP_ENDPOINT=", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="); err != nil {
		return err
	}
	if cmp.On, err = once("FLOW_METRICS=true", "OTEL_EXPORTER_OTLP_ENDPOINT="+sink.URL, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=", "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf"); err != nil {
		return err
	}
	if cmp.Off.TasksPerSecond > 0 {
		cmp.TasksPerSecondRatio = cmp.On.TasksPerSecond / cmp.Off.TasksPerSecond
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(cmp); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(stdout, "\n== metrics and tracing OFF ==")
		printBenchResult(stdout, cmp.Off)
		fmt.Fprintln(stdout, "\n== metrics and tracing ON (spans exported over OTLP/HTTP) ==")
		printBenchResult(stdout, cmp.On)
		fmt.Fprintf(stdout, "\n  tasks/s on ÷ off   %.3f   (%d OTLP export requests received)\n", cmp.TasksPerSecondRatio, spans.Load())
	}
	for _, r := range []*Result{cmp.Off, cmp.On} {
		if r.Failed > 0 || r.Unfinished > 0 {
			return fmt.Errorf("bench: %d of %d tasks failed, %d unfinished", r.Failed, r.Tasks, r.Unfinished)
		}
	}
	if spans.Load() == 0 {
		return errors.New("bench: tracing was on but no span reached the OTLP sink")
	}
	return nil
}
