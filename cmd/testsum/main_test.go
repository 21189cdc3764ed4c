package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const stream = `{"Action":"start","Package":"p/a"}
{"Action":"run","Package":"p/a","Test":"TestFast"}
{"Action":"output","Package":"p/a","Test":"TestFast","Output":"quiet\n"}
{"Action":"pass","Package":"p/a","Test":"TestFast","Elapsed":0.1}
{"Action":"run","Package":"p/a","Test":"TestSlow"}
{"Action":"pass","Package":"p/a","Test":"TestSlow/sub","Elapsed":4}
{"Action":"pass","Package":"p/a","Test":"TestSlow","Elapsed":5}
{"Action":"output","Package":"p/a","Output":"ok  \tp/a\t5.2s\n"}
{"Action":"pass","Package":"p/a","Elapsed":5.2}
{"Action":"start","Package":"p/b"}
{"Action":"run","Package":"p/b","Test":"TestBroken"}
{"Action":"output","Package":"p/b","Test":"TestBroken","Output":"    b_test.go:9: want 1, got 2\n"}
{"Action":"fail","Package":"p/b","Test":"TestBroken","Elapsed":2}
{"Action":"output","Package":"p/b","Output":"FAIL\n"}
{"Action":"fail","Package":"p/b","Elapsed":2.1}
{"Action":"start","Package":"p/c"}
{"Action":"output","Package":"p/c","Output":"?   \tp/c\t[no test files]\n"}
{"Action":"skip","Package":"p/c","Elapsed":0}
`

func TestSummary(t *testing.T) {
	var out strings.Builder
	require.False(t, run(strings.NewReader(stream), &out, 2))
	got := out.String()
	require.Contains(t, got, "ok  \tp/a\t5.2s")
	require.Contains(t, got, "--- FAIL: p/b TestBroken (2.00s)\n        b_test.go:9: want 1, got 2")
	require.Contains(t, got, "FAIL\tp/b\t2.1s")
	require.Contains(t, got, "?   \tp/c\t[no test files]")
	require.NotContains(t, got, "quiet", "a passing test's output stays out")
	require.Contains(t, got, "slowest tests (of 3):\n      5.0s  p/a TestSlow\n      2.0s  p/b TestBroken\n")
	require.NotContains(t, got, "TestSlow/sub", "subtests are inside their parents' time")
	require.Contains(t, got, "FAILED (2):\n  p/b TestBroken\n  p/b\n")
}

func TestSummaryPass(t *testing.T) {
	var out strings.Builder
	pass := strings.Join(strings.Split(stream, "\n")[:9], "\n")
	require.True(t, run(strings.NewReader(pass), &out, 10))
	require.Contains(t, out.String(), "PASS: 1 packages, 2 tests")
}

func TestSummaryUnfinished(t *testing.T) {
	// A package that starts and never ends (the binary killed) fails.
	var out strings.Builder
	require.False(t, run(strings.NewReader(`{"Action":"start","Package":"p/x"}
{"Action":"output","Package":"p/x","Output":"panic: test timed out after 25m0s\n"}
`), &out, 10))
	require.Contains(t, out.String(), "panic: test timed out")
	require.Contains(t, out.String(), "p/x (no result: killed or timed out?)")
}

func TestSummaryBuildFailure(t *testing.T) {
	var out strings.Builder
	require.False(t, run(strings.NewReader(`{"ImportPath":"p/y [p/y.test]","Action":"build-output","Output":"y.go:3:1: syntax error\n"}
{"ImportPath":"p/y [p/y.test]","Action":"build-fail"}
{"Action":"start","Package":"p/y"}
{"Action":"output","Package":"p/y","Output":"FAIL\tp/y [build failed]\n"}
{"Action":"fail","Package":"p/y","Elapsed":0,"FailedBuild":"p/y [p/y.test]"}
`), &out, 10))
	require.Contains(t, out.String(), "y.go:3:1: syntax error")
	require.Contains(t, out.String(), "FAIL\tp/y")
}

func TestSummaryPackageFailsWithNoTestFailing(t *testing.T) {
	// The binary exited non-zero after its tests passed: what it printed
	// last is shown, the passing test's lines included.
	var out strings.Builder
	require.False(t, run(strings.NewReader(`{"Action":"start","Package":"p/z"}
{"Action":"run","Package":"p/z","Test":"TestOK"}
{"Action":"output","Package":"p/z","Test":"TestOK","Output":"cleanup: cluster did not stop\n"}
{"Action":"pass","Package":"p/z","Test":"TestOK","Elapsed":1}
{"Action":"output","Package":"p/z","Output":"FAIL\n"}
{"Action":"fail","Package":"p/z","Elapsed":1.2}
`), &out, 10))
	require.Contains(t, out.String(), "p/z failed with no test failing; its last 2 output lines:\n    TestOK: cleanup: cluster did not stop\n    (package): FAIL\n")
	require.Contains(t, out.String(), "FAILED (1):\n  p/z\n")
}
