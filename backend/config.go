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
	ComponentManagers map[string]string                    `yaml:"component_managers"`
	ManagerConfigs    map[string]map[string]map[string]any `yaml:"manager_configs"`
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
// ErrNotConfigured). mock is answered by Flow's in-process Core simulator
// (ImplMock); implementations Flow lacks (nicolegacy, nvswitchmanager) are
// refused. manager_configs (manager_configs.<type>.<implementation>.<key>)
// must name the implementation selected for its type; its one upstream key,
// compute_power_delay (nicolegacy), is a duration that Flow has no use for.
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
	selected := map[ComponentType]string{} // the implementation names as written
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
		impl, err := parseImplementation(t, v)
		if err != nil {
			return Config{}, fmt.Errorf("component_managers.%s: %w", k, err)
		}
		cfg.Managers[t] = impl
		selected[t] = v
	}
	for k, impls := range fc.ManagerConfigs {
		t := ComponentType(strings.TrimPrefix(strings.ToLower(k), "component_type_"))
		for name, settings := range impls {
			if name != selected[t] {
				return Config{}, fmt.Errorf("manager_configs.%s.%s: %s is managed by %q, not %q", k, name, k, or(selected[t], "no implementation"), name)
			}
			for key, val := range settings {
				if key != "compute_power_delay" {
					continue
				}
				if d, err := time.ParseDuration(fmt.Sprint(val)); err != nil || d < 0 {
					return Config{}, fmt.Errorf("manager_configs.%s.%s.%s: %v is not a duration", k, name, key, val)
				}
			}
		}
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

// parseImplementation returns the implementation v names for type t:
// nico (carbide, NICo Core's former name), psm for power shelves, or mock.
func parseImplementation(t ComponentType, v string) (Implementation, error) {
	impl := Implementation(v)
	if v == "carbide" {
		impl = ImplNICo
	}
	if impl != ImplNICo && impl != ImplMock && (impl != ImplPSM || t != PowerShelf) {
		return "", fmt.Errorf("implementation %q is not available in Flow (use nico%s or mock)", v, map[bool]string{true: ", psm", false: ""}[t == PowerShelf])
	}
	return impl, nil
}

// Override sets the implementation of type t to v (upstream's
// COMPONENT_MANAGER_COMPUTE, and Flow's COMPONENT_MANAGER_NVSWITCH and
// COMPONENT_MANAGER_POWERSHELF), after the file is loaded. v is trimmed;
// blank leaves the configuration as it is.
func (c *Config) Override(t ComponentType, v string) error {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil
	}
	impl, err := parseImplementation(t, v)
	if err != nil {
		return err
	}
	managers := make(map[ComponentType]Implementation, len(c.Managers)+1)
	for k, x := range c.Managers {
		managers[k] = x
	}
	managers[t] = impl
	c.Managers = managers
	return nil
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
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
