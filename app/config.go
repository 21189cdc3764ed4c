package app

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nicoflow/flow/backend"
	"github.com/nicoflow/flow/cli"
	"github.com/nicoflow/flow/console"
	"github.com/nicoflow/flow/edge"
	"github.com/nicoflow/flow/engine"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/approval"
	"github.com/nicoflow/flow/operations/window"
	"github.com/nicoflow/flow/telemetry"
)

// Config is every setting of a Flow server, read from the environment by
// LoadConfig. Command-line flags override individual fields.
type Config struct {
	ListenAddr      string        // FLOW_LISTEN_ADDR
	DatabaseURL     string        // DATABASE_URL, else built from DB_*
	DBMaxConns      int32         // FLOW_DB_MAX_CONNS
	SafetyDBConns   int32         // FLOW_SAFETY_DB_CONNS: the safety path's own pool
	DevMode         bool          // FLOW_DEV_MODE
	LogLevel        slog.Level    // FLOW_LOG_LEVEL
	LogFormat       string        // FLOW_LOG_FORMAT: text or json
	ShutdownTimeout time.Duration // FLOW_SHUTDOWN_TIMEOUT
	KeyPath         string        // FLOW_DATA_ENCRYPTION_KEY_PATH
	RetiredKeyPaths []string      // FLOW_DATA_DECRYPTION_KEY_PATHS

	// API security (docs/security.md): the server's certificate sources in
	// upstream's order (TLS, then CertDir, then the SPIFFE mount), the
	// explicit cleartext opt-out, the authorization policy and the admin
	// listener for River UI and pprof.
	TLS           TLSFiles // FLOW_TLS_CA, FLOW_TLS_CERT, FLOW_TLS_KEY
	CertDir       string   // CERTDIR
	AllowInsecure bool     // ALLOW_INSECURE_GRPC
	AuthzPolicy   string   // FLOW_AUTHZ_POLICY: YAML file path
	AdminAddr     string   // FLOW_ADMIN_LISTEN_ADDR (alias FLOW_ADMIN_LISTEN); "off" disables the admin listener
	adminAddrSet  bool     // either variable was set (flow dev picks a free port otherwise)
	PProf         bool     // FLOW_PPROF: serve /debug/pprof/ on the admin listener
	// AllowedHosts are Host names the admin listener and a cleartext API
	// answer besides loopback, IP literals and their listen addresses
	// (edge.Hosts, against DNS rebinding).
	AllowedHosts []string // FLOW_ALLOWED_HOSTS
	// ConsoleAuthProxy is the authenticating proxy the console trusts
	// (docs/console.md).
	ConsoleAuthProxy console.AuthProxy // FLOW_CONSOLE_AUTH_PROXY_HEADER, FLOW_CONSOLE_AUTH_PROXY_ADDRESSES

	// Upstream's deployment surface (upstream.go, docs/operations.md):
	// FLOW_ENV (development when unset; EnvSet says it was set, and then
	// serve migrates at start as upstream's does), the metrics listener of
	// --metrics-port, upstream's authorization mode and allowlist, and the
	// upstream variables that were set but Flow does not need.
	Env               string   // FLOW_ENV
	EnvSet            bool     // FLOW_ENV was set
	MetricsAddr       string   // --metrics-port; "": none
	AuthzMode         string   // FLOW_AUTHORIZATION_MODE: audit or enforce
	AllowedIdentities []string // FLOW_AUTHORIZATION_ALLOWED_SERVICE_IDENTITIES_FILE or --allowed-service-identity
	allowlistSource   string   // where AllowedIdentities came from
	Unneeded          []string // TEMPORAL_* and the like that were set

	// Observability (docs/observability.md).
	LogLevelSet  bool // FLOW_LOG_LEVEL was set (dev mode defaults to debug otherwise)
	logFormatSet bool // FLOW_LOG_FORMAT was set (dev mode defaults to text otherwise)
	Metrics      bool // FLOW_METRICS: record Prometheus metrics (served at /metrics)
	Tracing      bool // OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set
	// otelEnv reads the OTEL_* variables the OTLP exporter is set up from.
	otelEnv func(string) string

	// Backends: the NICo Core and PSM endpoints (empty: not configured,
	// operations needing them fail with FailedPrecondition), their TLS files
	// and the component-manager configuration.
	NICoURL         string         // NICO_CORE_API_URL
	PSMURL          string         // PSM_API_URL
	NICoTLS         TLSFiles       // FLOW_NICO_TLS_CA, FLOW_NICO_TLS_CERT, FLOW_NICO_TLS_KEY
	PSMTLS          TLSFiles       // FLOW_PSM_TLS_CA, FLOW_PSM_TLS_CERT, FLOW_PSM_TLS_KEY
	ComponentConfig string         // COMPONENT_MANAGER_CONFIG: YAML file path
	Components      backend.Config // parsed from ComponentConfig, or the default
	RiverUIEnabled  bool           // FLOW_RIVERUI_ENABLED: River UI at /ui/jobs/ behind the console's authentication
	RescueAfter     time.Duration  // FLOW_ENGINE_RESCUE_AFTER
	LeaseHeartbeat  time.Duration  // FLOW_ENGINE_LEASE_HEARTBEAT
	LeaseExpiry     time.Duration  // FLOW_ENGINE_LEASE_EXPIRY
	MaxWorkers      int            // FLOW_ENGINE_MAX_WORKERS
	UrgentWorkers   int            // FLOW_ENGINE_URGENT_WORKERS
	FetchCooldown   time.Duration  // FLOW_ENGINE_FETCH_COOLDOWN
	// PollInterval, when positive, replaces the poll interval of the long
	// hardware waits (FirmwareControl, WaitBringUp, WaitDecommissioned).
	PollInterval time.Duration // FLOW_FIRMWARE_POLL_INTERVAL
	// VerifyGrace is how long the read-back after a firmware update
	// re-reads a device not yet at its target (0: one read).
	VerifyGrace time.Duration // FLOW_FIRMWARE_VERIFY_GRACE
	// PowerTrayKW and PowerShelfKW are the draw of a power transition per
	// compute tray and per power shelf, for feeds' kW budgets.
	PowerTrayKW  float64 // FLOW_POWER_TRAY_KW
	PowerShelfKW float64 // FLOW_POWER_SHELF_KW
	// RunMaxCandidates caps an operation run's candidate scope.
	RunMaxCandidates int // FLOW_OPERATION_RUN_MAX_CANDIDATES
	// RunOverlapAllowed lets v1 CreateOperationRun overlap unfinished runs
	// silently, as upstream does (docs/change-safety.md).
	RunOverlapAllowed bool // FLOW_RUN_OVERLAP
	// ApprovalThreshold is when a run needs a second person's approval;
	// ApprovalExpiry how long a request waits (docs/change-safety.md).
	ApprovalThreshold approval.Threshold // FLOW_APPROVAL_THRESHOLD
	ApprovalExpiry    time.Duration      // FLOW_APPROVAL_EXPIRY
	// IngestFirmwareUpgrade makes ingest tasks upgrade the compute trays'
	// and NVLink switches' firmware after ingestion.
	IngestFirmwareUpgrade bool // FLOW_INGEST_FIRMWARE_UPGRADE
	// FirmwareUnreportedAfter: a device whose installed versions Core has
	// not reported for longer is "unknown" in compliance reports.
	FirmwareUnreportedAfter time.Duration // FLOW_FIRMWARE_UNREPORTED_AFTER
	// FirmwareReadInterval is how often scheduled inventory-sync cycles
	// read each type's installed versions (0: every cycle).
	FirmwareReadInterval time.Duration // FLOW_FIRMWARE_READ_INTERVAL
	// firmwareReadIntervalSet: FLOW_FIRMWARE_READ_INTERVAL was set (flow
	// dev reads the versions every cycle otherwise).
	firmwareReadIntervalSet bool
	// SystemJobs are the leader-run system jobs' settings, from the config
	// file (FLOW_CONFIG_FILE) and FLOW_EXPECTED_INVENTORY_SYNC_ENABLED.
	SystemJobs SystemJobsConfig
	// Retention is how long finished history is kept (app/prune.go,
	// docs/operations.md#sizing-and-retention): FLOW_TASK_RETENTION,
	// FLOW_OPERATION_RUN_RETENTION, FLOW_EVENT_RETENTION,
	// FLOW_RIVER_JOB_RETENTION, FLOW_PRUNE_INTERVAL,
	// FLOW_NOTIFY_DELIVERED_RETENTION, FLOW_NOTIFY_DEAD_RETENTION.
	Retention RetentionConfig
	// WindowOperations are the operation codes and types maintenance
	// windows and freezes hold (docs/change-safety.md).
	WindowOperations []string // FLOW_WINDOW_OPERATIONS
	// Leak tiers (docs/event-rules.md "Leak tiers"): the severe
	// threshold, how often an unacknowledged isolation request is sent
	// again, and whether a coolant loop's open leak holds disruptive work
	// on its racks.
	LeakSevereThreshold int           // FLOW_LEAK_SEVERE_THRESHOLD
	LeakIsolationResend time.Duration // FLOW_LEAK_ISOLATION_RESEND
	LeakCoolingHold     bool          // FLOW_LEAK_COOLING_HOLD
	// Notify is the webhook delivery's settings (docs/notifications.md):
	// FLOW_NOTIFY_*, FLOW_SITE_NAME.
	Notify NotifyConfig
	// Limits bound what one request may cost (edge.Limits, read in limits.go): FLOW_MAX_*,
	// FLOW_READ_HEADER_TIMEOUT, FLOW_READ_TIMEOUT, FLOW_IDLE_TIMEOUT,
	// FLOW_STRICT_JSON.
	Limits edge.Limits
}

