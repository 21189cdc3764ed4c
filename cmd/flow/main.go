// Command flow is Flow's single binary: the server (flow serve), the embedded
// development default (flow dev), schema management (flow db) and the CLI.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/nicoflow/flow/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := app.Run(ctx, os.Args, os.Getenv)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "flow:", err)
		os.Exit(app.ExitCode(err))
	}
}
