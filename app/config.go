package app

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Config is every setting of a Flow server, read from the environment by
// LoadConfig. Command-line flags override individual fields.
type Config struct {
	ListenAddr      string        // FLOW_LISTEN_ADDR
	DatabaseURL     string        // DATABASE_URL, else built from DB_*
	DBMaxConns      int32         // FLOW_DB_MAX_CONNS
	DevMode         bool          // FLOW_DEV_MODE
	LogLevel        slog.Level    // FLOW_LOG_LEVEL
	LogFormat       string        // FLOW_LOG_FORMAT: text or json
	ShutdownTimeout time.Duration // FLOW_SHUTDOWN_TIMEOUT
	RiverUIEnabled  bool          // FLOW_RIVERUI_ENABLED (dev mode mounts it regardless)
}

// ConfigVar documents one environment variable; ConfigVars is the table the
// README and `flow config` print.
type ConfigVar struct {
	Name, Default, Meaning string
}

// ConfigVars lists every environment variable Flow reads.
var ConfigVars = []ConfigVar{
	{"FLOW_LISTEN_ADDR", ":50051", "address the server listens on (gRPC, gRPC-Web and Connect on one h2c port)"},
	{"DATABASE_URL", "", "PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...); overrides the DB_* set"},
	{"DB_HOST", "localhost", "PostgreSQL host (upstream Flow's name)"},
	{"DB_PORT", "5432", "PostgreSQL port"},
	{"DB_USER", "postgres", "PostgreSQL user"},
	{"DB_PASSWORD", "", "PostgreSQL password (logged masked)"},
	{"DB_NAME", "flow", "PostgreSQL database"},
	{"FLOW_DB_MAX_CONNS", "40", "size of the connection pool"},
	{"FLOW_DEV_MODE", "false", "same as --dev-mode: server reflection and debug logs"},
	{"FLOW_LOG_LEVEL", "info", "debug, info, warn or error (dev mode forces debug)"},
	{"FLOW_LOG_FORMAT", "json", "json or text"},
	{"FLOW_SHUTDOWN_TIMEOUT", "30s", "how long a graceful shutdown waits for in-flight calls and jobs"},
	{"FLOW_RIVERUI_ENABLED", "false", "mount River UI (job queue dashboard) at /riverui/ outside dev mode; it has no authentication of its own, so enable it only behind a trusted network or an authenticating proxy"},
}

// LoadConfig reads Config from getenv, applying defaults. It fails on values
// that do not parse.
func LoadConfig(getenv func(string) string) (Config, error) {
	def := func(name string) string {
		for _, v := range ConfigVars {
			if v.Name == name {
				return cmp.Or(getenv(name), v.Default)
			}
		}
		panic("app: undocumented config variable " + name)
	}
	cfg := Config{
		ListenAddr: def("FLOW_LISTEN_ADDR"),
		LogFormat:  def("FLOW_LOG_FORMAT"),
	}
	cfg.DatabaseURL = getenv("DATABASE_URL")
	if cfg.DatabaseURL == "" {
		u := url.URL{
			Scheme:   "postgres",
			Host:     def("DB_HOST") + ":" + def("DB_PORT"),
			Path:     "/" + def("DB_NAME"),
			RawQuery: "sslmode=prefer",
		}
		if pw := getenv("DB_PASSWORD"); pw != "" {
			u.User = url.UserPassword(def("DB_USER"), pw)
		} else {
			u.User = url.User(def("DB_USER"))
		}
		cfg.DatabaseURL = u.String()
	}
	var errs []string
	if n, err := strconv.ParseInt(def("FLOW_DB_MAX_CONNS"), 10, 32); err != nil || n < 4 {
		errs = append(errs, "FLOW_DB_MAX_CONNS must be an integer ≥ 4")
	} else {
		cfg.DBMaxConns = int32(n)
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
	if b, err := strconv.ParseBool(def("FLOW_RIVERUI_ENABLED")); err != nil {
		errs = append(errs, "FLOW_RIVERUI_ENABLED must be true or false")
	} else {
		cfg.RiverUIEnabled = b
	}
	if len(errs) > 0 {
		return cfg, usageError{fmt.Errorf("configuration: %s", strings.Join(errs, "; "))}
	}
	return cfg, nil
}

// LogValue prints the config with the database password masked.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("listen_addr", c.ListenAddr),
		slog.String("database_url", RedactURL(c.DatabaseURL)),
		slog.Int("db_max_conns", int(c.DBMaxConns)),
		slog.Bool("dev_mode", c.DevMode),
		slog.String("log_level", c.LogLevel.String()),
		slog.String("log_format", c.LogFormat),
		slog.Duration("shutdown_timeout", c.ShutdownTimeout),
		slog.Bool("riverui_enabled", c.RiverUIEnabled),
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

// logLevel is the effective level: dev mode always logs debug.
func (c Config) logLevel() slog.Level {
	if c.DevMode {
		return slog.LevelDebug
	}
	return c.LogLevel
}