// ConfigVar documents one environment variable; ConfigVars is the table the
// README and `flow config` print.
type ConfigVar struct {
	Name, Default, Meaning string
}

// ConfigVars lists every environment variable Flow reads.
var ConfigVars = []ConfigVar{
	{"FLOW_LISTEN_ADDR", ":50051", "address the API listens on: gRPC, gRPC-Web and Connect on one port, over mutual TLS (HTTP/2 and HTTP/1.1), or cleartext (HTTP/2 and HTTP/1.1) with ALLOW_INSECURE_GRPC=true and under flow dev"},
	{"DATABASE_URL", "", "PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...); several hosts with target_session_attrs=read-write for a highly available cluster (postgres://user:pass@pg-a:5432,pg-b:5432/db?target_session_attrs=read-write); overrides the DB_* set"},
	{"DB_HOST", "localhost", "PostgreSQL host (upstream Flow's name); a comma-separated list for a highly available cluster, connecting to the one that takes writes"},
	{"DB_PORT", "5432", "PostgreSQL port"},
	{"DB_USER", "postgres", "PostgreSQL user"},
	{"DB_PASSWORD", "", "PostgreSQL password (logged masked)"},
	{"DB_NAME", "flow", "PostgreSQL database"},
	{"DB_CERT_PATH", "", "TLS to PostgreSQL (upstream's name), sslmode=verify-full: the CA file (upstream's meaning; the chart uses /var/run/secrets/spiffe.io/ca.crt), with tls.crt and tls.key beside it used as client certificate when present, or a folder holding ca.crt, tls.crt and tls.key; a missing file refuses startup"},
	{"FLOW_ENV", "development", "upstream's deployment environment: development, staging or production; staging and production require TLS certificates (ALLOW_INSECURE_GRPC is refused) and refuse --dev-mode; when set, flow serve applies migrations at start as upstream's does"},
	{"FLOW_DB_MAX_CONNS", "40", "size of the connection pool; half of it is opened, and warmed, at start (the listings' page checks have 4 connections more, of their own, and the safety path FLOW_SAFETY_DB_CONNS)"},
	{"FLOW_SAFETY_DB_CONNS", "16", "connections of the safety path's own pool (opened when used), on top of FLOW_DB_MAX_CONNS: leak detection's cycles (with the severe tier's rack isolations) and the event-rule pipeline (ingest, executions that submit leak responses) use only it, so reads and bulk submissions that hold the main pool cannot delay them (docs/operations.md#the-safety-path)"},
	{"FLOW_DEV_MODE", "false", "same as --dev-mode: server reflection and debug logs"},
	{"FLOW_LOG_LEVEL", "info", "debug, info, warn or error; flow dev defaults to debug for Flow's own lines; River's own lines are WARN and above unless this is debug"},
	{"FLOW_LOG_FORMAT", "json", "json or text (flow dev defaults to text)"},
	{"FLOW_METRICS", "true", "record Prometheus metrics, served at /metrics on the admin listener (docs/observability.md)"},
	{"FLOW_PPROF", "false", "serve Go's profiler at /debug/pprof/ on the admin listener"},
	{"OTEL_EXPORTER_OTLP_ENDPOINT", "", "OpenTelemetry collector to export traces to over OTLP (http/protobuf, e.g. http://collector:4318; grpc with OTEL_EXPORTER_OTLP_PROTOCOL=grpc; the other standard OTEL_EXPORTER_OTLP_* and OTEL_TRACES_EXPORTER=none apply); unset (and OTEL_EXPORTER_OTLP_TRACES_ENDPOINT unset): tracing off"},
	{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "", "the same, for traces only"},
	{"FLOW_SHUTDOWN_TIMEOUT", "30s", "how long a graceful shutdown waits for in-flight calls and jobs"},
	{"FLOW_DATA_ENCRYPTION_KEY_PATH", "", "file holding the current data-encryption key (base64 of 32 random bytes) that seals firmware credentials; unset: requests with authentication_data are refused"},
	{"FLOW_DATA_DECRYPTION_KEY_PATHS", "", "comma-separated files of retired keys, still used to open credentials sealed before a key rotation"},
	{"FLOW_TLS_CA", "", "CA bundle (PEM) that client certificates must chain to (server), or that verifies the server (CLI); set with FLOW_TLS_CERT and FLOW_TLS_KEY"},
	{"FLOW_TLS_CERT", "", "the API's server certificate (PEM), or the CLI's client certificate; reloaded when the file changes"},
	{"FLOW_TLS_KEY", "", "private key (PEM) of FLOW_TLS_CERT"},
	{"CERTDIR", "", "folder with ca.crt, tls.crt and tls.key, used when FLOW_TLS_* is unset (upstream's name); unset: the SPIFFE mount " + edge.SPIFFECertDir},
	{"ALLOW_INSECURE_GRPC", "false", "true lets flow serve start without certificates: cleartext, no authentication, every caller is admin (upstream's name; local development only)"},
	{"FLOW_AUTHORIZATION_MODE", "audit", "upstream's authorization mode: audit (callers missing from the allowlist are let through as admin, a warning logged per call) or enforce (they are refused)"},
	{"FLOW_AUTHORIZATION_ALLOWED_SERVICE_IDENTITIES_FILE", "", "upstream's allowlist: a file of SPIFFE IDs, one per line (blank lines skipped, no comments); a listed identity is admin; an unreadable file or a bad line refuses startup naming the file and line; not with FLOW_AUTHZ_POLICY or --allowed-service-identity"},
	{"FLOW_AUTHZ_POLICY", "", "YAML file mapping client identities (SPIFFE ID or CN, exact or spiffe://domain/ns/* patterns) to roles viewer, operator, admin; unset: every client with a valid certificate is admin"},
	{"FLOW_ADMIN_LISTEN_ADDR", "127.0.0.1:50060", "admin listener for /metrics, /healthz, /readyz, River UI (/riverui/, dev mode only) and pprof (/debug/pprof/, with FLOW_PPROF), never on the API port; keep it on loopback or a private network; off disables it; flow dev, when this and FLOW_ADMIN_LISTEN are unset, takes a free loopback port and prints it in its banner"},
	{"FLOW_ALLOWED_HOSTS", "", "comma-separated Host names the admin listener and a cleartext API (no TLS) answer besides localhost, IP literals, the machine's host name and the listen addresses' hosts (a guard against DNS rebinding); other Hosts get 421; * turns the check off; the TLS API does not check Host"},
	{"FLOW_CONSOLE_AUTH_PROXY_HEADER", "", "the console (/ui/ on the API port) behind an authenticating reverse proxy: the request header that names the user (X-Forwarded-User, say), trusted only from FLOW_CONSOLE_AUTH_PROXY_ADDRESSES; the user is then the identity FLOW_AUTHZ_POLICY gives a role (docs/console.md); unset: the console's user is the client certificate's identity"},
	{"FLOW_CONSOLE_AUTH_PROXY_ADDRESSES", "", "comma-separated IP addresses or CIDR prefixes of the console's authenticating proxy; the header from anywhere else is ignored"},
	{"FLOW_ADMIN_LISTEN", "", "older name of FLOW_ADMIN_LISTEN_ADDR, read when that is unset"},
	{"FLOW_TASK_RETENTION", "90d", "how long a finished task (completed, failed, terminated) is kept after it ended, with its engine run, steps and report; then the leader's prune job deletes it, unless a schedule, active operation run or open event execution still points to it; a duration (90d, 2160h); 0 keeps tasks forever"},
	{"FLOW_OPERATION_RUN_RETENTION", "90d", "how long a finished operation run is kept after it finished, with its targets; 0 keeps them forever"},
	{"FLOW_EVENT_RETENTION", "90d", "how long an event whose executions have all ended is kept after its source last reported it, with its executions; 0 keeps them forever"},
	{"FLOW_RIVER_JOB_RETENTION", "24h", "how long River keeps finished jobs (completed, cancelled, discarded: schedule firings, step jobs); River's own cleaner deletes them"},
	{"FLOW_PRUNE_INTERVAL", "10m", "how often the leader's prune job runs"},
	{"FLOW_DEV_DATA_DIR", ".flow/dev", "flow dev state folder; --data-dir overrides"},
	{"TEST_DATABASE_URL", "", "tests only: use this PostgreSQL server instead of starting a private one"},
	{"FLOW_SOAK", "", "tests only: set by `make soak`; the kill tests with a long form run it (more racks, more kills), and the longest kill, restart and idle tests run only with it"},
	{"NICO_CORE_API_URL", "", "NICo Core gRPC endpoint (host:port, http:// or https://); unset: Core not configured (flow dev: its simulator)"},
	{"PSM_API_URL", "", "Powershelf Manager gRPC endpoint, conventionally localhost:50052; unset: PSM not configured (flow dev: its simulator)"},
	{"COMPONENT_MANAGER_CONFIG", "", "component-manager YAML file (upstream keys: component_managers, providers, manager_configs); flow serve -c overrides it; unset: nico for every type"},
	{"COMPONENT_MANAGER_COMPUTE", "", "overrides the compute implementation after the file (upstream's name): nico or mock (Flow's in-process Core simulator); blank: no override"},
	{"COMPONENT_MANAGER_NVSWITCH", "", "the same for NVLink switches: nico or mock"},
	{"COMPONENT_MANAGER_POWERSHELF", "", "the same for power shelves: nico, psm or mock"},
	{"TEMPORAL_HOST", "", "upstream's Temporal settings (TEMPORAL_HOST, TEMPORAL_PORT, TEMPORAL_NAMESPACE, TEMPORAL_ENABLE_TLS, TEMPORAL_CERT_PATH, TEMPORAL_SERVER_NAME): accepted and not needed, Flow has no Temporal; one info line at startup names those set"},
	{"TEMPORAL_PORT", "", "accepted, not needed (see TEMPORAL_HOST)"},
	{"TEMPORAL_NAMESPACE", "", "accepted, not needed (see TEMPORAL_HOST)"},
	{"TEMPORAL_ENABLE_TLS", "", "accepted, not needed (see TEMPORAL_HOST)"},
	{"TEMPORAL_CERT_PATH", "", "accepted, not needed (see TEMPORAL_HOST)"},
	{"TEMPORAL_SERVER_NAME", "", "accepted, not needed (see TEMPORAL_HOST)"},
	{"FLOW_DB_MIGRATION_IGNORE_SIGNATURE_CHANGES", "", "upstream's migration escape hatch: accepted, not needed (Flow's migrations carry no signatures)"},
	{"REPORT_NICO_API_VERSION", "", "upstream's Core version probe: accepted, not needed"},
	{"FLOW_NICO_TLS_CA", "", "CA bundle (PEM) to verify NICo Core; setting any FLOW_NICO_TLS_* turns TLS on"},
	{"FLOW_NICO_TLS_CERT", "", "client certificate (PEM) for mTLS to NICo Core"},
	{"FLOW_NICO_TLS_KEY", "", "client key (PEM) for mTLS to NICo Core"},
	{"FLOW_PSM_TLS_CA", "", "CA bundle (PEM) to verify PSM; setting any FLOW_PSM_TLS_* turns TLS on"},
	{"FLOW_PSM_TLS_CERT", "", "client certificate (PEM) for mTLS to PSM"},
	{"FLOW_PSM_TLS_KEY", "", "client key (PEM) for mTLS to PSM"},
	{"FLOW_SERVER", cli.DefaultServer, "server the CLI (flow rack, flow component, ...) talks to; same as --server"},
	{"FLOW_ENGINE_RESCUE_AFTER", "30m", "last resort for a process that renews its lease but hangs: a step call still going this long past its own timeout is presumed hung and its step runs elsewhere; also River's rescue window for system jobs and schedule firings. It does not bound rule timeouts (a dead process's steps move on through its lease)"},
	{"FLOW_ENGINE_LEASE_HEARTBEAT", "2s", "how often each server renews its engine lease and sweeps the steps of servers whose lease expired"},
	{"FLOW_ENGINE_LEASE_EXPIRY", "10s", "how long an engine lease lasts after its last renewal: a killed server's running steps are rescheduled this long after its last heartbeat (plus at most one heartbeat); a server that cannot renew cancels its own calls a heartbeat before; at least twice FLOW_ENGINE_LEASE_HEARTBEAT"},
	{"FLOW_ENGINE_MAX_WORKERS", "1000", "engine jobs one process works at once"},
	{"FLOW_ENGINE_URGENT_WORKERS", "8", "urgent runs' engine jobs (leak responses) one process works at once, on a River queue of their own (engine_urgent) beside FLOW_ENGINE_MAX_WORKERS, so a site-wide wave never delays them"},
	{"FLOW_ENGINE_FETCH_COOLDOWN", "20ms", "least time between two fetches of engine jobs by one server: longer fetches more jobs per query in a burst (less database work per step), shorter starts a step sooner after the one before when the server is busy; a lone submission is fetched at once either way (docs/engine.md)"},
	{"FLOW_FIRMWARE_POLL_INTERVAL", "", "replaces the poll interval of FirmwareControl, WaitBringUp and WaitDecommissioned actions (rules say 2m and 30s); set it to seconds, e.g. 1s, for tests and demos against the simulators; unset: the rules' own intervals (flow dev: 2s)"},
	{"FLOW_FIRMWARE_VERIFY_GRACE", "2m", "after a firmware update's backend reported it completed, how long Flow re-reads the installed versions of a device not yet at its target before the task fails naming it (a real Core can lag behind its own completed); 0 reads once; at most 24h; each task keeps the value it started with (docs/firmware.md#verified-upgrades)"},
	{"FLOW_POWER_TRAY_KW", "6.5", "draw (kW) a power transition counts per compute tray against its feed's kW budget (flow power-budget set --kw); the rack profile carries no draw figures (docs/operations.md#feeds-loops-and-power-budgets)"},
	{"FLOW_POWER_SHELF_KW", "1.5", "draw (kW) a power transition counts per power shelf against its feed's kW budget"},
	{"FLOW_OPERATION_RUN_MAX_CANDIDATES", "100", "most candidate targets (racks; components for component target specs) an operation run may plan over; more fails CreateOperationRun. Upstream's fixed limit is 100; raise it to roll a large site out in one run"},
	{"FLOW_RUN_OVERLAP", "refuse", "refuse: v1 CreateOperationRun refuses a run whose racks overlap a pending, running or paused run, naming it and the racks in both (v1 cannot carry allow_overlap; Flow's own create and flow rollout create --allow-overlap can); allow: upstream's behaviour, the new run's targets queue behind the other's as conflicts (docs/change-safety.md)"},
	{"FLOW_APPROVAL_THRESHOLD", "10%,50", "an operation run over more than this share of the site's racks or more than this many racks is created pending a second identity's approval of its plan hash (flow approval); one or both limits, comma-separated; 0 turns approvals off. Applies only when the API has TLS client identities: on a cleartext API (flow dev) every caller is one identity, so approvals are off (docs/change-safety.md)"},
	{"FLOW_APPROVAL_EXPIRY", "24h", "how long an approval request waits for its approval; an expired request can only be rejected"},
	{"FLOW_INGEST_FIRMWARE_UPGRADE", "false", "ingestion (IngestRack, scheduled ingest) also upgrades the firmware of the compute trays, then of the NVLink switches, to the version their component manager holds as desired, after injecting their expectations (upstream issue 2976); applies where the built-in ingest rule would; an unparseable value refuses startup (docs/operation-rules.md)"},
	{"FLOW_FIRMWARE_UNREPORTED_AFTER", "1h", "a device whose installed firmware versions Core has not reported (in the inventory sync's reads) for longer than this is unknown in firmware compliance reports, never judged by stale versions; 0 never ages them out (docs/firmware.md)"},
	{"FLOW_FIRMWARE_READ_INTERVAL", "10m", "how often the scheduled inventory sync reads each device type's installed firmware versions from Core (a cycle reads a type's when its last read is at least this old; flow sync run always reads them); 0 reads them every cycle (flow dev's default); must be below FLOW_FIRMWARE_UNREPORTED_AFTER (docs/firmware.md#installed-versions)"},
	{"FLOW_CONFIG_FILE", DefaultFlowConfigFile, "upstream's scheduler config file (YAML keys inventory_run_frequency, disable_inventory, leak_detection_interval, disable_leak_detection; durations such as 1m); the default path may be absent, an explicitly named file must exist; a zero or unparseable duration refuses startup (docs/inventory-sync.md)"},
	{"FLOW_EVENT_RULE_LEAK_DETECTION_ENABLED", "true", "answer coolant leaks through event rules (the built-in leakage rule, or a bound rule: docs/event-rules.md), which pre-empt the work on the rack; false selects upstream's legacy path (upstream's default), which submits a force-power-off task per leaking device every poll, polls every 1m unless leak_detection_interval is set, and does not pre-empt; an unparseable value refuses startup; disable_leak_detection wins"},
	{"FLOW_EXPECTED_INVENTORY_SYNC_ENABLED", "true", "gate of the expected-inventory mirror of each inventory-sync cycle (the mirror itself is not built yet); an unparseable value refuses startup"},
	{"FLOW_RIVERUI_ENABLED", "true", "serve River UI (the job queue's dashboard) at /ui/jobs/ on the API port behind the console's authentication: every role reads, only admins pause or resume queues and retry, cancel or delete jobs (each audited); false turns it off (dev mode also mounts it at /riverui/ on the admin listener)"},
	{"FLOW_WINDOW_OPERATIONS", "power_off,force_power_off,restart,force_restart,warm_reset,cold_reset,upgrade,downgrade,rollback,bring_up,decommission", "the disruptive operations maintenance windows and freezes hold: a comma-separated list of operation codes, or types (firmware_control: all its codes); none holds nothing; an unknown name refuses startup (docs/change-safety.md)"},
	{"FLOW_LEAK_SEVERE_THRESHOLD", "2", "how many open coolant leaks (not overridden) on one rack make it severe: every tray and shelf of the rack is powered off and the facility is asked to isolate it (flow.rack.isolation_requested), docs/event-rules.md#leak-tiers"},
	{"FLOW_LEAK_ISOLATION_RESEND", "5m", "how often a rack isolation request the facility has not acknowledged (flow rack isolation ack) is sent again; a restart sends every unacknowledged one at once"},
	{"FLOW_LEAK_COOLING_HOLD", "true", "while a coolant loop has an open leak, work that would energise a rack of the loop and has not started waits (held: coolant loop L has an open leak on rack R), and operation runs leave those racks unclaimed; false turns it off (docs/event-rules.md#cooling-awareness)"},
	{"FLOW_SITE_NAME", "default", "the site's name in every notification payload (site.id and site.name) and in the CloudEvents source /flow/<name> (docs/notifications.md)"},
	{"FLOW_NOTIFY_TIMEOUT", "10s", "how long one webhook request may take, connection to last byte (docs/notifications.md)"},
	{"FLOW_NOTIFY_MAX_ATTEMPTS", "12", "attempts of one webhook delivery before it becomes a dead letter (a permanent 4xx dead-letters at once)"},
	{"FLOW_NOTIFY_BACKOFF_MIN", "1s", "wait after a delivery's first failed attempt; it doubles per attempt (±20 % jitter) up to FLOW_NOTIFY_BACKOFF_MAX"},
	{"FLOW_NOTIFY_BACKOFF_MAX", "10m", "longest wait between two attempts of a delivery"},
	{"FLOW_NOTIFY_WORKERS", "32", "webhook deliveries a process sends at once (their own River queue, notify); River fetches at most this many jobs per fetch, every 20 ms at most, which bounds the deliveries a second"},
	{"FLOW_ALERTMANAGER_URLS", "", "Alertmanager base URLs, comma-separated (http://alertmanager:9093; every one gets each alert): event rules' send_alert actions post there (v2 API), re-sent while the condition holds, resolved when it clears; unset: send_alert is refused (docs/notifications.md#alertmanager)"},
	{"FLOW_ALERTMANAGER_RESEND", "1m", "how often a firing alert is re-sent to Alertmanager; its endsAt is four resends ahead"},
	{"FLOW_NOTIFY_DELIVERED_RETENTION", "1d", "how long a delivered webhook delivery is kept after it was delivered (flow webhook deliveries shows it); then the leader's prune job deletes it, and its event once no delivery of it is left; pending deliveries are never pruned; 0 keeps them forever"},
	{"FLOW_NOTIFY_DEAD_RETENTION", "30d", "how long a dead webhook delivery (a dead letter, which flow webhook redrive can send again) is kept after its last attempt; 0 keeps them forever"},
	{"FLOW_NOTIFY_ALLOW_TARGETS", "", "internal webhook targets allowed despite the SSRF guard: comma-separated CIDR prefixes, addresses or host names (10.0.0.0/8, alerts.internal); loopback, link-local, private and CGNAT targets are refused otherwise (flow dev accepts loopback http://)"},
	// Request limits (limits.go, docs/limits.md).
	{"FLOW_MAX_REQUEST_BYTES", "4194304", "largest request message in bytes, compressed and decompressed (Connect, gRPC and gRPC-Web); a larger body is refused with resource_exhausted before it is read whole (docs/limits.md)"},
	{"FLOW_MAX_REQUEST_BYTES_IN_FLIGHT", "33554432", "request body bytes all calls together may hold at once (32 MiB: eight bodies of FLOW_MAX_REQUEST_BYTES, thousands of ordinary ones); a call that would go over waits up to 2s for others to finish, then is refused with resource_exhausted, so many concurrent large bodies keep the server's memory bounded (docs/limits.md)"},
	{"FLOW_MAX_NAME_BYTES", "256", "longest name (rack, component, NVLink domain, rule, schedule and every *_name field), in bytes"},
	{"FLOW_MAX_SERIAL_BYTES", "128", "longest serial_number, in bytes"},
	{"FLOW_MAX_MANUFACTURER_BYTES", "128", "longest manufacturer or model, in bytes"},
	{"FLOW_MAX_MAC_BYTES", "64", "longest mac_address, in bytes (before it is parsed)"},
	{"FLOW_MAX_DESCRIPTION_BYTES", "16384", "longest description, in bytes"},
	{"FLOW_MAX_DOCUMENT_BYTES", "1048576", "longest JSON document field (rule_definition_json) or firmware authentication_data value, in bytes"},
	{"FLOW_MAX_STRING_BYTES", "1024", "longest of every other string field (IDs, external IDs, versions, locations, patterns), in bytes"},
	{"FLOW_MAX_TARGETS", "1000", "most targets, identifiers or IDs in one request list"},
	{"FLOW_MAX_COMPONENTS_PER_RACK", "256", "most components of one rack: in a request (CreateExpectedRack, PatchRack), and live in a rack when AddComponent or PatchComponent adds or moves one in"},
	{"FLOW_MAX_FILTER_PATTERNS", "100", "most patterns in one filter"},
	{"FLOW_MAX_LIST_ITEMS", "1000", "most items of any other repeated request field"},
	{"FLOW_MAX_PAGE_SIZE", "1000", "largest pagination.limit a listing accepts"},
	{"FLOW_MAX_RACK_PAGE_WITH_COMPONENTS", "100", "largest page of GetListOfRacks with with_components (racks with their components are ~15 KB each; upstream's client asks 100); larger is refused"},
	{"FLOW_MAX_CONCURRENT_LISTINGS", "32", "rack and component listings (GetListOfRacks, GetComponents) served at once, decoding to writing the answer, from the page cache or built; more wait their turn (at most FLOW_LISTING_QUEUE_TIMEOUT), so concurrent listers hold a bounded number of pages in memory"},
	{"FLOW_LISTING_QUEUE_TIMEOUT", "10s", "how long a listing waits for one of the FLOW_MAX_CONCURRENT_LISTINGS slots before it is refused with resource_exhausted (HTTP 429, gRPC RESOURCE_EXHAUSTED, naming both settings; retry later) instead of piling up behind the others; 0: it waits until its own deadline"},
	{"FLOW_MAX_CONCURRENT_LISTING_BUILDS", "4", "listing pages (GetListOfRacks, GetComponents) built from the database at once, among the listings served; the others wait their turn (a page found in the listing cache is not built)"},
	{"FLOW_LISTING_CACHE_BYTES", "67108864", "bytes of marshaled GetListOfRacks pages kept for reuse while the inventory and the pages' task stats are unchanged (the whole of a 3,000-rack inventory with components is ~23 MB); 0 turns the cache off"},
	{"FLOW_MAX_CONCURRENT_SUBMITS", "0", "task submission transactions (those that check and write the tasks) running at once; submissions that come meanwhile wait in arrival order, and the next transaction writes them together (a burst costs a few transactions, not one each); 0 is one per CPU (GOMAXPROCS), at least 2"},
	{"FLOW_READ_HEADER_TIMEOUT", "10s", "how long a client may take to send a request's headers"},
	{"FLOW_READ_TIMEOUT", "30s", "how long a client may take to send a whole request, headers and body; a slower one is cut off"},
	{"FLOW_IDLE_TIMEOUT", "2m", "how long a keep-alive connection may stay open with no request"},
	{"FLOW_STRICT_JSON", "false", "true refuses unknown fields in Connect JSON requests for every client (invalid_argument naming the field); false refuses them only for clients sending the Flow-Strict: true header"},
}

