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
	os.Exit(m.Run())
}
