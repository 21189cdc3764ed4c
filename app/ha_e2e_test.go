package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
	"github.com/nicoflow/flow/sim/nicosim"
)

// The Patroni chaos test (make ha-test, FLOW_HA=1): etcd, three
// PostgreSQL members managed by Patroni with synchronous_mode (the
// configuration docs/operations.md gives, read from it), HAProxy (its
// recipe too), two flow serve replicas, first both on every member's
// address with target_session_attrs=read-write, then both through
// HAProxy, and the simulators in the test process. Faults are injected
// one at a time while 200 racks are worked on (ha_workload_e2e_test.go:
// resets, firmware upgrades, a rollout, schedules); after each, every
// acknowledged submission exists and ends, no rack has two tasks, no
// device is reset or upgraded twice unless the step records the call's
// outcome as unknown, the rollout is at its gate or done, every schedule
// fired once per firing time, and exactly one member takes writes.

const haPassword = "flow-ha-test"

// haMember is one Patroni-managed PostgreSQL.
type haMember struct {
	name            string
	pgPort, apiPort int
	dataDir, runDir string
	config          string
	cmd             *exec.Cmd
	done            chan struct{}
}

type haCluster struct {
	t        *testing.T
	dir      string
	etcds    []*etcdMember
	members  []*haMember
	cred     *syscall.Credential
	url      string // Flow's: every member, read-write
	proxy    *exec.Cmd
	proxyURL string // Flow's through HAProxy
}

// etcdMember is one member of the DCS's three.
type etcdMember struct {
	name, client string
	args         []string
	log          string
	cmd          *exec.Cmd
	done         chan struct{}
}

func (e *etcdMember) start(t *testing.T) {
	t.Helper()
	log, err := os.OpenFile(e.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	require.NoError(t, err)
	e.cmd = exec.Command("etcd", e.args...)
	e.cmd.Stdout, e.cmd.Stderr = log, log
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, e.cmd.Start())
	e.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); log.Close(); close(done) }(e.cmd, e.done)
}

func (e *etcdMember) kill() {
	if e.cmd == nil {
		return
	}
	_ = syscall.Kill(-e.cmd.Process.Pid, syscall.SIGKILL)
	<-e.done
	e.cmd = nil
}

func (e *etcdMember) healthy() bool {
	client := &http.Client{Timeout: time.Second}
	res, err := client.Get("http://" + e.client + "/health")
	if err != nil {
		return false
	}
	var h struct {
		Health string `json:"health"`
	}
	_ = json.NewDecoder(res.Body).Decode(&h)
	res.Body.Close()
	return res.StatusCode == http.StatusOK && h.Health == "true"
}

// haPort is a free port below the ephemeral range, so that nothing else
// of the test run takes it while its member is down (dbtest's reason).
func haPort(t *testing.T) int {
	t.Helper()
	for range 200 {
		p := 15000 + rand.IntN(17000)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		_ = l.Close()
		return p
	}
	t.Fatal("no free port")
	return 0
}

// patroniRecipe returns the patroni.yml block of docs/operations.md.
func patroniRecipe(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("../docs/operations.md")
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)<!-- patroni.yml: app/ha_e2e_test.go reads the next yaml block -->\n```yaml\n(.*?)```").FindSubmatch(doc)
	require.NotNil(t, m, "docs/operations.md has the Patroni recipe")
	return string(m[1])
}

func pgBinDir(t *testing.T) string {
	t.Helper()
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	require.NotEmpty(t, dirs, "PostgreSQL server binaries")
	sort.Strings(dirs)
	return dirs[len(dirs)-1]
}

