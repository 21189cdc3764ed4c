package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/nicoflow/flow/backend"
	"github.com/nicoflow/flow/console"
	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/edge"
	"github.com/nicoflow/flow/engine"
	"github.com/nicoflow/flow/firmware"
	"github.com/nicoflow/flow/firmware/baseline"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/notify"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/approval"
	"github.com/nicoflow/flow/operations/eventrule"
	"github.com/nicoflow/flow/operations/isolation"
	"github.com/nicoflow/flow/operations/powerbudget"
	"github.com/nicoflow/flow/operations/rollout"
	"github.com/nicoflow/flow/operations/schedule"
	"github.com/nicoflow/flow/operations/window"
	"github.com/nicoflow/flow/reconcile"
)

// server is a running Flow server: its pool, HTTP server and background work.
type server struct {
	cfg    Config
	logger *slog.Logger
	pool   *pgxpool.Pool
	// checkPool runs the listings' page checks (listingCheckConns).
	checkPool *pgxpool.Pool
	// safetyPool is the safety path's own (FLOW_SAFETY_DB_CONNS): leak
	// detection and the event-rule pipeline.
	safetyPool *pgxpool.Pool
	console    *console.Console // /ui/ on the API port
	http       *http.Server
	health     *edge.Health
	keys       *firmware.Keyring // nil when no key is configured
	backends   *backends
	mock       *mockBackend // nil: no type is managed by mock
	ln         net.Listener
	tls        *edge.CertReloader // nil: the API is cleartext
	admin      *http.Server       // nil: FLOW_ADMIN_LISTEN=off
	adminLn    net.Listener
	// metrics serves /metrics on upstream's --metrics-port (nil: not given).
	metrics   *http.Server
	metricsLn net.Listener
	engine    *engine.Engine
	river     *river.Client[pgx.Tx]
	// notifier gives webhook lanes their delivery jobs while River runs
	// (notify.Service.Run).
	notifier *notify.Service
	syncer   *reconcile.Syncer
	system   *systemJobs
	tel      *telemetrySetup
	// riverStarted is set once the River client has started (/readyz).
	riverStarted atomic.Bool
}

// serveOptions are the parts of `flow serve` that are not Config.
type serveOptions struct {
	migrate bool // apply migrations at start instead of refusing an old schema
	// cleartext serves the API without TLS whatever the certificate
	// settings: flow dev, on loopback.
	cleartext bool
	// tracer, if set, replaces the OTLP tracer provider (tests: an
	// in-memory exporter).
	tracer *sdktrace.TracerProvider
}