// configDefault returns the variable name from getenv, or its documented
// default. Every variable Flow reads must be in ConfigVars.
func configDefault(getenv func(string) string, name string) string {
	for _, v := range ConfigVars {
		if v.Name == name {
			return cmp.Or(getenv(name), v.Default)
		}
	}
	panic("app: undocumented config variable " + name)
}

// LoadConfig reads Config from getenv, applying defaults. It fails on values
// that do not parse.
func LoadConfig(getenv func(string) string) (Config, error) {
	def := func(name string) string { return configDefault(getenv, name) }
	cfg := Config{
		ListenAddr: def("FLOW_LISTEN_ADDR"),
		LogFormat:  def("FLOW_LOG_FORMAT"),
	}
	var errs []string
	cfg.DatabaseURL = getenv("DATABASE_URL")
	if cfg.DatabaseURL == "" {
		var dbErrs []string
		cfg.DatabaseURL, dbErrs = databaseURL(getenv)
		errs = append(errs, dbErrs...)
	} else if getenv("DB_CERT_PATH") != "" {
		errs = append(errs, "DB_CERT_PATH is set with DATABASE_URL, which overrides the DB_* set: put sslmode, sslrootcert, sslcert and sslkey in DATABASE_URL instead")
	}
	// getenv cannot tell unset from "", so "" means unset; a value of only
	// whitespace is a broken secret mount and fails startup.
	if v := getenv("FLOW_DATA_ENCRYPTION_KEY_PATH"); v != "" {
		if strings.TrimSpace(v) == "" {
			errs = append(errs, "FLOW_DATA_ENCRYPTION_KEY_PATH is set but empty")
		}
		cfg.KeyPath = strings.TrimSpace(v)
	}
	for _, p := range strings.Split(getenv("FLOW_DATA_DECRYPTION_KEY_PATHS"), ",") {
		if p = strings.TrimSpace(p); p != "" {
			cfg.RetiredKeyPaths = append(cfg.RetiredKeyPaths, p)
		}
	}
	if n, err := strconv.ParseInt(def("FLOW_DB_MAX_CONNS"), 10, 32); err != nil || n < 4 {
		errs = append(errs, "FLOW_DB_MAX_CONNS must be an integer ≥ 4")
	} else {
		cfg.DBMaxConns = int32(n)
	}
	if n, err := strconv.ParseInt(def("FLOW_SAFETY_DB_CONNS"), 10, 32); err != nil || n < 2 || n > 100 {
		errs = append(errs, "FLOW_SAFETY_DB_CONNS must be an integer from 2 to 100 (a leak cycle holds its lock's connection and works on another)")
	} else {
		cfg.SafetyDBConns = int32(n)
	}
	if b, err := strconv.ParseBool(def("FLOW_DEV_MODE")); err != nil {
		errs = append(errs, "FLOW_DEV_MODE must be true or false")
	} else {
		cfg.DevMode = b
	}
	if err := cfg.LogLevel.UnmarshalText([]byte(def("FLOW_LOG_LEVEL"))); err != nil {
		errs = append(errs, "FLOW_LOG_LEVEL must be debug, info, warn or error")
	}
	if cfg.LogFormat != "json" && cfg.LogFormat != "text" {
		errs = append(errs, "FLOW_LOG_FORMAT must be json or text")
	}
	if d, err := time.ParseDuration(def("FLOW_SHUTDOWN_TIMEOUT")); err != nil || d <= 0 {
		errs = append(errs, "FLOW_SHUTDOWN_TIMEOUT must be a positive duration such as 30s")
	} else {
		cfg.ShutdownTimeout = d
	}
	cfg.NICoURL, cfg.PSMURL = getenv("NICO_CORE_API_URL"), getenv("PSM_API_URL")
	cfg.NICoTLS = TLSFiles{CA: getenv("FLOW_NICO_TLS_CA"), Cert: getenv("FLOW_NICO_TLS_CERT"), Key: getenv("FLOW_NICO_TLS_KEY")}
	cfg.PSMTLS = TLSFiles{CA: getenv("FLOW_PSM_TLS_CA"), Cert: getenv("FLOW_PSM_TLS_CERT"), Key: getenv("FLOW_PSM_TLS_KEY")}
	if err := cfg.NICoTLS.check("FLOW_NICO_TLS"); err != nil {
		errs = append(errs, err.Error())
	}
	if err := cfg.PSMTLS.check("FLOW_PSM_TLS"); err != nil {
		errs = append(errs, err.Error())
	}
	cfg.ComponentConfig = getenv("COMPONENT_MANAGER_CONFIG")
	if comps, err := loadComponents(cfg.ComponentConfig, getenv); err != nil {
		errs = append(errs, err.Error())
	} else {
		cfg.Components = comps
	}
	if d, err := time.ParseDuration(def("FLOW_ENGINE_RESCUE_AFTER")); err != nil || d <= 0 {
		errs = append(errs, "FLOW_ENGINE_RESCUE_AFTER must be a positive duration such as 30m")
	} else {
		cfg.RescueAfter = d
	}
	if d, err := time.ParseDuration(def("FLOW_ENGINE_LEASE_HEARTBEAT")); err != nil || d <= 0 {
		errs = append(errs, "FLOW_ENGINE_LEASE_HEARTBEAT must be a positive duration such as 2s")
	} else {
		cfg.LeaseHeartbeat = d
	}
	if d, err := time.ParseDuration(def("FLOW_ENGINE_LEASE_EXPIRY")); err != nil || d <= 0 {
		errs = append(errs, "FLOW_ENGINE_LEASE_EXPIRY must be a positive duration such as 10s")
	} else {
		cfg.LeaseExpiry = d
	}
	if cfg.LeaseHeartbeat > 0 && cfg.LeaseExpiry > 0 {
		if err := cfg.engineConfig().Check(); err != nil {
			errs = append(errs, "FLOW_ENGINE_LEASE_EXPIRY and FLOW_ENGINE_LEASE_HEARTBEAT: "+strings.TrimPrefix(err.Error(), "engine: "))
		}
	}
	var rerrs []string
	cfg.Retention, rerrs = loadRetention(def)
	errs = append(errs, rerrs...)
	if n, err := strconv.Atoi(def("FLOW_ENGINE_MAX_WORKERS")); err != nil || n < 1 {
		errs = append(errs, "FLOW_ENGINE_MAX_WORKERS must be a positive integer")
	} else {
		cfg.MaxWorkers = n
	}
	if n, err := strconv.Atoi(def("FLOW_ENGINE_URGENT_WORKERS")); err != nil || n < 1 || n > 1000 {
		errs = append(errs, "FLOW_ENGINE_URGENT_WORKERS must be an integer from 1 to 1000")
	} else {
		cfg.UrgentWorkers = n
	}
	if d, err := time.ParseDuration(def("FLOW_ENGINE_FETCH_COOLDOWN")); err != nil || d < time.Millisecond || d > time.Second {
		errs = append(errs, "FLOW_ENGINE_FETCH_COOLDOWN must be a duration from 1ms to 1s, such as 20ms")
	} else {
		cfg.FetchCooldown = d
	}
	if n, err := strconv.Atoi(def("FLOW_OPERATION_RUN_MAX_CANDIDATES")); err != nil || n < 1 {
		errs = append(errs, "FLOW_OPERATION_RUN_MAX_CANDIDATES must be a positive integer")
	} else {
		cfg.RunMaxCandidates = n
	}
	if t, err := approval.ParseThreshold(def("FLOW_APPROVAL_THRESHOLD")); err != nil {
		errs = append(errs, "FLOW_APPROVAL_THRESHOLD: "+err.Error())
	} else {
		cfg.ApprovalThreshold = t
	}
	if d, err := time.ParseDuration(def("FLOW_APPROVAL_EXPIRY")); err != nil || d <= 0 {
		errs = append(errs, "FLOW_APPROVAL_EXPIRY must be a positive duration, such as 24h")
	} else {
		cfg.ApprovalExpiry = d
	}
	switch def("FLOW_RUN_OVERLAP") {
	case "refuse":
	case "allow":
		cfg.RunOverlapAllowed = true
	default:
		errs = append(errs, "FLOW_RUN_OVERLAP must be refuse or allow")
	}
	if b, err := strconv.ParseBool(def("FLOW_INGEST_FIRMWARE_UPGRADE")); err != nil {
		errs = append(errs, "FLOW_INGEST_FIRMWARE_UPGRADE must be true or false")
	} else {
		cfg.IngestFirmwareUpgrade = b
	}
	if d, err := time.ParseDuration(def("FLOW_FIRMWARE_UNREPORTED_AFTER")); err != nil || d < 0 {
		errs = append(errs, "FLOW_FIRMWARE_UNREPORTED_AFTER must be a duration such as 1h (0: never)")
	} else {
		cfg.FirmwareUnreportedAfter = d
	}
	if d, err := time.ParseDuration(def("FLOW_FIRMWARE_READ_INTERVAL")); err != nil || d < 0 {
		errs = append(errs, "FLOW_FIRMWARE_READ_INTERVAL must be a duration such as 10m (0: every cycle)")
	} else if cfg.FirmwareUnreportedAfter > 0 && d >= cfg.FirmwareUnreportedAfter {
		errs = append(errs, fmt.Sprintf("FLOW_FIRMWARE_READ_INTERVAL (%s) must be below FLOW_FIRMWARE_UNREPORTED_AFTER (%s): between reads every device would look unreported", d, cfg.FirmwareUnreportedAfter))
	} else {
		cfg.FirmwareReadInterval, cfg.firmwareReadIntervalSet = d, getenv("FLOW_FIRMWARE_READ_INTERVAL") != ""
	}
	if v := getenv("FLOW_FIRMWARE_POLL_INTERVAL"); v != "" {
		if d, err := time.ParseDuration(v); err != nil || d <= 0 {
			errs = append(errs, "FLOW_FIRMWARE_POLL_INTERVAL must be a positive duration such as 1s")
		} else {
			cfg.PollInterval = d
		}
	}
	if d, err := time.ParseDuration(def("FLOW_FIRMWARE_VERIFY_GRACE")); err != nil || d < 0 || d > operations.MaxVerifyGrace {
		errs = append(errs, "FLOW_FIRMWARE_VERIFY_GRACE must be a duration from 0 to 24h, such as 2m (0: one read)")
	} else {
		cfg.VerifyGrace = d
	}
	for _, k := range []struct {
		name string
		v    *float64
	}{{"FLOW_POWER_TRAY_KW", &cfg.PowerTrayKW}, {"FLOW_POWER_SHELF_KW", &cfg.PowerShelfKW}} {
		if f, err := strconv.ParseFloat(def(k.name), 64); err != nil || !(f >= 0) || f > 1000 {
			errs = append(errs, k.name+" must be a number of kW from 0 to 1000, such as 6.5")
		} else {
			*k.v = f
		}
	}
	cfg.TLS = TLSFiles{CA: getenv("FLOW_TLS_CA"), Cert: getenv("FLOW_TLS_CERT"), Key: getenv("FLOW_TLS_KEY")}
	if cfg.TLS.Enabled() && (cfg.TLS.CA == "" || cfg.TLS.Cert == "" || cfg.TLS.Key == "") {
		errs = append(errs, "FLOW_TLS_CA, FLOW_TLS_CERT and FLOW_TLS_KEY must be set together")
	}
	cfg.CertDir = getenv("CERTDIR")
	if b, err := strconv.ParseBool(def("ALLOW_INSECURE_GRPC")); err != nil {
		errs = append(errs, "ALLOW_INSECURE_GRPC must be true or false")
	} else {
		cfg.AllowInsecure = b
	}
	cfg.AuthzPolicy = getenv("FLOW_AUTHZ_POLICY")
	if p, err := console.ParseAuthProxy(getenv("FLOW_CONSOLE_AUTH_PROXY_HEADER"), getenv("FLOW_CONSOLE_AUTH_PROXY_ADDRESSES")); err != nil {
		errs = append(errs, err.Error())
	} else {
		cfg.ConsoleAuthProxy = p
	}
	cfg.AdminAddr = cmp.Or(getenv("FLOW_ADMIN_LISTEN_ADDR"), getenv("FLOW_ADMIN_LISTEN"), def("FLOW_ADMIN_LISTEN_ADDR"))
	cfg.adminAddrSet = getenv("FLOW_ADMIN_LISTEN_ADDR") != "" || getenv("FLOW_ADMIN_LISTEN") != ""
	for _, h := range strings.Split(def("FLOW_ALLOWED_HOSTS"), ",") {
		if h = strings.TrimSpace(h); h != "" {
			cfg.AllowedHosts = append(cfg.AllowedHosts, h)
		}
	}
	if b, err := strconv.ParseBool(def("FLOW_PPROF")); err != nil {
		errs = append(errs, "FLOW_PPROF must be true or false")
	} else {
		cfg.PProf = b
	}
	if b, err := strconv.ParseBool(def("FLOW_METRICS")); err != nil {
		errs = append(errs, "FLOW_METRICS must be true or false")
	} else {
		cfg.Metrics = b
	}
	cfg.LogLevelSet, cfg.logFormatSet = getenv("FLOW_LOG_LEVEL") != "", getenv("FLOW_LOG_FORMAT") != ""
	cfg.Tracing, cfg.otelEnv = telemetry.TracingEnabled(getenv), getenv
	if ops, err := window.ParseOperations(def("FLOW_WINDOW_OPERATIONS")); err != nil {
		errs = append(errs, "FLOW_WINDOW_OPERATIONS: "+err.Error())
	} else {
		cfg.WindowOperations = ops
	}
	if n, err := strconv.Atoi(def("FLOW_LEAK_SEVERE_THRESHOLD")); err != nil || n < 1 {
		errs = append(errs, "FLOW_LEAK_SEVERE_THRESHOLD must be a whole number of leaks, at least 1")
	} else {
		cfg.LeakSevereThreshold = n
	}
	if d, err := time.ParseDuration(def("FLOW_LEAK_ISOLATION_RESEND")); err != nil || d < time.Second {
		errs = append(errs, "FLOW_LEAK_ISOLATION_RESEND must be a duration of at least 1s, such as 5m")
	} else {
		cfg.LeakIsolationResend = d
	}
	if b, err := strconv.ParseBool(def("FLOW_LEAK_COOLING_HOLD")); err != nil {
		errs = append(errs, "FLOW_LEAK_COOLING_HOLD must be true or false")
	} else {
		cfg.LeakCoolingHold = b
	}
	if n, err := loadNotify(def); err != nil {
		errs = append(errs, err...)
	} else {
		cfg.Notify = n
	}
	if b, err := strconv.ParseBool(def("FLOW_RIVERUI_ENABLED")); err != nil {
		errs = append(errs, "FLOW_RIVERUI_ENABLED must be true or false")
	} else {
		cfg.RiverUIEnabled = b
	}
	lim, limErrs := loadLimits(getenv)
	cfg.Limits = lim
	errs = append(errs, limErrs...)
	errs = append(errs, loadUpstream(getenv, &cfg)...)
	sj, sjErrs := loadSystemJobsConfig(getenv)
	cfg.SystemJobs = sj
	errs = append(errs, sjErrs...)
	if len(errs) > 0 {
		return cfg, usageError(fmt.Errorf("configuration: %s", strings.Join(errs, "; ")))
	}
	return cfg, nil
}