func startHACluster(t *testing.T) *haCluster {
	t.Helper()
	for _, bin := range []string{"patroni", "patronictl", "etcd"} {
		_, err := exec.LookPath(bin)
		require.NoError(t, err, "%s is installed (apt-get install patroni etcd-server)", bin)
	}
	dir, err := os.MkdirTemp("/var/tmp", "flow-ha-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	c := &haCluster{t: t, dir: dir}
	uid, gid := os.Getuid(), os.Getgid()
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		require.NoError(t, err, "PostgreSQL runs as the postgres user")
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	t.Cleanup(c.stop)

	// etcd, three members: losing one keeps the quorum.
	var initial, clients []string
	for i := range 3 {
		e := &etcdMember{name: "e" + itoa(i), client: "127.0.0.1:" + itoa(haPort(t)), log: filepath.Join(dir, "etcd"+itoa(i)+".log")}
		peer := "http://127.0.0.1:" + itoa(haPort(t))
		e.args = []string{"--name", e.name, "--data-dir", filepath.Join(dir, "etcd"+itoa(i)),
			"--listen-client-urls", "http://" + e.client, "--advertise-client-urls", "http://" + e.client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster-state", "new",
			"--initial-cluster-token", filepath.Base(dir), "--enable-v2=true"}
		initial = append(initial, e.name+"="+peer)
		clients = append(clients, e.client)
		c.etcds = append(c.etcds, e)
	}
	for _, e := range c.etcds {
		e.args = append(e.args, "--initial-cluster", strings.Join(initial, ","))
		e.start(t)
	}
	require.Eventually(t, func() bool {
		for _, e := range c.etcds {
			if !e.healthy() {
				return false
			}
		}
		return true
	}, time.Minute, 100*time.Millisecond, "etcd is up")

	recipe := patroniRecipe(t)
	bin := pgBinDir(t)
	var hosts []string
	for i, name := range []string{"pg-a", "pg-b", "pg-c"} {
		m := &haMember{name: name, pgPort: haPort(t), apiPort: haPort(t),
			dataDir: filepath.Join(dir, name, "data"), runDir: filepath.Join(dir, name)}
		require.NoError(t, os.MkdirAll(m.runDir, 0o700))
		require.NoError(t, os.Chown(m.runDir, uid, gid))
		vars := map[string]string{"NAME": name, "HOST": "127.0.0.1", "API_PORT": itoa(m.apiPort), "PG_PORT": itoa(m.pgPort),
			"ETCD_HOSTS": strings.Join(clients, ","), "DATA_DIR": m.dataDir, "BIN_DIR": bin, "RUN_DIR": m.runDir,
			"SUPERUSER_PASSWORD": haPassword, "REPLICATION_PASSWORD": haPassword, "CLIENT_NET": "127.0.0.1/32"}
		conf := os.Expand(recipe, func(k string) string {
			v, ok := vars[k]
			require.True(t, ok, "recipe variable %s", k)
			return v
		})
		m.config = filepath.Join(m.runDir, "patroni.yml")
		require.NoError(t, os.WriteFile(m.config, []byte(conf), 0o644))
		c.members = append(c.members, m)
		hosts = append(hosts, "127.0.0.1:"+itoa(m.pgPort))
		c.startPatroni(m)
		if i == 0 {
			// The first member bootstraps; the others then clone it.
			c.waitRoles(2*time.Minute, 1)
		}
	}
	c.waitRoles(3*time.Minute, 3)
	c.url = "postgres://postgres:" + haPassword + "@" + strings.Join(hosts, ",") + "/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=3"
	_, err = db.Migrate(context.Background(), c.url)
	require.NoError(t, err)
	c.startProxy(t)
	return c
}

// haproxyRecipe returns the haproxy.cfg block of docs/operations.md.
func haproxyRecipe(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("../docs/operations.md")
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)<!-- haproxy.cfg: app/ha_e2e_test.go reads the next block -->\n```text\n(.*?)```").FindSubmatch(doc)
	require.NotNil(t, m, "docs/operations.md has the HAProxy recipe")
	return string(m[1])
}