// newServer connects to the database, checks the schema, builds the handler
// tree and binds the listener. Call run to serve.
func newServer(ctx context.Context, cfg Config, logger *slog.Logger, opts serveOptions) (_ *server, err error) {
	keys, err := firmware.LoadKeyring(cfg.KeyPath, cfg.RetiredKeyPaths)
	if err != nil {
		return nil, err
	}
	if keys == nil {
		logger.WarnContext(ctx, "flow data encryption key is not configured; requests with firmware authentication data and existing encrypted operations will fail", "setting", "FLOW_DATA_ENCRYPTION_KEY_PATH")
	} else {
		logger.InfoContext(ctx, "data encryption keys loaded", "current_key_id", keys.CurrentKeyID(), "key_ids", keys.KeyIDs())
	}
	sec, err := setupSecurity(ctx, cfg, logger, opts.cleartext)
	if err != nil {
		return nil, err
	}
	if opts.migrate {
		if err := waitForDatabase(ctx, logger, "migrate", func() error {
			_, err := db.Migrate(ctx, cfg.DatabaseURL)
			return err
		}); err != nil {
			return nil, err
		}
	}
	var st db.Status
	if err := waitForDatabase(ctx, logger, "read migration status", func() (err error) {
		st, err = db.ReadStatus(ctx, cfg.DatabaseURL)
		return err
	}); err != nil {
		return nil, err
	}
	if !st.UpToDate() {
		return nil, fmt.Errorf("database schema is not current (flow %d of %d, river %d of %d, dirty=%t): run `flow db migrate` first, or start with --migrate",
			st.FlowVersion, st.FlowLatest, st.RiverVersion, st.RiverLatest, st.FlowDirty)
	}
	// Half the pool is opened, and warmed, at start: a burst of submissions
	// right after a start or a failover needs that many connections at once.
	var pool *pgxpool.Pool
	if err := waitForDatabase(ctx, logger, "open pool", func() (err error) {
		pool, err = db.Open(ctx, cfg.DatabaseURL, db.PoolConfig{MaxConns: cfg.DBMaxConns, MinConns: cfg.DBMaxConns / 2, Warm: true})
		return err
	}); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			pool.Close()
		}
	}()
	// The listings' page checks have a small pool of their own, whose
	// connections run generic plans (inventory.ListingOptions.CheckPool).
	var checkPool *pgxpool.Pool
	if err := waitForDatabase(ctx, logger, "open pool", func() (err error) {
		checkPool, err = db.Open(ctx, cfg.DatabaseURL, db.PoolConfig{MaxConns: listingCheckConns, MinConns: listingCheckConns / 2, Warm: true, GenericPlans: true})
		return err
	}); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			checkPool.Close()
		}
	}()
	// The safety path (leak detection's cycles, the event-rule pipeline
	// that answers a leak) has a pool of its own, so reads and bulk
	// submissions holding the main pool never delay it (issue 49).
	var safetyPool *pgxpool.Pool
	if err := waitForDatabase(ctx, logger, "open pool", func() (err error) {
		safetyPool, err = db.Open(ctx, cfg.DatabaseURL, db.PoolConfig{MaxConns: safetyConns(cfg), MinConns: 2, Warm: true, ApplicationName: SafetyApplicationName})
		return err
	}); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			safetyPool.Close()
		}
	}()
	s := &server{cfg: cfg, logger: logger, pool: pool, checkPool: checkPool, safetyPool: safetyPool, health: edge.NewHealth(), keys: keys, tls: sec.Certs}
	if s.tel, err = newTelemetry(ctx, cfg, opts.tracer); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.tel.shutdown(context.WithoutCancel(ctx))
		}
	}()
	obs := &observer{m: s.tel.metrics, logger: logger, tracing: s.tel.tracer != nil}
	if s.tel.tracer != nil {
		obs.tracer = s.tel.tracer.Tracer("github.com/nicoflow/flow/engine")
	}
	if s.backends, err = newBackends(cfg, s.tel.backendInterceptors); err != nil {
		return nil, err
	}
	if cfg.Components.Uses(backend.ImplMock) {
		if s.mock, err = startMock(ctx, cfg, logger); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				s.closeMock(ctx)
			}
		}()
		s.backends.managers.WithMock(s.mock.client)
	}
	s.backends.logStatus(ctx, logger)
	inv := inventory.NewService()
	inv.SetMaxComponentsPerRack(cfg.Limits.Components)
	// The notifier is made below; drift found by a sync cycle is told
	// through it (set before the first cycle runs).
	var notifier *notify.Service
	s.syncer = reconcile.NewSyncer(reconcile.SyncConfig{Pool: pool, Inv: inv, Core: s.backends.nico, Logger: logger, Expected: cfg.SystemJobs.ExpectedInventorySync,
		FirmwareReadInterval: cfg.FirmwareReadInterval, Observe: syncObserver(s.tel.metrics),
		OnDrift: func(ctx context.Context, tx pgx.Tx, changes []reconcile.DriftChange) error {
			return driftEvents(notifier, inv)(ctx, tx, changes)
		}})
	var leak *eventrule.LeakDetector
	var isolations *isolation.Service
	// Each leak-detection cycle ends with the severe tier: racks whose open
	// leaks reach the threshold are isolated (docs/event-rules.md).
	leakCycle := func(ctx context.Context) error {
		err := leak.Run(ctx)
		_, ierr := isolations.Check(ctx)
		return errors.Join(err, ierr)
	}
	if s.system, err = newSystemJobs(cfg, s.backends, s.syncer, leakCycle, safetyPool, logger); err != nil {
		return nil, err
	}
	s.system.pool = pool
	var eventRules *eventrule.Service
	// Executions whose job died with a killed process run again within
	// seconds instead of after River's rescue window (docs/event-rules.md).
	if err := s.system.Add(SystemJob{Name: EventRuleRescueJob, Interval: eventRuleRescueInterval, Timeout: time.Minute, Pool: safetyPool, Run: func(ctx context.Context) error {
		_, err := eventRules.RescueStale(ctx, 500)
		return err
	}}); err != nil {
		return nil, err
	}
	rules, err := operations.NewService(rackLookup{inv: inv})
	if err != nil {
		return nil, err
	}
	if err := rules.SetIngestFirmwareUpgrade(cfg.IngestFirmwareUpgrade); err != nil {
		return nil, err
	}
	var tasks *operations.Tasks
	var runs *rollout.Service
	var approvals *approval.Service
	runWakes := &rollout.WakeWorker{}
	scheduleWorker := &schedule.Worker{}
	eventWorker := &eventrule.ExecutionWorker{}
	notifyWorker := &notify.Worker{}
	alertWorker := &notify.AlertWorker{}
	var emitTaskEnds engine.RunEndFunc
	s.engine, s.river, err = newEngine(pool, logger, engineWiring{
		onRunEnd: func(ctx context.Context, tx pgx.Tx, runs []engine.RunSummary) error {
			if err := tasks.RunsEnded(ctx, tx, runs); err != nil {
				return err
			}
			// A firmware task's end makes the installed versions due at the
			// next sync cycle (compliance shows the outcome within a cycle).
			if err := firmwareReadsDue(ctx, tx, inv, runs); err != nil {
				return err
			}
			// The tasks' events go out with the checkpoint that ended them.
			return emitTaskEnds(ctx, tx, runs)
		},
		register: func(e *engine.Engine) {
			operations.RegisterActions(e, operations.ActionDeps{
				Pool: pool, Backends: s.backends.managers, Inv: inv, Keys: keys, Logger: logger, PollInterval: cfg.PollInterval, Observer: obs,
			})
		},
		sweep:       func(ctx context.Context) error { return tasks.Sweep(ctx) },
		promoteRack: func(ctx context.Context, rackID uuid.UUID) error { return tasks.PromoteRack(ctx, rackID) },
		runWakes:    runWakes,
		runSweep: func(ctx context.Context) error {
			// Approval requests past their expiry withdraw their work too.
			_, err := approvals.ExpireDue(ctx)
			return errors.Join(runs.Sweep(ctx), err)
		},
		schedules:       scheduleWorker,
		eventExecutions: eventWorker,
		notify:          notifyWorker,
		alerts:          alertWorker,
		notifyWorkers:   cfg.Notify.Workers,
		engine:          cfg.engineConfig(),
		riverRetention:  cfg.Retention.RiverJobs,
		system:          s.system,
		observer:        obs,
		riverLogger:     s.tel.riverLogger(logger, cfg),
		middleware:      s.tel.riverMiddleware(),
	})
	if err != nil {
		return nil, err
	}
	// A stored rule must be one the engine will run (known actions, timeouts
	// and retry budgets that fit).
	rules.SetPlanCheck(s.engine.CheckPlan)
	tasks = operations.NewTasks(operations.TasksConfig{
		Pool: pool, Rules: rules, Inv: inv, Engine: s.engine, Backends: s.backends.managers, Keys: keys, Logger: logger,
		Expiry: scheduleQueueExpiry(s.river), Observer: obs, Tracer: s.tel.tracerFor("github.com/nicoflow/flow/operations"),
		VerifyGrace: cfg.VerifyGrace,
	})
	// Notifications (docs/notifications.md): the outbox is written in the
	// transactions of the changes it reports; River delivers.
	notifier = notify.NewService(notify.Config{
		Pool: pool, Keys: keys, Enqueue: notify.RiverEnqueuer(s.river), Site: cfg.Notify.Site, Delivery: cfg.Notify.Delivery, Logger: logger,
		Guard: notify.Guard{DevMode: cfg.DevMode, Allow: cfg.Notify.Allow}, Observer: notifyObserverFor(s.tel.metrics),
		Alertmanager: cfg.Notify.Alertmanager, AlertEnqueue: notify.RiverAlertEnqueuer(s.river),
	})
	notifyWorker.Service = notifier
	alertWorker.Service = notifier
	emitTaskEnds = taskEnds(notifier, inv)
	tasks.OnWaitingEnd(waitingTaskEnds(notifier, inv))
	initNotifyMetrics(s.tel.metrics, notifier)
	s.notifier = notifier
	s.tel.metrics.Register(newStateCollector(pool, tasks, []string{engine.QueueName, engine.UrgentQueue, schedule.Queue, eventrule.Queue, notify.Queue}))
	watchRiverJobs(context.WithoutCancel(ctx), s.river, s.tel.metrics)
	// Two-person approval needs told-apart callers: on a cleartext API
	// every caller is one identity, who could never approve.
	threshold := cfg.ApprovalThreshold
	if sec.Certs == nil && !threshold.Off() {
		logger.InfoContext(ctx, "two-person approval is off: the API is cleartext, so every caller is one identity", "approval_threshold", threshold.String())
		threshold = approval.Threshold{}
	}
	approvals = approval.NewService(approval.Config{Pool: pool, Threshold: threshold, Expiry: cfg.ApprovalExpiry, Logger: logger,
		OnChange: approvalChanges(notifier),
		SiteRacks: func(ctx context.Context, dbtx db.DBTX) (int, error) {
			_, n, err := inv.ListRacks(ctx, dbtx, inventory.RackQuery{Page: inventory.Page{Limit: 1}})
			return int(n), err
		}})
	runs = rollout.NewService(rollout.Config{
		Pool: pool, Tasks: tasks, Inv: inv, Keys: keys, Wake: rollout.RiverWaker(s.river), Logger: logger, MaxCandidates: cfg.RunMaxCandidates,
		Approver: approvals,
	})
	approvals.Register(rollout.ApprovalKindRun, runs)
	runs.OnRunChange(runChanges(notifier))
	// Bulk submissions over the threshold wait for approval too; their
	// tasks are the request's subjects.
	tasks.SetApprover(approvals)
	approvals.Register(operations.ApprovalKindSubmission, tasks)
	runWakes.Service = runs
	s.tel.metrics.Register(newRunCollector(runs))
	// A task's end is also its operation run's event: the run advances in
	// the same transaction.
	tasks.OnTaskEnd(runs.TasksEnded)
	// Maintenance windows and freezes hold disruptive tasks and the
	// claims of operation runs (docs/change-safety.md).
	windows := window.NewService(window.Config{Inv: inv, Operations: cfg.WindowOperations})
	// The leak tiers (docs/event-rules.md "Leak tiers"): isolated racks
	// are refused power-on, and a coolant loop's open leak holds
	// disruptive work on its racks like a closed window.
	// The severe tier is part of each leak-detection cycle: the safety
	// path's pool too.
	isolations = isolation.NewService(isolation.Config{
		Pool: safetyPool, Inv: inv, Tasks: tasks, Placement: rackPlacement(inv), LoopRacks: loopRacks(inv),
		OnRequest: isolationRequests(notifier), Threshold: cfg.LeakSevereThreshold, Resend: cfg.LeakIsolationResend,
		NoCooling: !cfg.LeakCoolingHold, Logger: logger,
	})
	tasks.SetEnergiseGuard(isolations)
	gates := startGates{windows: windows, cooling: isolations}
	tasks.SetStartGate(gates)
	runs.SetWindowGate(gates)
	// A restart sends every unacknowledged isolation request again.
	if _, err := isolations.DueNow(ctx); err != nil {
		return nil, fmt.Errorf("isolation requests: %w", err)
	}
	if err := s.system.Add(SystemJob{Name: IsolationResendJob, Interval: isolationResendInterval, Timeout: time.Minute, Run: func(ctx context.Context) error {
		_, err := isolations.Resend(ctx, 100)
		return err
	}}); err != nil {
		return nil, err
	}
	// Power transitions wait within their feed's power budget (issue 45).
	budgets := powerbudget.New(pool, s.engine, cfg.PowerTrayKW, cfg.PowerShelfKW)
	tasks.SetTransitionHolds(budgets.Holds)
	initPowerMetrics(s.tel.metrics, budgets)
	schedules := schedule.NewService(schedule.Config{
		Pool: pool, Tasks: tasks, Inv: inv, Keys: keys, Logger: logger, Fire: schedule.RiverFireScheduler(s.river),
		Observe: s.tel.metrics.ScheduleFired, OnRefused: scheduleRefusals(notifier, inv),
	})
	scheduleWorker.Service = schedules
	eventRules = eventrule.NewService(eventrule.Config{
		Pool: safetyPool, Inv: inv, Tasks: tasks, Enqueue: eventrule.RiverExecutionEnqueuer(s.river), Logger: logger,
		Alert: alertSender(notifier, inv),
	})
	eventWorker.Rules = eventRules
	inv.SetLeakHandling(eventRules.LeakHandling)
	leak = eventrule.NewLeakDetector(eventrule.LeakDetectorConfig{
		Pool: safetyPool, Inv: inv, Rules: eventRules, Tasks: tasks, Source: s.backends.nico,
		EventRules: cfg.SystemJobs.LeakEventRules, Logger: logger,
		PowerOff: unknownLeakPowerOff(s.backends.nico), OnChange: leakChanges(notifier, inv),
		OnUnknown: func(kind, outcome string) {
			if m := s.tel.metrics; m != nil {
				m.Leak.UnknownDevices.WithLabelValues(kind, outcome).Inc()
			}
		},
	})
	inv.SetTaskStats(tasks.TaskStats)
	// Retention: the leader prunes finished history past its settings
	// (docs/operations.md#sizing-and-retention).
	pr := &pruner{cfg: cfg.Retention, pool: pool, tasks: tasks, runs: runs, events: eventRules, notify: notifier,
		pins:    []func(context.Context) ([]uuid.UUID, error){schedules.PinnedTasks, runs.PinnedTasks, eventRules.PinnedTasks},
		metrics: s.tel.metrics, logger: logger, now: time.Now}
	if err := s.system.Add(SystemJob{Name: PruneJob, Interval: cfg.Retention.Interval, Timeout: 30 * time.Minute, Run: pr.Run}); err != nil {
		return nil, err
	}
	// Statistics: plans for tables a burst grew, without waiting for
	// autovacuum (db.AnalyzeResized, docs/operations.md).
	if err := s.system.Add(SystemJob{Name: AnalyzeJob, Interval: analyzeInterval, Timeout: time.Minute, Run: func(ctx context.Context) error {
		done, err := db.AnalyzeResized(ctx, pool, db.AnalyzeMinRows)
		for _, t := range done {
			logger.InfoContext(ctx, "analyzed a table whose size moved far from its statistics", "table", t.Name, "rows_before", t.Rows, "rows_now", t.Now)
		}
		return err
	}}); err != nil {
		return nil, err
	}
	s.system.observe = s.tel.metrics.SystemJobEnded
	s.system.started = s.tel.metrics.SystemJobStarted
	s.system.onLead = s.tel.metrics.SetSystemJobLeader
	s.tel.metrics.Init(knownLabels(s.engine, s.system))
	logKeyUsage(ctx, logger, keys, tasks)
	// River UI: behind the console's authentication on the API port
	// (FLOW_RIVERUI_ENABLED, on by default; viewers read, admins change,
	// audited), and in dev mode also on the admin listener (loopback, no
	// authentication: the dev server's API is open anyway).
	var riverUI, jobsUI http.Handler
	if cfg.RiverUIEnabled {
		if jobsUI, err = newRiverUI(context.WithoutCancel(ctx), s.river, s.tel.riverLogger(logger, cfg), console.JobsPrefix); err != nil {
			return nil, err
		}
	}
	if cfg.DevMode {
		if riverUI, err = newRiverUI(context.WithoutCancel(ctx), s.river, s.tel.riverLogger(logger, cfg), "/riverui"); err != nil {
			return nil, err
		}
	}
	svc := &flowService{
		versionHandler:    &versionHandler{build: ReadBuild()},
		inventoryHandler:  inventory.NewHandler(inv, pool),
		operationsHandler: operations.NewHandler(pool, rules),
		taskHandler:       operations.NewTaskHandler(pool, tasks),
		rolloutHandler:    rollout.NewHandler(pool, runs),
		reconcileHandler:  reconcile.NewHandler(reconcile.NewService(inv, s.backends.managers).WithDrift(s.syncer), pool),
		scheduleHandler:   schedule.NewHandler(pool, schedules),
		eventRuleHandler:  eventrule.NewHandler(pool, eventRules),
	}
	svc.taskHandler.LimitSubmits(limitsOrDefault(cfg.Limits).Submits)
	svc.rolloutHandler.SetOverlap(cfg.RunOverlapAllowed)
	svc.inventoryHandler.SetListings(inventory.ListingOptions{
		Builds: limitsOrDefault(cfg.Limits).ListingBuilds, CacheBytes: limitsOrDefault(cfg.Limits).ListingCacheBytes,
		CheckPool: checkPool,
	})
	s.tel.metrics.Register(newListingCollector(svc.inventoryHandler))
	baselines := baseline.NewService(baseline.Config{Inventory: inv, Operations: rules, Core: s.backends.nico, StaleAfter: cfg.FirmwareUnreportedAfter})
	s.tel.metrics.Register(newComplianceCollector(pool, baselines))
	// Ingestion that upgrades firmware lands new racks on the active
	// baseline (docs/firmware.md).
	tasks.SetIngestFirmwareTarget(baselines.RackTarget)
	admin := &adminService{syncHandler: reconcile.NewSyncHandler(s.syncer), leakAdminHandler: eventrule.NewLeakAdminHandler(pool, inv, leak),
		inventoryAdminHandler: inventory.NewAdminHandler(inv, pool), baselineHandler: baseline.NewHandler(pool, baselines, runs),
		runAdminHandler: rollout.NewAdminHandler(pool, runs), previewHandler: operations.NewPreviewHandler(svc.taskHandler),
		approvalHandler: approval.NewHandler(pool, approvals),
		webhookHandler:  notify.NewHandler(pool, notifier, rackResolver(inv))}
	admin.windowHandler = window.NewHandler(pool, windows, tasks, runs)
	admin.isolationHandler = isolation.NewHandler(pool, isolations)
	admin.powerBudgetHandler = powerbudget.NewHandler(budgets)
	admin.leakAdminHandler.SetOnOverride(leakOverrides(notifier, inv))
	mux := newMux(logger, svc, muxOptions{devMode: cfg.DevMode, health: s.health, policy: sec.Policy, admin: admin, interceptors: s.tel.rpcInterceptors(), limits: cfg.Limits})
	// The console (/ui/) calls the API's handler in process, as its user.
	if s.console, err = console.New(console.Options{
		API: mux, Pool: pool, Policy: sec.Policy, AuthProxy: cfg.ConsoleAuthProxy, Logger: logger, Open: sec.Certs == nil, Jobs: jobsUI,
		NoCoolingHold: !cfg.LeakCoolingHold,
	}); err != nil {
		return nil, err
	}
	mux = withConsole(mux, s.console)
	var tlsConfig *tls.Config
	if s.tls != nil {
		tlsConfig = s.tls.TLSConfig()
	}
	// Cleartext listeners answer only their own Host names (DNS
	// rebinding); the TLS API authenticates its clients by certificate.
	hosts := edge.NewHosts([]string{cfg.ListenAddr, cfg.AdminAddr}, cfg.AllowedHosts)
	if tlsConfig == nil {
		mux = hosts.Wrap(mux)
	}
	s.http = edge.NewHTTPServer(cfg.ListenAddr, mux, tlsConfig, logger)
	// The console's live streams end when the server shuts down, so that
	// it need not wait for them.
	s.http.RegisterOnShutdown(s.console.Close)
	limitsOrDefault(cfg.Limits).ApplyTimeouts(s.http)
	if cfg.AdminAddr != "off" {
		if s.adminLn, err = net.Listen("tcp", cfg.AdminAddr); err != nil {
			return nil, fmt.Errorf("admin listener (FLOW_ADMIN_LISTEN_ADDR) on %s: %w", cfg.AdminAddr, err)
		}
		s.admin = edge.NewAdminServer(hosts.Wrap(edge.NewAdminMux(edge.AdminOptions{RiverUI: riverUI, Metrics: s.tel.metricsHandler(), Ready: s.ready, PProf: cfg.PProf})))
		if !edge.IsLoopback(cfg.AdminAddr) {
			logger.WarnContext(ctx, "the admin listener is not on loopback: its endpoints (metrics, River UI, pprof) have no authentication, keep it on a private network", "admin_addr", cfg.AdminAddr)
		}
	}
	if cfg.MetricsAddr != "" {
		if s.metricsLn, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
			if s.adminLn != nil {
				s.adminLn.Close()
			}
			return nil, fmt.Errorf("metrics listener (--metrics-port) on %s: %w", cfg.MetricsAddr, err)
		}
		s.metrics = edge.NewAdminServer(edge.NewAdminMux(edge.AdminOptions{Metrics: s.tel.metricsHandler(), Ready: s.ready}))
	}
	s.ln, err = net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		s.closeSideListeners()
		return nil, listenError(cfg.ListenAddr, err)
	}
	return s, nil
}

