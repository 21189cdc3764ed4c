package backend

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/nicoflow/flow/nico"
	"github.com/nicoflow/flow/psm"
)

// Config is the component-manager configuration: which implementation
// manages each component type, and the backends' call timeouts.
type Config struct {
	Managers    map[ComponentType]Implementation
	NICoTimeout time.Duration // providers.nico.timeout, default 1m
	PSMTimeout  time.Duration // providers.psm.timeout, default 30s
}

// DefaultConfig is what Flow uses without COMPONENT_MANAGER_CONFIG: NICo Core
// for every component type.
func DefaultConfig() Config {
	return Config{
		Managers:    map[ComponentType]Implementation{Compute: ImplNICo, NVSwitch: ImplNICo, PowerShelf: ImplNICo},
		NICoTimeout: nico.DefaultTimeout,
		PSMTimeout:  psm.DefaultTimeout,
	}
}

// LoadConfig reads the YAML file at path; an empty path gives DefaultConfig.
func LoadConfig(path string) (Config, error) {
	if path == "" {
		return DefaultConfig(), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("COMPONENT_MANAGER_CONFIG: %w", err)
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return Config{}, fmt.Errorf("COMPONENT_MANAGER_CONFIG %s: %w", path, err)
	}
	return cfg, nil
}

type fileConfig struct {
	ComponentManagers map[string]string `yaml:"component_managers"`
	ManagerConfigs    map[string]any    `yaml:"manager_configs"`
	Providers         map[string]struct {
		Timeout           string `yaml:"timeout"`
		ComputePowerDelay string `yaml:"compute_power_delay"`
	} `yaml:"providers"`
}

// ParseConfig reads upstream's component-manager YAML:
//
//	component_managers:
//	  compute: nico
//	  nvswitch: nico        # "nvlswitch" is accepted as an older spelling
//	  powershelf: psm       # or nico
//	providers:
//	  nico: {timeout: 1m}
//	  psm: {timeout: 30s}
//
// As upstream, a file is authoritative: it must map at least one type, and
// a type it leaves out has no manager (its operations fail with
// ErrNotConfigured). Implementations Flow lacks (nicolegacy, mock,
// nvswitchmanager) are refused. manager_configs is accepted and ignored.
func ParseConfig(data []byte) (Config, error) {
	var fc fileConfig
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&fc); err != nil {
		return Config{}, fmt.Errorf("parse: %w", err)
	}
	if len(fc.ComponentManagers) == 0 {
		return Config{}, errors.New("component_managers must map at least one component type")
	}
	cfg := Config{Managers: map[ComponentType]Implementation{}, NICoTimeout: nico.DefaultTimeout, PSMTimeout: psm.DefaultTimeout}
	for k, v := range fc.ComponentManagers {
		// Any case, and the wire enum's names, as everywhere a type is a
		// string.
		t := ComponentType(strings.TrimPrefix(strings.ToLower(k), "component_type_"))
		if t == "nvlswitch" {
			t = NVSwitch
		}
		if t != Compute && t != NVSwitch && t != PowerShelf {
			return Config{}, fmt.Errorf("component_managers: unknown component type %q (want compute, nvswitch or powershelf)", k)
		}
		if _, dup := cfg.Managers[t]; dup {
			return Config{}, fmt.Errorf("component_managers: %q names %s, which another key names too", k, t)
		}
		impl := Implementation(v)
		if v == "carbide" {
			impl = ImplNICo // NICo Core's former name
		}
		if impl != ImplNICo && (impl != ImplPSM || t != PowerShelf) {
			return Config{}, fmt.Errorf("component_managers.%s: implementation %q is not available in Flow (use nico%s)", k, v, map[bool]string{true: " or psm", false: ""}[t == PowerShelf])
		}
		cfg.Managers[t] = impl
	}
	for name, p := range fc.Providers {
		if p.Timeout == "" {
			continue
		}
		d, err := time.ParseDuration(p.Timeout)
		if err != nil || d <= 0 {
			return Config{}, fmt.Errorf("providers.%s.timeout: %q is not a positive duration", name, p.Timeout)
		}
		switch name {
		case "nico", "carbide":
			cfg.NICoTimeout = d
		case "psm":
			cfg.PSMTimeout = d
		default:
			return Config{}, fmt.Errorf("providers: unknown provider %q (want nico or psm)", name)
		}
	}
	cfg.NICoTimeout = cmp.Or(cfg.NICoTimeout, nico.DefaultTimeout)
	return cfg, nil
}

// Uses reports whether any component type is managed by impl; Flow only
// needs a backend's URL when it does.
func (c Config) Uses(impl Implementation) bool {
	for _, v := range c.Managers {
		if v == impl {
			return true
		}
	}
	return false
}