// startProxy runs HAProxy in front of the members, as docs/operations.md
// configures it: only the member whose Patroni answers /primary 200 gets
// connections, and a member marked down has its sessions shut.
func (c *haCluster) startProxy(t *testing.T) {
	t.Helper()
	port := haPort(t)
	vars := map[string]string{"PROXY_ADDR": "127.0.0.1:" + itoa(port)}
	for i, m := range c.members {
		x := string(rune('A' + i))
		vars["PG_"+x] = "127.0.0.1:" + itoa(m.pgPort)
		vars["API_PORT_"+x] = itoa(m.apiPort)
	}
	conf := os.Expand(haproxyRecipe(t), func(k string) string {
		v, ok := vars[k]
		require.True(t, ok, "recipe variable %s", k)
		return v
	})
	path := filepath.Join(c.dir, "haproxy.cfg")
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o644))
	log, err := os.Create(filepath.Join(c.dir, "haproxy.log"))
	require.NoError(t, err)
	c.proxy = exec.Command("haproxy", "-db", "-f", path)
	c.proxy.Stdout, c.proxy.Stderr = log, log
	c.proxy.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, c.proxy.Start())
	c.proxyURL = "postgres://postgres:" + haPassword + "@127.0.0.1:" + itoa(port) + "/postgres?sslmode=disable&connect_timeout=3"
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, c.proxyURL)
		if err != nil {
			return false
		}
		defer conn.Close(ctx)
		var ro bool
		return conn.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&ro) == nil && !ro
	}, time.Minute, 200*time.Millisecond, "HAProxy leads to the primary")
}

func (c *haCluster) startPatroni(m *haMember) {
	log, err := os.OpenFile(filepath.Join(c.dir, m.name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	require.NoError(c.t, err)
	cmd := exec.Command("patroni", m.config)
	cmd.Env = append(os.Environ(), "HOME="+m.runDir)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: c.cred}
	require.NoError(c.t, cmd.Start())
	m.cmd, m.done = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); log.Close(); close(done) }(m.done)
}

// stop kills everything the cluster started.
func (c *haCluster) stop() {
	for _, m := range c.members {
		if m.cmd != nil {
			_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
			<-m.done
		}
		c.signalPostgres(m, syscall.SIGKILL)
	}
	for _, e := range c.etcds {
		e.kill()
	}
	if c.proxy != nil {
		_ = syscall.Kill(-c.proxy.Process.Pid, syscall.SIGKILL)
		_ = c.proxy.Wait()
	}
	if c.t.Failed() {
		c.t.Logf("Patroni logs and data kept in %s", c.dir)
		return
	}
	_ = os.RemoveAll(c.dir)
}

// postmaster returns the member's postmaster PID (0: none running).
func (c *haCluster) postmaster(m *haMember) int {
	b, err := os.ReadFile(filepath.Join(m.dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return 0
	}
	return pid
}

// children returns the PIDs whose parent is pid.
func children(pid int) []int {
	var out []int
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[1] == itoa(pid) {
			child, _ := strconv.Atoi(strings.Fields(s)[0])
			out = append(out, child)
		}
	}
	return out
}

// signalPostgres sends sig to the member's postmaster and its children.
func (c *haCluster) signalPostgres(m *haMember, sig syscall.Signal) {
	pm := c.postmaster(m)
	if pm == 0 {
		return
	}
	_ = syscall.Kill(pm, sig)
	for _, ch := range children(pm) {
		_ = syscall.Kill(ch, sig)
	}
}

// haMemberState is a member as Patroni's /cluster lists it.
type haMemberState struct {
	Name  string `json:"name"`
	Role  string `json:"role"`
	State string `json:"state"`
	Lag   any    `json:"lag"`
}

// roles returns the cluster as any member's REST API answers it.
func (c *haCluster) roles() []haMemberState {
	client := &http.Client{Timeout: time.Second}
	for _, m := range c.members {
		res, err := client.Get("http://127.0.0.1:" + itoa(m.apiPort) + "/cluster")
		if err != nil {
			continue
		}
		var out struct {
			Members []haMemberState `json:"members"`
		}
		err = json.NewDecoder(res.Body).Decode(&out)
		res.Body.Close()
		if err == nil {
			return out.Members
		}
	}
	return nil
}

// healthy reports whether n members run, one leader and (with more than
// one) a synchronous standby among them, every standby streaming.
func healthy(ms []haMemberState, n int) bool {
	leaders, syncs, running := 0, 0, 0
	for _, m := range ms {
		switch m.Role {
		case "leader":
			leaders++
			if m.State == "running" {
				running++
			}
		case "sync_standby":
			syncs++
			fallthrough
		default:
			// A replica that cannot follow the leader restarts in a loop
			// and shows "running" between its attempts: its lag, which
			// Patroni knows only for a replica that replays, says so.
			if _, replays := m.Lag.(float64); replays && (m.State == "streaming" || m.State == "running") {
				running++
			}
		}
	}
	return leaders == 1 && running == n && len(ms) == n && (n == 1 || syncs == 1)
}

