package proto_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// clientConstructor matches a call of a client constructor of a
// generated connect package: protoc-gen-connect-go's (NewFlowClient,
// NewForgeClient, ...) or its lean counterpart (NewFlowLeanClient).
var clientConstructor = regexp.MustCompile(`connect\.New(\w+)Client\(`)

// TestProgramsUseLeanClients: the flow program's code (every non-test Go
// file outside proto/gen) makes its clients with the lean constructors:
// each generated client costs the binary about 40 functions per method
// (package lean), 8 MB of the image in all. Tests may use either.
func TestProgramsUseLeanClients(t *testing.T) {
	var offenders []string
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "gen", ".git", "node_modules", "bin", ".flow":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range clientConstructor.FindAllStringSubmatch(line, -1) {
				if !strings.HasSuffix(m[1], "Lean") && !strings.Contains(path, "opstest") {
					offenders = append(offenders, path+":"+strconv.Itoa(i+1)+": "+strings.TrimSpace(line))
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(offenders) > 0 {
		t.Errorf("use the generated New<Service>LeanClient instead (package lean):\n%s", strings.Join(offenders, "\n"))
	}
}
