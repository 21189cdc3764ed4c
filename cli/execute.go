package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// usageError marks errors caused by a bad command line: the process exits
// with status 2 and the message is followed by a hint.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// UsageError marks err as bad usage (exit status 2, see ExitCode).
func UsageError(err error) error { return usageError{err} }

// hinted is a usage error with the hint that follows its message.
type hinted struct {
	usageError
	hint string
}

func (e hinted) Error() string { return e.usageError.Error() + "\n" + e.hint }

// interruptedError is returned when Ctrl-C stops watch or --wait: the tasks
// keep running on the server.
type interruptedError struct{ msg string }

func (e interruptedError) Error() string { return e.msg }

// ExitCode returns the process exit status for an error returned by
// Execute: 2 for bad usage, 130 for an interrupted watch, 3, 4 or 5 when
// rollout watch saw the run end without completing, pause at a phase gate,
// or pause otherwise; 1 otherwise.
func ExitCode(err error) int {
	var ue usageError
	var ie interruptedError
	var re rolloutStopError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		return 2
	case errors.As(err, &ie):
		return 130
	case errors.As(err, &re):
		return re.code
	}
	return 1
}

// Execute runs root with args (without the program name), writing output
// and help to stdout. Errors are returned, not printed: bad usage (unknown
// command or flag, wrong arguments) comes back as a usage error whose
// message ends with a hint naming the command's --help.
func Execute(ctx context.Context, root *cobra.Command, args []string, stdout, stderr io.Writer) error {
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SilenceErrors, root.SilenceUsage = true, true
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	ran := false
	pre := root.PersistentPreRunE
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		ran = true
		if pre != nil {
			return pre(cmd, args)
		}
		return nil
	}
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return nil
	}
	var ue usageError
	if !ran && !errors.As(err, &ue) {
		// cobra's own refusals (unknown command, argument checks) come
		// before any command runs.
		err = usageError{err}
	}
	if errors.As(err, &ue) {
		var h hinted
		if !errors.As(err, &h) {
			path := root.Name()
			if cmd != nil {
				path = cmd.CommandPath()
			}
			return hinted{usageError{err}, fmt.Sprintf("Run '%s --help' for usage.", path)}
		}
	}
	return err
}
