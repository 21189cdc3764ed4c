package psm_test

import (
	"errors"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/psm"
)

// TestErrorLabel: a backend that answered with a failure of its own is
// "backend failed", not "unreachable"; the class stays ErrUnreachable.
func TestErrorLabel(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		err  *psm.Error
		want string
	}{
		{"Internal", &psm.Error{Method: "M", Class: psm.ErrUnreachable, Msg: "boom", Err: connect.NewError(connect.CodeInternal, errors.New("boom"))}, "backend failed (internal): M: boom"},
		{"Unknown", &psm.Error{Method: "M", Class: psm.ErrUnreachable, Msg: "x", Err: connect.NewError(connect.CodeUnknown, errors.New("x"))}, "backend failed (unknown): M: x"},
		{"Item", &psm.Error{Method: "M", Device: "d1", Class: psm.ErrUnreachable, Msg: "INTERNAL_ERROR"}, "backend failed: M d1: INTERNAL_ERROR"},
		{"Unavailable", &psm.Error{Method: "M", Class: psm.ErrUnreachable, Msg: "refused", Err: connect.NewError(connect.CodeUnavailable, errors.New("refused"))}, "backend unreachable: M: refused"},
		{"Deadline", &psm.Error{Method: "M", Class: psm.ErrUnreachable, Msg: "slow", Err: connect.NewError(connect.CodeDeadlineExceeded, errors.New("slow"))}, "backend unreachable: M: slow"},
		{"Rejected", &psm.Error{Method: "M", Class: psm.ErrRejected, Msg: "no", Err: connect.NewError(connect.CodeInvalidArgument, errors.New("no"))}, "request rejected: M: no"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.err.Error())
			require.Equal(t, tt.err.Class == psm.ErrUnreachable, errors.Is(tt.err, psm.ErrUnreachable))
		})
	}
}
