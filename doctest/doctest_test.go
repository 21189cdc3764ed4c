package doctest

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/logtest"
)

func TestParse(t *testing.T) {
	t.Parallel()
	doc := "# t\n\n" +
		"<!-- doctest: run seed=2 expect=\"a b\" expect=c exit=1 timeout=30s -->\n" +
		"```sh\nflow rack list\n```\n\n" +
		"<!-- doctest: illustrative needs a real NICo -->\n" +
		"````console\n$ flow x\n```\n````\n" +
		"```json\n{}\n```\n"
	blocks, err := Parse("t.md", strings.NewReader(doc))
	require.NoError(t, err)
	require.Len(t, blocks, 3)
	require.Equal(t, Block{File: "t.md", Line: 4, Info: "sh", Text: "flow rack list\n", Kind: KindRun,
		Seed: 2, Exit: 1, Expect: []string{"a b", "c"}, Timeout: 30 * time.Second}, blocks[0])
	require.Equal(t, KindIllustrative, blocks[1].Kind)
	require.Equal(t, "$ flow x\n```\n", blocks[1].Text)
	require.True(t, blocks[1].IsShell())
	require.Equal(t, KindNone, blocks[2].Kind)
	require.False(t, blocks[2].IsShell())

	for name, bad := range map[string]string{
		"bare fence":       "```\nx\n```\n",
		"unknown kind":     "<!-- doctest: maybe -->\n```sh\nx\n```\n",
		"unknown option":   "<!-- doctest: run color=red -->\n```sh\nx\n```\n",
		"run on console":   "<!-- doctest: run -->\n```console\n$ x\n```\n",
		"marker then text": "<!-- doctest: run -->\n\n```sh\nx\n```\n",
		"unclosed quote":   "<!-- doctest: run expect=\"x -->\n```sh\nx\n```\n",
		"unclosed fence":   "```sh\nx\n",
		"bad seed":         "<!-- doctest: run seed=x -->\n```sh\nx\n```\n",
	} {
		_, err := Parse("bad.md", strings.NewReader(bad))
		require.Error(t, err, name)
	}
}

// docFiles are the documents whose shell blocks the harness checks: the
// README and every file in docs/.
func docFiles(t *testing.T, root string) []string {
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	return append([]string{filepath.Join(root, "README.md")}, files...)
}

// TestDocs runs every `doctest: run` block of README.md and docs/*.md, one
// flow dev per document (built from this tree, own state folder and ports),
// the document's blocks in order, and fails on a shell block that is neither
// run nor marked illustrative. docs/doctest.md is the contributors' guide.
func TestDocs(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	byFile := map[string][]Block{}
	var problems []string
	files := docFiles(t, root)
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		blocks, err := Parse(rel, bytes.NewReader(src))
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		seed := -1
		for _, b := range blocks {
			switch {
			case b.IsShell() && b.Kind == KindNone:
				problems = append(problems, b.Where()+": shell block without a doctest marker: mark it <!-- doctest: run … --> or <!-- doctest: illustrative … --> (docs/doctest.md)")
			case b.Kind == KindRun:
				if b.Seed >= 0 && seed >= 0 && b.Seed != seed {
					problems = append(problems, fmt.Sprintf("%s: seed=%d, but an earlier block of the file says seed=%d (one flow dev per file)", b.Where(), b.Seed, seed))
				}
				if b.Seed >= 0 {
					seed = b.Seed
				}
				byFile[rel] = append(byFile[rel], b)
			}
		}
	}
	require.Empty(t, problems, "documents:\n%s", strings.Join(problems, "\n"))
	for _, f := range []string{"README.md", "docs/tasks.md", "docs/schedules.md", "docs/rollouts.md", "docs/event-rules.md", "docs/inventory-sync.md"} {
		require.NotEmpty(t, byFile[f], "%s must have examples the harness runs", f)
	}

	for _, tool := range []string{"bash", "curl", "jq"} {
		_, err := exec.LookPath(tool)
		require.NoError(t, err, "the documents' examples need %s on PATH (.ci/run installs it)", tool)
	}
	bin := buildFlow(t, root)
	work := t.TempDir()
	require.NoError(t, os.Symlink(filepath.Join(root, "examples"), filepath.Join(work, "examples")))

	// The documents run side by side, each on its own flow dev: most of
	// their time is spent waiting for the simulators (firmware jobs take
	// 10 s a phase), not on the CPU. DOCTEST_FILES (comma-separated paths
	// such as docs/tasks.md) runs only those documents.
	only := map[string]bool{}
	for _, f := range strings.Split(os.Getenv("DOCTEST_FILES"), ",") {
		if f != "" {
			only[f] = true
		}
	}
	var (
		wg    sync.WaitGroup
		slots = make(chan struct{}, maxDevs)
		mu    sync.Mutex
		errs  = map[string]error{}
	)
	// The longest documents first, so that they do not start last.
	order := slices.Sorted(maps.Keys(byFile))
	slices.SortStableFunc(order, func(a, b string) int {
		return cmp.Compare(longRank(a), longRank(b))
	})
	for _, file := range order {
		blocks := byFile[file]
		if len(only) > 0 && !only[file] {
			continue
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			dir := filepath.Join(work, strings.NewReplacer("/", "_", ".", "_").Replace(file))
			err := runFile(t, bin, root, dir, blocks)
			mu.Lock()
			errs[file] = err
			mu.Unlock()
		})
	}
	wg.Wait()
	for file, err := range errs {
		if err != nil {
			t.Errorf("%s: %v", file, err)
		}
	}
}

