package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/sim"
	"github.com/nicoflow/flow/sim/nicosim"
	"github.com/nicoflow/flow/sim/psmsim"
	"github.com/nicoflow/flow/sim/simrun"
)

// simulators are the NICo Core and PSM simulators served side by side
// (package simrun), with short names for app's code and tests.
type simulators struct {
	*simrun.Simulators
	nico    *nicosim.Sim
	psm     *psmsim.Sim
	nicoSrv *sim.Server
	psmSrv  *sim.Server
}

// simOptions tunes startSimulators.
type simOptions struct {
	nicoAddr, psmAddr string
	clock             sim.Clock // nil: wall clock
	powerDelay        time.Duration
	firmwarePhase     time.Duration
}

// startSimulators serves both simulators on their addresses ("127.0.0.1:0"
// picks free ports) until Close.
func startSimulators(o simOptions) (*simulators, error) {
	s, err := simrun.Start(simrun.Options{NICoAddr: o.nicoAddr, PSMAddr: o.psmAddr, Clock: o.clock, PowerDelay: o.powerDelay, FirmwarePhase: o.firmwarePhase})
	if err != nil {
		return nil, err
	}
	return &simulators{Simulators: s, nico: s.NICo, psm: s.PSM, nicoSrv: s.NICoServer, psmSrv: s.PSMServer}, nil
}

// demoFleet is the devices of demo rack 0 (inventory.DemoRack): the rack
// `flow dev --seed 1` creates and examples/rack-demo-0000.json describes,
// with 18 compute trays, 9 NVLink switches and 8 power shelves, the same
// serials, BMC MACs, firmware versions and positions. Core IDs are left to
// the simulator (machine-0001, …): Flow, knowing none, addresses the
// devices by BMC MAC.
func demoFleet() []nicosim.Device {
	devs := simDevices(inventory.DemoRack(0).Components)
	for i := range devs {
		devs[i].ID, devs[i].RackID = "", ""
	}
	return devs
}

// simulateCommand is `flow simulate`: the simulators standalone, or (its
// subcommands) a client of their admin surface.
func simulateCommand(stdout, stderr io.Writer) *cobra.Command {
	cmd := command("simulate", "run the NICo Core and PSM simulators until Ctrl-C; fault, journal, leak, remove, seed: drive a running one", func(fs *pflag.FlagSet) func(context.Context) error {
		var o simulateOptions
		fs.StringVar(&o.nicoAddr, "nico-listen", "127.0.0.1:50061", "NICo Core simulator address")
		fs.StringVar(&o.psmAddr, "psm-listen", "127.0.0.1:50062", "PSM simulator address")
		fs.StringVar(&o.seedFile, "seed", "", "JSON list of devices to seed (see docs/simulators.md)")
		fs.BoolVar(&o.demo, "demo", false, "seed the devices of demo rack demo-0000 (examples/rack-demo-0000.json: 18 compute trays, 9 switches, 8 shelves)")
		fs.DurationVar(&o.powerDelay, "power-delay", 5*time.Second, "time a power change takes")
		fs.DurationVar(&o.phase, "firmware-phase", 10*time.Second, "time per firmware job, ingestion and decommission step")
		return func(ctx context.Context) error { return runSimulate(ctx, o, stdout) }
	})
	cmd.Long = `Run the NICo Core and PSM simulators until Ctrl-C, or drive a running one
through its admin surface (fault, journal, leak, remove, seed).

--admin is a simulator's base URL, e.g. http://127.0.0.1:50061 (NICo Core) or
http://127.0.0.1:50062 (PSM). See docs/simulators.md.`
	for _, sub := range []struct{ use, short string }{
		{"fault", "add a fault (--kind ...), or --clear / --list the faults"},
		{"journal", "print the calls the simulator received"},
		{"remove DEVICE", "remove a device"},
		{"seed FILE", "add the devices of a JSON file"},
		{"leak [DEVICE]", "raise a compute tray's or switch's coolant-leak alert (--clear: clear it; --list: the leaking devices)"},
	} {
		name, _, _ := strings.Cut(sub.use, " ")
		args := cobra.NoArgs
		switch name {
		case "remove", "seed":
			args = cobra.ExactArgs(1)
		case "leak":
			args = cobra.RangeArgs(0, 1)
		}
		c := &cobra.Command{Use: sub.use, Short: sub.short, Args: args}
		run := simulateAdminFlags(name, c.Flags())
		c.Flags().SortFlags = false
		c.RunE = func(cmd *cobra.Command, args []string) error { return run(cmd.Context(), args, stdout) }
		cmd.AddCommand(c)
	}
	return cmd
}

// simulateOptions are flow simulate's flags.
type simulateOptions struct {
	nicoAddr, psmAddr string
	seedFile          string
	demo              bool
	powerDelay, phase time.Duration
}

