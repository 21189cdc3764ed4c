package nico_test

import (
	"errors"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/nico"
)

// TestErrorLabel: a backend that answered with a failure of its own is
// "backend failed", not "unreachable"; the class stays ErrUnreachable.
func TestErrorLabel(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		err  *nico.Error
		want string
	}{
		{"Internal", &nico.Error{Method: "M", Class: nico.ErrUnreachable, Msg: "boom", Err: connect.NewError(connect.CodeInternal, errors.New("boom"))}, "backend failed (internal): M: boom"},
		{"Unknown", &nico.Error{Method: "M", Class: nico.ErrUnreachable, Msg: "x", Err: connect.NewError(connect.CodeUnknown, errors.New("x"))}, "backend failed (unknown): M: x"},
		{"Item", &nico.Error{Method: "M", Device: "d1", Class: nico.ErrUnreachable, Msg: "INTERNAL_ERROR"}, "backend failed: M d1: INTERNAL_ERROR"},
		{"Unavailable", &nico.Error{Method: "M", Class: nico.ErrUnreachable, Msg: "refused", Err: connect.NewError(connect.CodeUnavailable, errors.New("refused"))}, "backend unreachable: M: refused"},
		{"Deadline", &nico.Error{Method: "M", Class: nico.ErrUnreachable, Msg: "slow", Err: connect.NewError(connect.CodeDeadlineExceeded, errors.New("slow"))}, "backend unreachable: M: slow"},
		{"Rejected", &nico.Error{Method: "M", Class: nico.ErrRejected, Msg: "no", Err: connect.NewError(connect.CodeInvalidArgument, errors.New("no"))}, "request rejected: M: no"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.err.Error())
			require.Equal(t, tt.err.Class == nico.ErrUnreachable, errors.Is(tt.err, nico.ErrUnreachable))
		})
	}
}