// listenError explains a failed listen on the API address; a port in use
// says how to choose another, for the server and for the CLI.
func listenError(addr string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("listen on %s: the port is in use (another flow dev or service holds it): "+
			"pick another with --listen 127.0.0.1:PORT (make run ARGS='--listen 127.0.0.1:PORT'; flow serve: FLOW_LISTEN_ADDR), "+
			"and point the CLI at it with FLOW_SERVER=127.0.0.1:PORT or --server: %w", addr, err)
	}
	return fmt.Errorf("listen on %s: %w", addr, err)
}

// closeSideListeners closes the admin and metrics listeners and stops the
// console's change feed (a start that failed).
func (s *server) closeSideListeners() {
	if s.console != nil {
		s.console.Close()
	}
	if s.adminLn != nil {
		s.adminLn.Close()
	}
	if s.metricsLn != nil {
		s.metricsLn.Close()
	}
}

// MetricsAddr returns the address of the --metrics-port listener, or "".
func (s *server) MetricsAddr() string {
	if s.metricsLn == nil {
		return ""
	}
	return s.metricsLn.Addr().String()
}

// ready reports why the server cannot work yet (nil: ready): the
// database must answer, its schema be current and River be started.
func (s *server) ready(ctx context.Context) error {
	// Ready means writes work: a member that has become a standby (a
	// failover in progress, a database set read-only) is not ready.
	var readOnly string
	if err := s.pool.QueryRow(ctx, `SHOW transaction_read_only`).Scan(&readOnly); err != nil {
		if why := db.UnavailableReason(err); why != "" {
			return errors.New("database unavailable: " + why)
		}
		return fmt.Errorf("database check: %w", err)
	}
	if readOnly == "on" {
		return errors.New("database unavailable: it is read-only (a standby: a failover is in progress)")
	}
	st, err := db.ReadStatus(ctx, s.cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("read migration status: %w", err)
	}
	if !st.UpToDate() {
		return fmt.Errorf("database schema is not current (flow %d of %d, river %d of %d)", st.FlowVersion, st.FlowLatest, st.RiverVersion, st.RiverLatest)
	}
	if !s.riverStarted.Load() {
		return errors.New("river client not started")
	}
	return nil
}