func (c *haCluster) waitRoles(within time.Duration, n int) {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for !healthy(c.roles(), n) {
		if time.Now().After(deadline) {
			c.t.Fatalf("Patroni cluster not healthy with %d members after %s: %+v (logs in %s)", n, within, c.roles(), c.dir)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// leader returns the member Patroni names leader (nil: none now).
func (c *haCluster) leader() *haMember {
	for _, s := range c.roles() {
		if s.Role == "leader" {
			return c.member(s.Name)
		}
	}
	return nil
}

func (c *haCluster) member(name string) *haMember {
	for _, m := range c.members {
		if m.name == name {
			return m
		}
	}
	return nil
}

// standby returns a member that is not the leader (the sync one if sync).
func (c *haCluster) standby(sync bool) *haMember {
	for _, s := range c.roles() {
		if (sync && s.Role == "sync_standby") || (!sync && s.Role == "replica") {
			return c.member(s.Name)
		}
	}
	return nil
}

// writers returns the members whose PostgreSQL takes writes.
func (c *haCluster) writers() []string {
	var out []string
	for _, m := range c.members {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/postgres?sslmode=disable", haPassword, m.pgPort))
		if err == nil {
			var ro bool
			if conn.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&ro) == nil && !ro {
				out = append(out, m.name)
			}
			_ = conn.Close(ctx)
		}
		cancel()
	}
	return out
}

func (c *haCluster) patronictl(args ...string) {
	c.t.Helper()
	cmd := exec.Command("patronictl", append([]string{"-c", c.members[0].config}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+c.dir)
	out, err := cmd.CombinedOutput()
	require.NoError(c.t, err, "patronictl %v: %s", args, out)
}

// probe calls a database-backed read on each replica every 100 ms and
// records the outcome, to measure how long each fault kept the API from
// answering.
type probe struct {
	mu      sync.Mutex
	samples [2][]probeSample
}

type probeSample struct {
	at time.Time
	ok bool
}

func (p *probe) run(ctx context.Context, clients func(i int) flowv1connect.FlowClient) {
	for i := range 2 {
		go func() {
			for ctx.Err() == nil {
				c, cancel := context.WithTimeout(ctx, 2*time.Second)
				start := time.Now()
				_, err := clients(i).GetListOfRacks(c, &flowv1.GetListOfRacksRequest{Pagination: &flowv1.Pagination{Limit: 1}})
				cancel()
				if ctx.Err() != nil {
					return
				}
				p.mu.Lock()
				p.samples[i] = append(p.samples[i], probeSample{at: start, ok: err == nil})
				p.mu.Unlock()
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
}

// unavailable returns the longest time in [from, to] either replica went
// without a successful probe: from the last success before a run of
// failures to the first success after it.
func (p *probe) unavailable(from, to time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var worst time.Duration
	for i := range 2 {
		lastOK := from
		failing := false
		for _, s := range p.samples[i] {
			if s.at.Before(from) {
				if s.ok {
					lastOK = s.at
				}
				continue
			}
			if s.at.After(to) {
				break
			}
			if !s.ok {
				failing = true
				continue
			}
			if failing {
				worst = max(worst, s.at.Sub(lastOK))
				failing = false
			}
			lastOK = s.at
		}
	}
	return worst
}

// TestPatroniChaos: the Patroni cluster under faults, one at a time;
// FLOW_HA_FAULTS of them (3 by default), cycling through the kinds, the
// first half with both replicas naming every member
// (target_session_attrs=read-write), the second half with both going
// through HAProxy. The workload (ha_workload_e2e_test.go): 200 racks,
// each round resetting 8 and upgrading the firmware of 7, a rollout over
// 40 opening one phase per round, and five schedules firing every 5 s
// over the last 10.
func TestPatroniChaos(t *testing.T) {
	if os.Getenv("FLOW_HA") == "" {
		t.Skip("the Patroni chaos test runs under make ha-test (FLOW_HA=1)")
	}
	faults := 3
	if n, err := strconv.Atoi(os.Getenv("FLOW_HA_FAULTS")); err == nil && n > 0 {
		faults = n
	}
	ctx := context.Background()
	began := time.Now()
	c := startHACluster(t)
	t.Logf("Patroni cluster up: %+v", c.roles())

	// Lease expiry above Patroni's ttl + loop_wait: a failover (about
	// 11 s after a frozen primary's last renewal) does not make the
	// replicas give their calls up.
	r := newReplicasSeeded(t, c.url, haRacks, seedFirmware, time.Second, 30*time.Second,
		"FLOW_ENGINE_LEASE_EXPIRY=20s", "FLOW_ENGINE_LEASE_HEARTBEAT=2s", "FLOW_FIRMWARE_POLL_INTERVAL=500ms")
	t.Logf("%d racks stored, replicas up (%s)", haRacks, time.Since(began).Round(time.Second))
	var clientsMu sync.Mutex
	client := func(i int) flowv1connect.FlowClient {
		clientsMu.Lock()
		defer clientsMu.Unlock()
		return r.clients[i]
	}
	_, err := r.clients[0].CreateOperationRule(ctx, &flowv1.CreateOperationRuleRequest{
		Name: "reset", OperationType: flowv1.OperationType_OPERATION_TYPE_POWER_CONTROL, OperationCode: "force_restart", IsDefault: true,
		RuleDefinitionJson: `{"steps":[{"component_type":"Compute","stage":1,"timeout":"30s","retry":{"max_attempts":5,"initial_interval":"200ms","backoff_coefficient":2},
			"main_operation":{"name":"PowerControl","parameters":{"operation":"force_restart"}},
			"post_operation":[{"name":"VerifyPowerStatus","timeout":"60s","poll_interval":"200ms","parameters":{"expected_status":"on"}}]}]}`,
	})
	require.NoError(t, err)
	w := newHAWorkload(t, r, c.url, faults)
	w.start(t, r.clients[0])

	probeCtx, stopProbe := context.WithCancel(ctx)
	defer stopProbe()
	pr := &probe{}
	pr.run(probeCtx, client)

	// Two topologies, one after the other: the first half of the faults
	// with both replicas on every member's address, the second with both
	// through HAProxy (Patroni's REST health checks).
	topologies := []string{"multi-host", "HAProxy"}
	switchAt := faults / 2
	if switchAt == 0 {
		switchAt = faults
	}
	kinds := []string{"kill -9 primary postmaster", "freeze primary beyond ttl", "switchover", "restart a standby",
		"kill -9 a Flow replica during a failover", "lose one etcd member of three"}
	var (
		summary                             []string
		downs                               []time.Duration
		perTopo                             = map[string][]time.Duration{}
		perKind                             = map[string][]string{}
		totalTasks, totalCalls, totalRepeat int
		totalUnknown                        int
	)
	topo := topologies[0]
	for f := range faults {
		if f == switchAt && f > 0 {
			topo = topologies[1]
			for i := range 2 {
				r.servers[i].kill(t)
				r.env[i] = append(r.env[i], "DATABASE_URL="+c.proxyURL)
				srv := startServerProcess(t, r.env[i])
				waitHealthy(t, r.urls[i])
				clientsMu.Lock()
				r.servers[i] = srv
				clientsMu.Unlock()
			}
			t.Logf("both replicas now go through HAProxy")
		}
		kind := kinds[f%len(kinds)]
		since := time.Now()
		w.advance(t, client, f)

		// Submit the round's resets and upgrades, retrying through the
		// fault.
		resets, upgrades := w.round(f)
		var (
			mu    sync.Mutex
			acked []*flowv1.UUID
			lost  int
			wg    sync.WaitGroup
		)
		for i, name := range resets {
			wg.Go(func() {
				submit(t, name, func(cctx context.Context, try int) ([]*flowv1.UUID, error) {
					res, err := client((i+try)%2).PowerResetRack(cctx, &flowv1.PowerResetRackRequest{TargetSpec: rackSpec(name), Forced: true, OverrideReadinessCheck: true})
					return res.GetTaskIds(), err
				}, &acked, &lost, &mu)
			})
		}
		for i, name := range upgrades {
			wg.Go(func() {
				submit(t, name, func(cctx context.Context, try int) ([]*flowv1.UUID, error) {
					res, err := client((i+try)%2).UpgradeFirmware(cctx, &flowv1.UpgradeFirmwareRequest{TargetSpec: rackSpec(name), TargetVersion: ptr("2.0")})
					return res.GetTaskIds(), err
				}, &acked, &lost, &mu)
			})
		}
		// Inject the fault once calls are out (or submissions still going).
		time.Sleep(time.Duration(500+rand.IntN(1000)) * time.Millisecond)
		start := time.Now()
		out := c.callsOut(ctx, since)
		c.inject(t, kind, r, &clientsMu)
		wg.Wait()
		// Settled: three members, one leader, a synchronous standby, and
		// exactly one member taking writes (a thawed primary demoted).
		settle := time.Now().Add(3 * time.Minute)
		for !healthy(c.roles(), 3) || len(c.writers()) != 1 {
			require.True(t, time.Now().Before(settle), "after %q the cluster settles: %+v, writers %v (logs in %s)", kind, c.roles(), c.writers(), c.dir)
			time.Sleep(500 * time.Millisecond)
		}
		settled := time.Now()
		w.faults = append(w.faults, [2]time.Time{start, settled})

		// Every task of the round ends, completed, one per rack.
		roundRacks := append(slices.Clone(resets), upgrades...)
		var ids []*flowv1.UUID
		var rows [][2]string
		require.Eventually(t, func() bool {
			conn, err := pgx.Connect(ctx, c.url)
			if err != nil {
				return false
			}
			defer conn.Close(ctx)
			rs, err := conn.Query(ctx, `SELECT t.id::text, r.name FROM task t JOIN rack r ON r.id = t.rack_id WHERE t.created_at >= $1 AND r.name = ANY($2)`, since, roundRacks)
			if err != nil {
				return false
			}
			rows = rows[:0]
			for rs.Next() {
				var id, rack string
				if rs.Scan(&id, &rack) == nil {
					rows = append(rows, [2]string{id, rack})
				}
			}
			return rs.Err() == nil
		}, time.Minute, 200*time.Millisecond)
		perRack := map[string]int{}
		have := map[string]bool{}
		for _, row := range rows {
			perRack[row[1]]++
			have[row[0]] = true
			ids = append(ids, &flowv1.UUID{Id: row[0]})
		}
		for _, id := range acked {
			require.True(t, have[id.GetId()], "fault %d (%s): acknowledged task %s exists", f+1, kind, id.GetId())
		}
		for _, name := range roundRacks {
			require.Equal(t, 1, perRack[name], "fault %d (%s): rack %s has one task", f+1, kind, name)
		}
		waitCompletedThroughOutage(t, client(f%2), ids, 4*time.Minute)
		end := time.Now()
		// River keeps one leader.
		require.Eventually(t, func() bool {
			conn, err := pgx.Connect(ctx, c.url)
			if err != nil {
				return false
			}
			defer conn.Close(ctx)
			var n int
			return conn.QueryRow(ctx, `SELECT count(*) FROM river_leader WHERE expires_at > now()`).Scan(&n) == nil && n == 1
		}, time.Minute, 200*time.Millisecond, "fault %d (%s): River has one leader", f+1, kind)

		// No device reset or upgraded twice unless a step recorded the
		// call's outcome as unknown (a call cut off by the fault,
		// documented), and then once more at most.
		// Per rack: a device of a rack whose tasks recorded every such
		// call's outcome is called once; one of a rack whose task recorded
		// a call of unknown outcome (in flight at the fault) by the step
		// that makes it at most once more.
		var unknown int
		var unknownReset, unknownFirmware map[string]int
		require.Eventually(t, func() bool {
			conn, err := pgx.Connect(ctx, c.url)
			if err != nil {
				return false
			}
			defer conn.Close(ctx)
			if conn.QueryRow(ctx, `SELECT coalesce(sum(jsonb_array_length(s.unknown_outcomes)), 0) FROM engine_step s
				JOIN engine_run r ON r.id = s.run_id WHERE r.created_at >= $1`, since).Scan(&unknown) != nil {
				return false
			}
			unknownReset = unknownByRack(t, ctx, conn, since, powerSteps)
			unknownFirmware = unknownByRack(t, ctx, conn, since, firmwareSteps)
			return true
		}, time.Minute, 200*time.Millisecond)
		resetCalls := okCalls(r.sims, "ComponentPowerControl", since)
		calls, repeats := 0, 0
		for _, name := range resets {
			for _, d := range w.devsByRack[name] {
				if d.Kind != nicosim.KindCompute {
					continue
				}
				ok := callsTo(resetCalls, d)
				require.GreaterOrEqual(t, ok, 1, "fault %d (%s): %s reset", f+1, kind, d.Name)
				require.LessOrEqual(t, ok, 2, "fault %d (%s): %s reset %d times", f+1, kind, d.Name, ok)
				if ok == 2 {
					require.Positive(t, unknownReset[name], "fault %d (%s): %s (%s) reset twice with no power call of unknown outcome recorded in its rack's task (a call whose outcome was recorded was sent again)", f+1, kind, d.Name, name)
				}
				calls += ok
				repeats += ok - 1
			}
		}
		fwCalls, fwRepeats := w.checkFirmware(t, "round", upgrades, unknownFirmware)
		w.firmwareCalls += fwCalls
		w.firmwareRepeats += fwRepeats
		rollout := w.checkRollout(t, client(f%2), f)
		scheds := w.checkSchedules(t, f, settled)
		w.checkAllEnd(t, f, end)

		down := pr.unavailable(start, end)
		downs = append(downs, down)
		perTopo[topo] = append(perTopo[topo], down)
		perKind[kind] = append(perKind[kind], fmt.Sprintf("%s %s", down.Round(100*time.Millisecond), map[string]string{"multi-host": "M", "HAProxy": "H"}[topo]))
		totalTasks += len(rows)
		totalCalls += calls
		totalRepeat += repeats + fwRepeats
		totalUnknown += unknown
		line := fmt.Sprintf("fault %d (%s): %s: unavailable %s; %d steps mid-call at the fault; %d tasks (%d acknowledged, %d answers lost), %d tray resets, %d firmware updates, %d repeated, %d unknown outcomes; %s; %s",
			f+1, topo, kind, down.Round(100*time.Millisecond), out, len(rows), len(acked), lost, calls, fwCalls, repeats+fwRepeats, unknown, rollout, scheds)
		summary = append(summary, line)
		t.Log(line)
	}
	var all, bySchedule, byRollout int
	require.NoError(t, r.pool(t).QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE trigger_type = 'task_schedule'), count(*) FILTER (WHERE trigger_id = $1) FROM task`, w.run.GetId()).Scan(&all, &bySchedule, &byRollout))
	quant := func(ds []time.Duration) string {
		ds = slices.Clone(ds)
		slices.Sort(ds)
		return fmt.Sprintf("p50 %s, max %s", ds[len(ds)/2].Round(100*time.Millisecond), ds[len(ds)-1].Round(100*time.Millisecond))
	}
	for _, topo := range topologies {
		if ds := perTopo[topo]; len(ds) > 0 {
			t.Logf("%s: %d faults, unavailability %s", topo, len(ds), quant(ds))
		}
	}
	for _, kind := range kinds {
		if len(perKind[kind]) > 0 {
			t.Logf("%s: %s (M: multi-host, H: HAProxy)", kind, strings.Join(perKind[kind], ", "))
		}
	}
	scheduled := w.checkScheduledCalls(t)
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d faults in %s; unavailability %s; %d tasks, all completed (%d resets and upgrades, %d rollout, %d scheduled); %d tray resets, %d firmware updates (%d by the rollout), %d repeated (%d unknown outcomes recorded); %d schedule firings, none twice, %d late (%d at a fault), %d scheduled tray power-ons",
		faults, time.Since(began).Round(time.Second), quant(downs), all, totalTasks, byRollout, bySchedule, totalCalls, w.firmwareCalls+w.rolloutFirmware, w.rolloutFirmware, totalRepeat+w.rolloutRepeats, totalUnknown, w.firings, w.late, w.lateInFault, scheduled)
	t.Log(b.String())
}

// inject applies one fault of kind and returns once it is over (the
// faulty part is back or replaced; the cluster may still be settling).
func (c *haCluster) inject(t *testing.T, kind string, r *replicaSetup, clientsMu *sync.Mutex) {
	t.Helper()
	leader := c.leader()
	require.NotNil(t, leader, "a leader before %q", kind)
	switch kind {
	case "kill -9 primary postmaster":
		// Patroni still holds the leader key: it restarts PostgreSQL in
		// place (crash recovery), or a standby takes over.
		c.signalPostgres(leader, syscall.SIGKILL)
		time.Sleep(3 * time.Second) // Patroni's next loop notices
	case "freeze primary beyond ttl":
		// The whole member stops (Patroni and every PostgreSQL process),
		// longer than the leader key lives: a standby is promoted, and
		// the old primary, thawed, must come back demoted.
		pids := append([]int{leader.cmd.Process.Pid}, c.postmaster(leader))
		pids = append(pids, children(c.postmaster(leader))...)
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGSTOP)
		}
		time.Sleep(15 * time.Second)
		promoted := c.leader()
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGCONT)
		}
		require.NotNil(t, promoted, "a standby took over from the frozen primary")
		require.NotEqual(t, leader.name, promoted.name, "a standby took over from the frozen primary")
		// Thawed, the old primary must see it lost the key and demote
		// itself, never take the key back (Patroni 3.0.2's etcd3 did:
		// docs/operations.md).
		for range 10 {
			time.Sleep(500 * time.Millisecond)
			if now := c.leader(); now != nil {
				require.Equal(t, promoted.name, now.name, "the thawed primary %s took the leader key back from %s", leader.name, promoted.name)
			}
		}
	case "switchover":
		sb := c.standby(true)
		require.NotNil(t, sb)
		c.patronictl("switchover", "--leader", leader.name, "--candidate", sb.name, "--force", "flow")
	case "restart a standby":
		sb := c.standby(true)
		require.NotNil(t, sb)
		c.patronictl("restart", "--force", "flow", sb.name)
		time.Sleep(time.Second)
	case "kill -9 a Flow replica during a failover":
		sb := c.standby(true)
		require.NotNil(t, sb)
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.patronictl("switchover", "--leader", leader.name, "--candidate", sb.name, "--force", "flow")
		}()
		time.Sleep(500 * time.Millisecond)
		i := rand.IntN(2)
		r.servers[i].kill(t)
		<-done
		srv := startServerProcess(t, r.env[i])
		waitHealthy(t, r.urls[i])
		clientsMu.Lock()
		r.servers[i] = srv
		clientsMu.Unlock()
	case "lose one etcd member of three":
		// The DCS keeps its quorum: Patroni keeps its leader.
		e := c.etcds[rand.IntN(len(c.etcds))]
		e.kill()
		time.Sleep(5 * time.Second)
		now := c.leader()
		require.NotNil(t, now, "a leader with one etcd member down")
		require.Equal(t, leader.name, now.name, "no failover with one etcd member down")
		e.start(t)
		require.Eventually(t, e.healthy, time.Minute, 200*time.Millisecond, "etcd member %s back", e.name)
	default:
		t.Fatalf("unknown fault %q", kind)
	}
}

// callsOut returns how many reset steps of runs created since are mid-call
// (running, claimed); -1 when the database does not answer.
func (c *haCluster) callsOut(ctx context.Context, since time.Time) int {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.url)
	if err != nil {
		return -1
	}
	defer conn.Close(ctx)
	var n int
	if conn.QueryRow(ctx, `SELECT count(*) FROM engine_step s JOIN engine_run r ON r.id = s.run_id
		WHERE s.state = 'running' AND s.spec->>'action' = 'flow.power_control' AND s.claimed_at IS NOT NULL
			AND r.created_at >= $1`, since).Scan(&n) != nil {
		return -1
	}
	return n
}
