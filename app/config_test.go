package app

import (
	"context"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/engine"
)

func TestLoadConfigDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := LoadConfig(func(string) string { return "" })
	require.NoError(t, err)
	require.Equal(t, ":50051", cfg.ListenAddr)
	require.Equal(t, "postgres://postgres@localhost:5432/flow?sslmode=prefer", cfg.DatabaseURL)
	require.EqualValues(t, 40, cfg.DBMaxConns)
	require.False(t, cfg.DevMode)
}

func TestLoadConfig(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		env     map[string]string
		check   func(t *testing.T, cfg Config)
		wantErr string
	}{
		{
			name: "DBVarsWithPassword",
			env:  map[string]string{"DB_HOST": "db.example", "DB_PORT": "6432", "DB_USER": "flow", "DB_PASSWORD": "s3cr:t", "DB_NAME": "inv"},
			check: func(t *testing.T, cfg Config) {
				require.Equal(t, "postgres://flow:s3cr%3At@db.example:6432/inv?sslmode=prefer", cfg.DatabaseURL)
				require.NotContains(t, RedactURL(cfg.DatabaseURL), "s3cr")
			},
		},
		{
			name: "DatabaseURLWins",
			env:  map[string]string{"DATABASE_URL": "postgres://a@b/c", "DB_HOST": "ignored"},
			check: func(t *testing.T, cfg Config) {
				require.Equal(t, "postgres://a@b/c", cfg.DatabaseURL)
			},
		},
		{
			name: "SubmitsPerCPUByDefault",
			env:  map[string]string{},
			check: func(t *testing.T, cfg Config) {
				require.Equal(t, max(runtime.GOMAXPROCS(0), 2), cfg.Limits.Submits)
			},
		},
		{
			name: "SubmitsSet",
			env:  map[string]string{"FLOW_MAX_CONCURRENT_SUBMITS": "7"},
			check: func(t *testing.T, cfg Config) {
				require.Equal(t, 7, cfg.Limits.Submits)
			},
		},
		{name: "BadSubmits", env: map[string]string{"FLOW_MAX_CONCURRENT_SUBMITS": "-1"}, wantErr: "FLOW_MAX_CONCURRENT_SUBMITS must be a non-negative integer"},
		{name: "BadLevel", env: map[string]string{"FLOW_LOG_LEVEL": "loud"}, wantErr: "FLOW_LOG_LEVEL"},
		{name: "BadFormat", env: map[string]string{"FLOW_LOG_FORMAT": "xml"}, wantErr: "FLOW_LOG_FORMAT"},
		{name: "BadConns", env: map[string]string{"FLOW_DB_MAX_CONNS": "two"}, wantErr: "FLOW_DB_MAX_CONNS"},
		{name: "BadTimeout", env: map[string]string{"FLOW_SHUTDOWN_TIMEOUT": "-1s"}, wantErr: "FLOW_SHUTDOWN_TIMEOUT"},
		{name: "BadDevMode", env: map[string]string{"FLOW_DEV_MODE": "perhaps"}, wantErr: "FLOW_DEV_MODE"},
		{
			name: "FetchCooldown",
			env:  map[string]string{"FLOW_ENGINE_FETCH_COOLDOWN": "5ms"},
			check: func(t *testing.T, cfg Config) {
				require.Equal(t, 5*time.Millisecond, cfg.engineConfig().FetchCooldown)
			},
		},
		{
			name: "FetchCooldownByDefault",
			env:  map[string]string{},
			check: func(t *testing.T, cfg Config) {
				require.Equal(t, engine.DefaultFetchCooldown, cfg.engineConfig().FetchCooldown)
			},
		},
		{name: "BadFetchCooldown", env: map[string]string{"FLOW_ENGINE_FETCH_COOLDOWN": "0s"}, wantErr: "FLOW_ENGINE_FETCH_COOLDOWN must be a duration from 1ms to 1s"},
		{name: "FetchCooldownTooLong", env: map[string]string{"FLOW_ENGINE_FETCH_COOLDOWN": "1m"}, wantErr: "FLOW_ENGINE_FETCH_COOLDOWN"},
		{
			name: "FirmwareReadInterval",
			env:  map[string]string{},
			check: func(t *testing.T, cfg Config) {
				require.Equal(t, 10*time.Minute, cfg.FirmwareReadInterval)
				cfg, err := LoadConfig(func(k string) string { return map[string]string{"FLOW_FIRMWARE_READ_INTERVAL": "0"}[k] })
				require.NoError(t, err)
				require.Zero(t, cfg.FirmwareReadInterval, "every cycle")
			},
		},
		{name: "BadFirmwareReadInterval", env: map[string]string{"FLOW_FIRMWARE_READ_INTERVAL": "-1m"}, wantErr: "FLOW_FIRMWARE_READ_INTERVAL must be a duration"},
		{
			name:    "FirmwareReadIntervalNotBelowUnreportedAfter",
			env:     map[string]string{"FLOW_FIRMWARE_READ_INTERVAL": "1h", "FLOW_FIRMWARE_UNREPORTED_AFTER": "1h"},
			wantErr: "FLOW_FIRMWARE_READ_INTERVAL (1h0m0s) must be below FLOW_FIRMWARE_UNREPORTED_AFTER (1h0m0s)",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := LoadConfig(func(k string) string { return tt.env[k] })
			requireConfig(t, cfg, err, tt.wantErr, tt.check)
		})
	}
}