// AdminAddr returns the address of the admin listener, or "" when it is off.
func (s *server) AdminAddr() string {
	if s.adminLn == nil {
		return ""
	}
	return s.adminLn.Addr().String()
}

// Addr returns the address the server listens on.
func (s *server) Addr() net.Addr { return s.ln.Addr() }

// run starts the River client and serves until ctx is cancelled, then shuts
// down gracefully: it stops accepting, lets in-flight calls finish (up to
// ShutdownTimeout), stops River (running jobs get up to ShutdownTimeout, then
// are cancelled) and closes the pool.
func (s *server) run(ctx context.Context) error {
	// The engine's lease first: River's workers claim steps under it. Like
	// River, it starts even if ctx is already done (then shuts down at once).
	leaseCtx, cancelLease := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	err := s.engine.StartLease(leaseCtx)
	cancelLease()
	if err != nil {
		s.ln.Close()
		s.closeSideListeners()
		s.closeMock(ctx)
		s.closePools()
		return err
	}
	// River stops when run says so, not when ctx ends.
	if err := s.river.Start(context.WithoutCancel(ctx)); err != nil {
		s.ln.Close()
		s.closeSideListeners()
		s.closeMock(ctx)
		s.closePools()
		s.tel.shutdown(context.WithoutCancel(ctx))
		return fmt.Errorf("start river: %w", err)
	}
	s.riverStarted.Store(true)
	stopSystem := s.system.start(ctx, s.logger)
	// Webhook lanes get their jobs while River runs; stopped before it.
	notifyCtx, stopNotify := context.WithCancel(context.WithoutCancel(ctx))
	notifyDone := make(chan struct{})
	go func() {
		defer close(notifyDone)
		if s.notifier != nil {
			s.notifier.Run(notifyCtx)
		}
	}()
	errc := make(chan error, 3)
	go func() {
		if s.tls != nil {
			errc <- s.http.ServeTLS(s.ln, "", "")
			return
		}
		errc <- s.http.Serve(s.ln)
	}()
	if s.admin != nil {
		go func() {
			if err := s.admin.Serve(s.adminLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("admin listener: %w", err)
			}
		}()
	}
	if s.metrics != nil {
		go func() {
			if err := s.metrics.Serve(s.metricsLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("metrics listener: %w", err)
			}
		}()
	}
	s.logger.InfoContext(ctx, "serving", "metrics_addr", s.MetricsAddr(), "addr", s.ln.Addr().String(), "tls", s.tls != nil, "admin_addr", s.AdminAddr(), "dev_mode", s.cfg.DevMode)

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	s.logger.InfoContext(ctx, "shutting down")
	s.health.SetServing(false)
	// The engine stops fetching at once and hands back what cannot finish
	// in the budget, while HTTP drains its in-flight calls.
	riverDone := make(chan struct{})
	go func() {
		defer close(riverDone)
		// System cycles and the webhook dispatcher end first: they insert
		// jobs.
		stopSystem()
		stopNotify()
		<-notifyDone
		stopRiver(ctx, s.engine, s.river, s.cfg.ShutdownTimeout, s.logger)
	}()
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	if err := s.http.Shutdown(shutdownCtx); err != nil {
		s.logger.WarnContext(ctx, "http shutdown", "error", err.Error())
	}
	if s.admin != nil {
		_ = s.admin.Close() // profiles and River UI polls need no draining
	}
	if s.metrics != nil {
		_ = s.metrics.Close()
	}
	<-riverDone
	s.closeMock(shutdownCtx)
	s.riverStarted.Store(false)
	s.closePools()
	s.tel.shutdown(shutdownCtx)
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	s.logger.InfoContext(ctx, "stopped")
	return nil
}

