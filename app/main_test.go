package app

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
)

// TestMain lets a test re-run this binary as `flow serve` (FLOW_TEST_CHILD=
// serve), so crash tests can kill -9 a real server process.
func TestMain(m *testing.M) {
	if os.Getenv("FLOW_TEST_CHILD") == "serve" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := Run(ctx, []string{"flow", "serve"}, os.Getenv)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "flow:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}