// longRank orders the documents whose blocks take longest (the README's
// tour: power, firmware, bring-up, decommission) first.
func longRank(file string) int {
	switch file {
	case "README.md":
		return 0
	case "docs/tasks.md":
		return 1
	}
	return 2
}

// maxDevs is how many documents (flow devs) run at once.
const maxDevs = 4

// runFile runs one document's blocks in order, in dir, on a flow dev of its own.
func runFile(t *testing.T, bin, root, dir string, blocks []Block) error {
	seed := 0
	for _, b := range blocks {
		if b.Seed >= 0 {
			seed = b.Seed
		}
	}
	start := time.Now()
	d, err := startDev(t, bin, seed)
	// The API port is free when picked, not when flow dev binds it: on a
	// busy machine another process can take it in between. Pick again.
	for try := 1; err != nil && strings.Contains(err.Error(), "address already in use") && try < 3; try++ {
		t.Logf("%s: flow dev's port was taken before it bound it; starting it again", blocks[0].File)
		d, err = startDev(t, bin, seed)
	}
	if err != nil {
		return err
	}
	defer d.stop()
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	if err := os.Symlink(filepath.Join(root, "examples"), filepath.Join(dir, "examples")); err != nil {
		return err
	}
	t.Logf("%s: flow dev --seed %d answered in %s", blocks[0].File, seed, time.Since(start).Round(time.Millisecond))
	for _, b := range blocks {
		if err := runBlock(t, d, dir, b); err != nil {
			return err
		}
	}
	return nil
}

// buildFlow builds cmd/flow into a temporary bin folder and returns it.
func buildFlow(t *testing.T, root string) string {
	bin := t.TempDir()
	cmd := exec.Command("go", "build", "-o", filepath.Join(bin, "flow"), "./cmd/flow")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build ./cmd/flow: %s", out)
	return bin
}

// dev is one running flow dev.
type dev struct {
	bin     string // folder holding the flow binary
	addr    string // API, host:port
	coreURL string // NICo Core simulator, http://host:port
	env     []string
	log     *syncBuffer
	stop    func() // stops flow dev and removes its state; idempotent
}

// cleanEnv is the environment without variables that would steer flow dev
// or the CLI away from the harness's own settings.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "FLOW_"), strings.HasPrefix(k, "NICO_"), strings.HasPrefix(k, "PSM_"),
			strings.HasPrefix(k, "DB_"), strings.HasPrefix(k, "OTEL_"), k == "DATABASE_URL", k == "CERTDIR",
			k == "ALLOW_INSECURE_GRPC", k == "COMPONENT_MANAGER_CONFIG", k == "PATH":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// freePort returns a loopback address with a port free at the moment.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

var coreURLRe = regexp.MustCompile(`nico_core_api_url=(http://127\.0\.0\.1:\d+)`)