// rackLookup answers the rules service's "does this rack exist" from
// inventory: soft-deleted racks count as gone.
type rackLookup struct{ inv *inventory.Service }

func (l rackLookup) RackExists(ctx context.Context, dbtx db.DBTX, id uuid.UUID) (bool, error) {
	_, err := l.inv.Rack(ctx, dbtx, id, false)
	if errors.Is(err, inventory.ErrRackNotFound) {
		return false, nil
	}
	return err == nil, err
}

// logKeyUsage logs, for each data-encryption key this server holds, how
// many unfinished tasks carry credentials sealed with it (a retired key may
// go once that is 0), and warns about unfinished tasks sealed with a key it
// does not hold: they will fail at their firmware step.
func logKeyUsage(ctx context.Context, logger *slog.Logger, keys *firmware.Keyring, tasks *operations.Tasks) {
	usage, err := tasks.KeyUsage(ctx)
	if err != nil {
		logger.WarnContext(ctx, "cannot count the tasks that need each data encryption key", "error", err.Error())
		return
	}
	if keys != nil {
		for _, id := range keys.KeyIDs() {
			logger.InfoContext(ctx, "data encryption key usage", "key_id", id, "current", id == keys.CurrentKeyID(), "unfinished_tasks", usage[id])
			delete(usage, id)
		}
	}
	for id, n := range usage {
		logger.WarnContext(ctx, "unfinished tasks carry credentials sealed with a key this server does not have; they will fail at their firmware step",
			"key_id", id, "unfinished_tasks", n, "setting", "FLOW_DATA_DECRYPTION_KEY_PATHS")
	}
}

