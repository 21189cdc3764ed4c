package app

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// DefaultFlowConfigFile is where upstream Flow reads its scheduler settings
// (FLOW_CONFIG_FILE overrides it).
const DefaultFlowConfigFile = "/etc/flow/flowconfig.yaml"

// Defaults of the system-job settings: upstream's, but for leak detection.
const (
	defaultInventoryInterval = time.Minute
	// defaultLeakDetectionInterval is a few seconds, not upstream's minute:
	// a leak must shed power within seconds, and a poll costs Core two
	// queries (FindMachineIds and FindSwitchIds filtered on the leak
	// alert) whatever the site's size (docs/event-rules.md).
	defaultLeakDetectionInterval = 3 * time.Second
	// devInventoryInterval is flow dev's sync interval, so the README
	// sequence sees the hardware's new state within seconds.
	devInventoryInterval = 10 * time.Second
	// devLeakDetectionInterval is flow dev's leak-detection interval: the
	// default.
	devLeakDetectionInterval = defaultLeakDetectionInterval
	// legacyLeakDetectionInterval is upstream's minute, kept for the legacy
	// path (FLOW_EVENT_RULE_LEAK_DETECTION_ENABLED=false): it submits a
	// forced power-off per leaking device every poll, without
	// deduplication, so a poll every few seconds would fill the rack's
	// queue in seconds.
	legacyLeakDetectionInterval = time.Minute
)

// SystemJobsConfig is the system-job part of Config: upstream's config-file
// keys and FLOW_EXPECTED_INVENTORY_SYNC_ENABLED.
type SystemJobsConfig struct {
	// File is the config file read (empty: none was found at the default
	// path).
	File                  string
	InventoryInterval     time.Duration // inventory_run_frequency
	InventoryDisabled     bool          // disable_inventory
	LeakDetectionInterval time.Duration // leak_detection_interval
	LeakDetectionDisabled bool          // disable_leak_detection
	// ExpectedInventorySync turns the expected-inventory mirror (Core →
	// Flow) of each sync cycle on (FLOW_EXPECTED_INVENTORY_SYNC_ENABLED).
	ExpectedInventorySync bool
	// LeakEventRules answers leaks through event rules instead of the
	// legacy direct power-off (FLOW_EVENT_RULE_LEAK_DETECTION_ENABLED).
	LeakEventRules bool
	// inventoryIntervalSet says the file set inventory_run_frequency, which
	// flow dev then keeps instead of its own 10s; leakIntervalSet and
	// leakEventRulesSet likewise for leak_detection_interval and
	// FLOW_EVENT_RULE_LEAK_DETECTION_ENABLED.
	inventoryIntervalSet, leakIntervalSet, leakEventRulesSet bool
}

// flowConfigFile is the shape of flowconfig.yaml. Durations are Go
// durations ("1m", "30s"); unknown keys (upstream's unused grpc_timeout)
// are ignored.
type flowConfigFile struct {
	InventoryRunFrequency *string `yaml:"inventory_run_frequency"`
	DisableInventory      *bool   `yaml:"disable_inventory"`
	LeakDetectionInterval *string `yaml:"leak_detection_interval"`
	DisableLeakDetection  *bool   `yaml:"disable_leak_detection"`
}

// loadSystemJobsConfig reads the config file named by FLOW_CONFIG_FILE (or
// the default path, which may be absent) and the environment. Every problem
// is returned, each naming its key.
func loadSystemJobsConfig(getenv func(string) string) (SystemJobsConfig, []string) {
	c, errs := readSystemJobsConfig(getenv)
	if !c.LeakEventRules && !c.leakIntervalSet {
		c.LeakDetectionInterval = legacyLeakDetectionInterval
	}
	return c, errs
}

// readSystemJobsConfig is loadSystemJobsConfig before the legacy leak
// path's interval applies. Leaks are answered through event rules unless
// FLOW_EVENT_RULE_LEAK_DETECTION_ENABLED says false: upstream's default is
// its legacy path, which neither pre-empts the work on the rack nor
// deduplicates (docs/event-rules.md).
func readSystemJobsConfig(getenv func(string) string) (SystemJobsConfig, []string) {
	c := SystemJobsConfig{InventoryInterval: defaultInventoryInterval, LeakDetectionInterval: defaultLeakDetectionInterval, LeakEventRules: true}
	var errs []string
	if v := getenv("FLOW_EXPECTED_INVENTORY_SYNC_ENABLED"); v == "" {
		c.ExpectedInventorySync = true
	} else if b, err := strconv.ParseBool(strings.TrimSpace(v)); err != nil {
		// Upstream turns an unparseable value into "off"; a typo silently
		// disabling the mirror is worse than refusing to start.
		errs = append(errs, "FLOW_EXPECTED_INVENTORY_SYNC_ENABLED must be true or false")
	} else {
		c.ExpectedInventorySync = b
	}
	if v := strings.TrimSpace(getenv("FLOW_EVENT_RULE_LEAK_DETECTION_ENABLED")); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, "FLOW_EVENT_RULE_LEAK_DETECTION_ENABLED must be true or false")
		}
		c.LeakEventRules, c.leakEventRulesSet = b, true
	}
	path, explicit := getenv("FLOW_CONFIG_FILE"), true
	if path == "" {
		path, explicit = DefaultFlowConfigFile, false
	}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !explicit:
		return c, errs
	case err != nil:
		return c, append(errs, fmt.Sprintf("FLOW_CONFIG_FILE: %v", err))
	}
	c.File = path
	var f flowConfigFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		return c, append(errs, fmt.Sprintf("%s: %v", path, err))
	}
	dur := func(key string, v *string, into *time.Duration) bool {
		if v == nil {
			return false
		}
		d, err := time.ParseDuration(strings.TrimSpace(*v))
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Sprintf("%s: %s must be a positive duration such as 1m, got %q", path, key, *v))
			return false
		}
		*into = d
		return true
	}
	c.inventoryIntervalSet = dur("inventory_run_frequency", f.InventoryRunFrequency, &c.InventoryInterval)
	c.leakIntervalSet = dur("leak_detection_interval", f.LeakDetectionInterval, &c.LeakDetectionInterval)
	if f.DisableInventory != nil {
		c.InventoryDisabled = *f.DisableInventory
	}
	if f.DisableLeakDetection != nil {
		c.LeakDetectionDisabled = *f.DisableLeakDetection
	}
	return c, errs
}