// requireConfig checks what a configuration test case got: with wantErr,
// an error naming it that exits 2 (a usage error); otherwise no error and
// a config that passes check.
func requireConfig(t *testing.T, cfg Config, err error, wantErr string, check func(*testing.T, Config)) {
	t.Helper()
	if wantErr != "" {
		require.ErrorContains(t, err, wantErr)
		require.Equal(t, 2, ExitCode(err))
		return
	}
	require.NoError(t, err)
	check(t, cfg)
}

func TestConfigLogValueMasksPassword(t *testing.T) {
	t.Parallel()
	cfg, err := LoadConfig(func(k string) string {
		return map[string]string{"DB_PASSWORD": "hunter2"}[k]
	})
	require.NoError(t, err)
	require.NotContains(t, cfg.LogValue().String(), "hunter2")
}

// TestReadmeDocumentsEveryVariable keeps the README's configuration table
// and ConfigVars in step.
func TestReadmeDocumentsEveryVariable(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	for _, v := range ConfigVars {
		row := "| `" + v.Name + "` |"
		require.True(t, strings.Contains(string(readme), row), "README.md has no configuration row for %s", v.Name)
	}
}

func TestServerRefusesABadKeyFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := dir + "/key"
	require.NoError(t, os.WriteFile(bad, []byte("not-base64!"), 0o600))
	for _, tt := range []struct{ name, path, want string }{
		{"NotBase64", bad, "must be base64 encoded"},
		{"Unreadable", dir + "/missing", "read data encryption key"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := LoadConfig(func(k string) string {
				return map[string]string{"FLOW_DATA_ENCRYPTION_KEY_PATH": tt.path, "DATABASE_URL": "postgres://unused@127.0.0.1:1/x"}[k]
			})
			require.NoError(t, err)
			_, err = newServer(context.Background(), cfg, newLogger(io.Discard, "json", slog.LevelInfo), serveOptions{})
			require.ErrorContains(t, err, tt.want)
			require.ErrorContains(t, err, tt.path)
		})
	}
	_, err := LoadConfig(func(k string) string {
		return map[string]string{"FLOW_DATA_ENCRYPTION_KEY_PATH": "  "}[k]
	})
	require.ErrorContains(t, err, "FLOW_DATA_ENCRYPTION_KEY_PATH is set but empty")
}

// TestLogLevels: Flow's own level is FLOW_LOG_LEVEL, or debug in dev mode
// when it is unset; River's own lines are WARN and above unless
// FLOW_LOG_LEVEL=debug; FLOW_ADMIN_LISTEN is the older name of
// FLOW_ADMIN_LISTEN_ADDR.
func TestLogLevels(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		env       map[string]string
		dev       bool
		flow, rvr slog.Level
		adminAddr string
	}{
		{name: "Defaults", env: map[string]string{}, flow: slog.LevelInfo, rvr: slog.LevelWarn, adminAddr: "127.0.0.1:50060"},
		{name: "DevDefaults", env: map[string]string{}, dev: true, flow: slog.LevelDebug, rvr: slog.LevelWarn, adminAddr: "127.0.0.1:50060"},
		{name: "DevHonoursLevel", env: map[string]string{"FLOW_LOG_LEVEL": "warn"}, dev: true, flow: slog.LevelWarn, rvr: slog.LevelWarn, adminAddr: "127.0.0.1:50060"},
		{name: "DebugIncludesRiver", env: map[string]string{"FLOW_LOG_LEVEL": "debug"}, flow: slog.LevelDebug, rvr: slog.LevelDebug, adminAddr: "127.0.0.1:50060"},
		{name: "ErrorQuietsRiver", env: map[string]string{"FLOW_LOG_LEVEL": "error"}, flow: slog.LevelError, rvr: slog.LevelError, adminAddr: "127.0.0.1:50060"},
		{name: "OldAdminName", env: map[string]string{"FLOW_ADMIN_LISTEN": "off"}, flow: slog.LevelInfo, rvr: slog.LevelWarn, adminAddr: "off"},
		{name: "NewAdminNameWins", env: map[string]string{"FLOW_ADMIN_LISTEN": "off", "FLOW_ADMIN_LISTEN_ADDR": "127.0.0.1:9"}, flow: slog.LevelInfo, rvr: slog.LevelWarn, adminAddr: "127.0.0.1:9"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := LoadConfig(func(k string) string { return tt.env[k] })
			require.NoError(t, err)
			cfg.DevMode = tt.dev
			require.Equal(t, tt.flow, cfg.logLevel())
			require.Equal(t, tt.rvr, cfg.riverLogLevel())
			require.Equal(t, tt.adminAddr, cfg.AdminAddr)
		})
	}
	_, err := LoadConfig(func(k string) string { return map[string]string{"FLOW_PPROF": "maybe"}[k] })
	require.ErrorContains(t, err, "FLOW_PPROF must be true or false")
}