func runSimulate(ctx context.Context, o simulateOptions, stdout io.Writer) error {
	var devs []nicosim.Device
	if o.demo {
		devs = demoFleet()
	}
	if o.seedFile != "" {
		data, err := os.ReadFile(o.seedFile)
		if err != nil {
			return err
		}
		var more []nicosim.Device
		if err := json.Unmarshal(data, &more); err != nil {
			return usageError(fmt.Errorf("--seed %s: %w", o.seedFile, err))
		}
		devs = append(devs, more...)
	}
	sims, err := startSimulators(simOptions{nicoAddr: o.nicoAddr, psmAddr: o.psmAddr, powerDelay: o.powerDelay, firmwarePhase: o.phase})
	if err != nil {
		return err
	}
	if err := sims.Seed(devs); err != nil {
		_ = sims.Close(context.WithoutCancel(ctx))
		return usageError(err)
	}
	fmt.Fprintf(stdout, `
  Simulators are running (%d devices seeded)

  NICo Core  NICO_CORE_API_URL=%[2]s   admin %[4]s/admin/
  PSM        PSM_API_URL=%[3]s   admin %[5]s/admin/

  Try it:
    grpcurl -plaintext %[2]s list
    grpcurl -plaintext %[3]s list
    flow simulate journal --admin %[4]s

`, len(devs), sims.nicoSrv.Addr(), sims.psmSrv.Addr(), sims.nicoSrv.URL(), sims.psmSrv.URL())
	<-ctx.Done()
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return sims.Close(shutdown)
}

// simulateAdminFlags declares the flags of an admin subcommand (fault,
// journal, remove, seed) and returns the function that runs it.
func simulateAdminFlags(cmd string, fs *pflag.FlagSet) func(ctx context.Context, args []string, stdout io.Writer) error {
	admin := fs.String("admin", "http://127.0.0.1:50061", "simulator base URL")
	f := new(sim.Fault)
	var clear, list bool
	var latency time.Duration
	method := fs.String("method", "", "RPC name, e.g. ComponentPowerControl (empty: any)")
	if cmd == "fault" {
		fs.StringVar((*string)(&f.Kind), "kind", "", "error, latency, item, drop, fail, stuck, cancel, lie, empty, mixed or garbage")
		fs.StringVar(&f.Device, "device", "", "device ID or MAC (empty: any)")
		fs.StringVar(&f.Component, "component", "", "firmware sub-component whose job a fail, stuck, cancel or lie fault acts on, e.g. bios (empty: any)")
		fs.StringVar(&f.Code, "code", "", "gRPC code for kind error, e.g. unavailable")
		fs.StringVar(&f.Status, "status", "", "item status: not_found, invalid_argument, internal_error, unavailable")
		fs.StringVar(&f.Phase, "phase", "", "job phase for fail, stuck, cancel: queued, in_progress, verifying")
		fs.DurationVar(&latency, "latency", 0, "added latency for kind latency")
		fs.IntVar(&f.Times, "times", 0, "fire at most N times (0: always)")
		fs.Float64Var(&f.Rate, "rate", 0, "fire with this probability (0: always)")
		fs.StringVar(&f.Message, "message", "", "error text")
		fs.BoolVar(&clear, "clear", false, "remove every fault")
		fs.BoolVar(&list, "list", false, "list active faults")
	}
	if cmd == "leak" {
		fs.BoolVar(&clear, "clear", false, "clear the device's leak alert instead of raising it")
		fs.BoolVar(&list, "list", false, "list the leaking devices")
	}
	return func(ctx context.Context, args []string, stdout io.Writer) error {
		return simulateAdmin(ctx, cmd, args, *admin, *method, *f, latency, clear, list, stdout)
	}
}

func simulateAdmin(ctx context.Context, cmd string, args []string, admin, method string, f sim.Fault, latency time.Duration, clear, list bool, stdout io.Writer) error {
	base := strings.TrimSuffix(admin, "/") + "/admin"
	var (
		verb, url string
		body      []byte
	)
	switch {
	case cmd == "journal":
		verb, url = http.MethodGet, base+"/journal"
		if method != "" {
			url += "?method=" + method
		}
	case cmd == "remove":
		verb, url = http.MethodDelete, base+"/devices/"+args[0]
	case cmd == "seed":
		data, err := os.ReadFile(args[0])
		if err != nil {
			return err
		}
		verb, url, body = http.MethodPost, base+"/devices", data
	case cmd == "leak" && list && len(args) == 0:
		verb, url = http.MethodGet, base+"/leaks"
	case cmd == "leak" && len(args) == 1 && !list:
		verb, url = http.MethodPut, base+"/leaks/"+args[0]
		if clear {
			verb = http.MethodDelete
		}
	case cmd == "leak":
		return usageError(errors.New("simulate leak: name a DEVICE (ID or BMC MAC), or give --list alone"))
	case cmd == "fault" && clear:
		verb, url = http.MethodDelete, base+"/faults"
	case cmd == "fault" && list:
		verb, url = http.MethodGet, base+"/faults"
	case cmd == "fault":
		f.Method, f.Latency = method, sim.Duration(latency)
		if err := f.Validate(); err != nil {
			return usageError(err)
		}
		body, _ = json.Marshal(f)
		verb, url = http.MethodPost, base+"/faults"
	default:
		return usageError(fmt.Errorf("simulate %s: wrong arguments", cmd))
	}
	req, err := http.NewRequestWithContext(ctx, verb, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("simulator admin: %w", err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return fmt.Errorf("simulator admin: %s: %s", resp.Status, strings.TrimSpace(string(out)))
	}
	if len(out) > 0 {
		var pretty bytes.Buffer
		if json.Indent(&pretty, out, "", "  ") == nil {
			out = append(pretty.Bytes(), '\n')
		}
		_, err = stdout.Write(out)
		return err
	}
	fmt.Fprintln(stdout, "ok")
	return nil
}