// startDev starts flow dev --seed seed on free ports in a fresh state folder,
// waits until it answers, and stops it when the test ends.
func startDev(t *testing.T, bin string, seed int) (*dev, error) {
	state, err := os.MkdirTemp("", "flow-doctest-")
	if err != nil {
		return nil, err
	}
	// PostgreSQL runs as the postgres user when we are root: let it reach the folder.
	if err := os.Chmod(state, 0o755); err != nil {
		return nil, err
	}
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	d := &dev{bin: bin, addr: addr, log: &syncBuffer{}}
	d.env = append(cleanEnv(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	// flow dev picks its admin listener's port itself, at bind time.
	devEnv := append(d.env[:len(d.env):len(d.env)], "FLOW_FIRMWARE_POLL_INTERVAL=1s")
	cmd := exec.Command(filepath.Join(bin, "flow"), "dev", "--data-dir", state, "--listen", d.addr, "--seed", fmt.Sprint(seed), "--sim-phase", "1s")
	cmd.Env = devEnv
	cmd.Stdout, cmd.Stderr = d.log, d.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	d.stop = sync.OnceFunc(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
			t.Errorf("flow dev did not stop within 30s of SIGINT; log:\n%s", d.log.String())
		}
		if p, err := os.ReadFile(filepath.Join(state, "pgdata")); err == nil {
			_ = os.RemoveAll(strings.TrimSpace(string(p)))
		}
		_ = os.RemoveAll(state)
	})
	t.Cleanup(d.stop)

	deadline := time.Now().Add(2 * time.Minute)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		select {
		case err := <-done:
			done <- err // for the cleanup
			return nil, fmt.Errorf("flow dev exited before it answered: %v; log:\n%s", err, d.log.String())
		default:
		}
		resp, err := client.Post("http://"+d.addr+"/grpc.health.v1.Health/Check", "application/json", strings.NewReader("{}"))
		if err == nil {
			body := new(bytes.Buffer)
			_, _ = body.ReadFrom(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(body.String(), "SERVING") {
				break
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("flow dev did not answer within 2m; log:\n%s", d.log.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	m := coreURLRe.FindStringSubmatch(d.log.String())
	if m == nil {
		return nil, fmt.Errorf("flow dev's log names no NICo Core simulator URL:\n%s", d.log.String())
	}
	d.coreURL = m[1]
	return d, nil
}

// Substitutions the harness makes in a block before running it
// (docs/doctest.md): the documents' default address becomes the dev's, the
// placeholder NNNNN the Core simulator's port.
func (d *dev) substitute(s string) string {
	return strings.NewReplacer(
		"http://127.0.0.1:NNNNN", d.coreURL,
		"127.0.0.1:50051", d.addr,
	).Replace(s)
}

// runBlock runs one block with bash (errexit, pipefail) in dir and checks its
// exit status and output.
func runBlock(t *testing.T, d *dev, dir string, b Block) error {
	script := "set -eo pipefail\n" + d.substitute(b.Text)
	ctx, cancel := context.WithTimeout(t.Context(), b.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(d.env[:len(d.env):len(d.env)], "FLOW_SERVER="+d.addr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	code := cmd.ProcessState.ExitCode()
	took := time.Since(start).Round(time.Millisecond)
	var fails []string
	if ctx.Err() != nil {
		fails = append(fails, fmt.Sprintf("timed out after %s", b.Timeout))
	} else if code != b.Exit {
		fails = append(fails, fmt.Sprintf("exit status %d (%v), want %d", code, err, b.Exit))
	}
	for _, e := range b.Expect {
		if !strings.Contains(out.String(), d.substitute(e)) {
			fails = append(fails, fmt.Sprintf("output lacks %q", e))
		}
	}
	if len(fails) > 0 {
		return fmt.Errorf("%s: %s\n--- block (as run):\n%s--- output:\n%s--- flow dev log (last 4 KiB):\n%s",
			b.Where(), strings.Join(fails, "; "), script, out.String(), tail(d.log, 4096))
	}
	t.Logf("%s: ok in %s", b.Where(), took)
	return nil
}

// syncBuffer is a bytes.Buffer safe for a child's writes and the test's reads.
type syncBuffer = logtest.Buffer

// tail returns the last n bytes of s.
func tail(s *syncBuffer, n int) string {
	str := s.String()
	if len(str) > n {
		return str[len(str)-n:]
	}
	return str
}