// SafetyApplicationName is the application_name of the safety path's
// connections (pg_stat_activity, PostgreSQL's log).
const SafetyApplicationName = "flow-safety"

// safetyConns is the size of the safety path's pool (FLOW_SAFETY_DB_CONNS;
// a Config not read by LoadConfig: its default).
func safetyConns(cfg Config) int32 {
	if cfg.SafetyDBConns < 2 {
		return defaultSafetyConns
	}
	return cfg.SafetyDBConns
}

// defaultSafetyConns is FLOW_SAFETY_DB_CONNS' default: a leak cycle holds
// its lock's connection and ingests up to 8 new leaks at once, while up to
// 10 event-rule executions (eventRuleWorkers) pre-empt and submit
// responses. With 4, a burst of leaks on a loaded 500-rack site left the
// cycle's ingests waiting seconds for a connection behind the executions
// (the check's interval reached 8.9 s; 16: 3.4 s at the same load,
// docs/bench.md "Where a leak's response time goes"). The pool opens them
// only when used.
const defaultSafetyConns = 16

// listingCheckConns is the size of the listings' check pool: a check runs
// in a tenth of a millisecond and is shared by the calls of its page, so
// a few connections serve thousands of calls a second.
const listingCheckConns = 4

// closePools closes the server's connection pools.
func (s *server) closePools() {
	s.checkPool.Close()
	s.safetyPool.Close()
	s.pool.Close()
}
