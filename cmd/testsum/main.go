// Command testsum reads `go test -json` on stdin and writes what a person
// reads: one line per package, the whole output of every failing test, build
// errors, and at the end the slowest tests, so the next slow test is seen
// when it lands. It exits 1 when a test or a build failed, or when the
// stream ended before a package reported.
//
//	go test -json ./... | go run ./cmd/testsum -slowest 10
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// event is one line of test2json output.
type event struct {
	Time        time.Time
	Action      string
	Package     string
	ImportPath  string // build events
	Test        string
	Elapsed     float64
	Output      string
	FailedBuild string
}

type key struct{ pkg, test string }

type result struct {
	pkg, test string
	elapsed   float64
}

// summary accumulates a run.
type summary struct {
	out      io.Writer
	output   map[key][]string // buffered output per test, and per package (test "")
	started  map[string]bool  // packages that started and have not ended
	failed   []string         // failed tests and packages, in order
	tests    []result         // finished top-level tests
	packages int
	// tail keeps each running package's last output lines, its passing
	// tests' included, and failedIn counts its failed tests: a package
	// that fails with none failed (a test binary that exited non-zero
	// after its tests, a failure report test2json could not attribute)
	// shows what it printed last.
	tail     map[string][]string
	failedIn map[string]int
}

// tailLines is how many of a package's last output lines are kept.
const tailLines = 60

func newSummary(out io.Writer) *summary {
	return &summary{out: out, output: map[key][]string{}, started: map[string]bool{}, tail: map[string][]string{}, failedIn: map[string]int{}}
}

func (s *summary) add(e event) {
	k := key{e.Package, e.Test}
	switch e.Action {
	case "start":
		s.started[e.Package] = true
	case "output":
		s.output[k] = append(s.output[k], e.Output)
		t := append(s.tail[e.Package], cmp.Or(e.Test, "(package)")+": "+e.Output)
		s.tail[e.Package] = t[max(0, len(t)-tailLines):]
	case "build-output":
		fmt.Fprint(s.out, e.Output)
	case "build-fail":
		s.failed = append(s.failed, cmp.Or(e.ImportPath, e.Package)+" (build)")
	case "pass", "skip":
		if e.Test == "" {
			s.endPackage(e)
			return
		}
		if !strings.Contains(e.Test, "/") {
			s.tests = append(s.tests, result{e.Package, e.Test, e.Elapsed})
		}
		delete(s.output, k)
	case "fail":
		if e.Test == "" {
			s.endPackage(e)
			return
		}
		if !strings.Contains(e.Test, "/") {
			s.tests = append(s.tests, result{e.Package, e.Test, e.Elapsed})
		}
		s.failed = append(s.failed, e.Package+" "+e.Test)
		s.failedIn[e.Package]++
		fmt.Fprintf(s.out, "--- FAIL: %s %s (%.2fs)\n", e.Package, e.Test, e.Elapsed)
		for _, line := range s.output[k] {
			fmt.Fprint(s.out, "    ", line)
		}
		delete(s.output, k)
	}
}

func (s *summary) endPackage(e event) {
	delete(s.started, e.Package)
	s.packages++
	k := key{e.Package, ""}
	switch {
	case e.Action == "fail":
		// The package's own output holds panics, timeouts and TestMain
		// failures; what any test printed without failing stays out.
		for _, line := range s.output[k] {
			fmt.Fprint(s.out, line)
		}
		if e.FailedBuild == "" {
			s.failed = append(s.failed, e.Package)
			if s.failedIn[e.Package] == 0 {
				fmt.Fprintf(s.out, "%s failed with no test failing; its last %d output lines:\n", e.Package, len(s.tail[e.Package]))
				for _, line := range s.tail[e.Package] {
					fmt.Fprint(s.out, "    ", line)
				}
			}
		}
		fmt.Fprintf(s.out, "FAIL\t%s\t%.1fs\n", e.Package, e.Elapsed)
	case e.Action == "skip" || noTests(s.output[k]):
		fmt.Fprintf(s.out, "?   \t%s\t[no test files]\n", e.Package)
	default:
		fmt.Fprintf(s.out, "ok  \t%s\t%.1fs\n", e.Package, e.Elapsed)
	}
	delete(s.output, k)
	delete(s.tail, e.Package)
	delete(s.failedIn, e.Package)
}

func noTests(lines []string) bool {
	for _, l := range lines {
		if strings.Contains(l, "[no test files]") {
			return true
		}
	}
	return false
}

// finish writes the slowest tests and the verdict; it returns whether the
// run passed.
func (s *summary) finish(slowest int) bool {
	for pkg := range s.started {
		s.failed = append(s.failed, pkg+" (no result: killed or timed out?)")
		for _, line := range s.output[key{pkg, ""}] {
			fmt.Fprint(s.out, line)
		}
	}
	if slowest > 0 && len(s.tests) > 0 {
		slices.SortFunc(s.tests, func(a, b result) int {
			return cmp.Or(cmp.Compare(b.elapsed, a.elapsed), cmp.Compare(a.pkg, b.pkg), cmp.Compare(a.test, b.test))
		})
		fmt.Fprintf(s.out, "\nslowest tests (of %d):\n", len(s.tests))
		for _, r := range s.tests[:min(slowest, len(s.tests))] {
			fmt.Fprintf(s.out, "  %7.1fs  %s %s\n", r.elapsed, r.pkg, r.test)
		}
	}
	if len(s.failed) > 0 {
		fmt.Fprintf(s.out, "\nFAILED (%d):\n", len(s.failed))
		for _, f := range s.failed {
			fmt.Fprintf(s.out, "  %s\n", f)
		}
		return false
	}
	fmt.Fprintf(s.out, "\nPASS: %d packages, %d tests\n", s.packages, len(s.tests))
	return true
}

func run(in io.Reader, out io.Writer, slowest int) bool {
	s := newSummary(out)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			// Not an event: go test's own messages (a vet or setup
			// failure) pass through.
			fmt.Fprintf(out, "%s\n", line)
			if len(line) > 0 {
				s.failed = append(s.failed, "go test: "+string(line))
			}
			continue
		}
		s.add(e)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(out, "testsum:", err)
		return false
	}
	return s.finish(slowest)
}

func main() {
	slowest := flag.Int("slowest", 10, "how many of the slowest tests to list")
	flag.Parse()
	if !run(os.Stdin, os.Stdout, *slowest) {
		os.Exit(1)
	}
}