// engineConfig is the engine's part of c (without the logger and hook).
func (c Config) engineConfig() engine.Config {
	return engine.Config{
		RescueStuckJobsAfter: c.RescueAfter, MaxWorkers: c.MaxWorkers, UrgentWorkers: c.UrgentWorkers, FetchCooldown: c.FetchCooldown,
		LeaseHeartbeat: c.LeaseHeartbeat, LeaseExpiry: c.LeaseExpiry,
	}
}

// LogValue prints the config with the database password masked.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("listen_addr", c.ListenAddr),
		slog.String("flow_env", c.Env),
		slog.String("metrics_addr", or(c.MetricsAddr, "(none: /metrics on the admin listener)")),
		slog.String("authorization_mode", c.AuthzMode),
		slog.Int("allowed_service_identities", len(c.AllowedIdentities)),
		slog.String("database_url", RedactURL(c.DatabaseURL)),
		slog.Int("db_max_conns", int(c.DBMaxConns)),
		slog.Int("safety_db_conns", int(c.SafetyDBConns)),
		slog.Bool("dev_mode", c.DevMode),
		slog.String("log_level", c.LogLevel.String()),
		slog.String("log_format", c.LogFormat),
		slog.Duration("shutdown_timeout", c.ShutdownTimeout),
		slog.String("data_encryption_key_path", c.KeyPath),
		slog.Any("data_decryption_key_paths", c.RetiredKeyPaths),
		slog.String("nico_core_api_url", or(c.NICoURL, "(not configured)")),
		slog.String("psm_api_url", or(c.PSMURL, "(not configured)")),
		slog.Bool("nico_tls", c.NICoTLS.Enabled()),
		slog.Bool("psm_tls", c.PSMTLS.Enabled()),
		slog.String("component_manager_config", or(c.ComponentConfig, "(built-in)")),
		slog.Any("component_managers", c.Components.Managers),
		slog.String("tls_cert", c.TLS.Cert),
		slog.String("certdir", c.CertDir),
		slog.Bool("allow_insecure_grpc", c.AllowInsecure),
		slog.String("authz_policy", or(c.AuthzPolicy, "(none: every authenticated client is admin)")),
		slog.String("admin_listen_addr", c.AdminAddr),
		slog.Bool("pprof", c.PProf),
		slog.Bool("metrics", c.Metrics),
		slog.Bool("tracing", c.Tracing),
		slog.Bool("riverui_enabled", c.RiverUIEnabled),
		slog.Any("window_operations", c.WindowOperations),
		slog.Int("leak_severe_threshold", c.LeakSevereThreshold),
		slog.Duration("leak_isolation_resend", c.LeakIsolationResend),
		slog.Bool("leak_cooling_hold", c.LeakCoolingHold),
		slog.Duration("engine_rescue_after", c.RescueAfter),
		slog.Duration("engine_lease_heartbeat", c.LeaseHeartbeat),
		slog.Duration("engine_lease_expiry", c.LeaseExpiry),
		slog.Int("engine_max_workers", c.MaxWorkers),
		slog.Int("engine_urgent_workers", c.UrgentWorkers),
		slog.Duration("engine_fetch_cooldown", c.FetchCooldown),
		slog.Int("operation_run_max_candidates", c.RunMaxCandidates),
		slog.Bool("run_overlap_allowed", c.RunOverlapAllowed),
		slog.String("approval_threshold", c.ApprovalThreshold.String()),
		slog.Duration("approval_expiry", c.ApprovalExpiry),
		slog.Bool("ingest_firmware_upgrade", c.IngestFirmwareUpgrade),
		slog.Duration("firmware_verify_grace", c.VerifyGrace),
		slog.Duration("firmware_unreported_after", c.FirmwareUnreportedAfter),
		slog.Duration("firmware_read_interval", c.FirmwareReadInterval),
		slog.String("flow_config_file", or(c.SystemJobs.File, "(none)")),
		slog.Duration("inventory_run_frequency", c.SystemJobs.InventoryInterval),
		slog.Bool("disable_inventory", c.SystemJobs.InventoryDisabled),
		slog.Bool("expected_inventory_sync", c.SystemJobs.ExpectedInventorySync),
		slog.Duration("leak_detection_interval", c.SystemJobs.LeakDetectionInterval),
		slog.Bool("disable_leak_detection", c.SystemJobs.LeakDetectionDisabled),
		slog.Any("limits", c.Limits),
		slog.Bool("event_rule_leak_detection", c.SystemJobs.LeakEventRules),
	)
}

// RedactURL returns u with any password replaced by "xxxxx".
func RedactURL(u string) string {
	parsed, err := url.Parse(u)
	if err != nil {
		return "(unparsable url)"
	}
	return parsed.Redacted()
}

// logLevel is the effective level of Flow's own lines: FLOW_LOG_LEVEL,
// or debug in dev mode when it is unset.
func (c Config) logLevel() slog.Level {
	if c.DevMode && !c.LogLevelSet {
		return slog.LevelDebug
	}
	return c.LogLevel
}

// riverLogLevel is the level of River's own lines (its client and River
// UI): WARN and above, unless FLOW_LOG_LEVEL=debug asks for everything.
func (c Config) riverLogLevel() slog.Level {
	if c.LogLevelSet && c.LogLevel <= slog.LevelDebug {
		return slog.LevelDebug
	}
	return max(c.LogLevel, slog.LevelWarn)
}
