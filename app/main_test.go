package app

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"testing"
)

// TestMain lets a test re-run this binary as `flow serve` (FLOW_TEST_CHILD=
// serve), so crash tests can kill -9 a real server process, or as `flow
// dev ARGS` (FLOW_TEST_CHILD=dev, the binary's arguments).
func TestMain(m *testing.M) {
	if child := os.Getenv("FLOW_TEST_CHILD"); child == "serve" || child == "dev" {
		args := []string{"flow", "serve"}
		if child == "dev" {
			args = append([]string{"flow", "dev"}, os.Args[1:]...)
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := Run(ctx, args, os.Getenv)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "flow:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	flag.Parse()
	setDefaultParallel()
	os.Exit(m.Run())
}

// setDefaultParallel raises how many of this package's parallel tests run
// at once to parallelTests, unless -test.parallel (go test -parallel) says
// otherwise. Go's default is GOMAXPROCS, two on a two-core CI machine, yet
// these tests spend most of their time waiting, not computing: on simulated
// power and firmware phases, engine leases after a kill -9, PostgreSQL
// restarts, idle minutes (the test process and its children, PostgreSQL
// aside, used about a third of a core over a 15-minute run, two tests at a
// time). Eight at once overloaded two shared cores (flow dev starts and
// PostgreSQL connections timed out); the tests starting flow dev take a
// devSlot besides. Under make soak (FLOW_SOAK) Go's default stays: the long
// forms of the kill tests are heavier and the soak has no time target.
func setDefaultParallel() {
	if os.Getenv("FLOW_SOAK") != "" {
		return
	}
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", strconv.Itoa(max(parallelTests, runtime.GOMAXPROCS(0))))
	}
}

// soakOnly skips t outside make soak (FLOW_SOAK=1). The longest kill,
// restart and idle tests live there (each took 25-85 s of make test), with
// their long forms where they have one; CI runs make soak after make test,
// so every test still runs on every change. Shorter crash tests (kill -9
// during a power-on or a firmware upgrade, PostgreSQL restarts and
// failover, one of two servers killed) stay in make test.
func soakOnly(t *testing.T) {
	t.Helper()
	if os.Getenv("FLOW_SOAK") == "" {
		t.Skip("long kill/restart/idle test: runs under make soak (FLOW_SOAK=1), which CI runs after make test")
	}
}

// parallelTests is the package's default -test.parallel.
const parallelTests = 4
