//go:build imagetest

package chart_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/nicoflow/flow/cli"
	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/db/pglocal"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// The image test (`make image-test`, build tag imagetest): it runs the
// image FLOW_IMAGE names with podman the way the chart's Deployment runs
// it. Everything the container gets comes from the rendered Deployment:
// arguments, environment, the securityContext (user, read-only root, no
// capabilities, no privilege escalation), the Secrets and the ConfigMap at
// their mount paths, /tmp as the emptyDir. Only the addresses are the
// test's: PostgreSQL on 127.0.0.1 and free ports (the containers share the
// host's network, as other tests run beside them).

// podman runs podman as `make image` does: runc, cgroupfs and the
// repository's containers.conf (this machine kind lacks CAP_SYS_RESOURCE
// for the default ulimits).
func podman(ctx context.Context, args ...string) *exec.Cmd {
	conf, _ := filepath.Abs("../podman/containers.conf")
	cmd := exec.CommandContext(ctx, "podman", append([]string{"--runtime", "runc", "--cgroup-manager", "cgroupfs"}, args...)...)
	cmd.Env = append(os.Environ(), "CONTAINERS_CONF="+conf)
	return cmd
}

func podmanOut(t *testing.T, args ...string) string {
	t.Helper()
	out, err := podman(context.Background(), args...).CombinedOutput()
	require.NoError(t, err, "podman %s: %s", strings.Join(args, " "), out)
	return strings.TrimSpace(string(out))
}

// startTLSPostgres starts a private PostgreSQL that accepts only TLS with
// a client certificate signed by certs' ca.crt (clientcert=verify-ca),
// serving certs' tls.crt (valid for 127.0.0.1), and a password for every
// user but postgres.
func startTLSPostgres(t *testing.T, certs string) *pglocal.Cluster {
	t.Helper()
	ctx := context.Background()
	c := dbtest.InitCluster(t)
	dbtest.ServeTLS(t, c, certs)
	require.NoError(t, c.Start(ctx))
	url := dbtest.SuperuserTLSURL(c, certs, "postgres")
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `CREATE ROLE flow LOGIN PASSWORD '`+dbPassword+`'`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `CREATE DATABASE flow OWNER flow`)
	require.NoError(t, err)
	return c
}

// runArgs are podman run's arguments that give a container what the pod
// spec gives c: its security context, mounts (from root, where podFS
// wrote them), environment (secretKeyRef values resolved as podFS does),
// image and arguments.
func runArgs(t *testing.T, m manifests, c corev1.Container, root, image string) []string {
	t.Helper()
	pod := m.deployment.Spec.Template.Spec
	psc, sc := pod.SecurityContext, c.SecurityContext
	uid, gid := *psc.RunAsUser, *psc.RunAsGroup
	if sc.RunAsUser != nil {
		uid = *sc.RunAsUser
	}
	args := []string{"--network", "host", "--user", fmt.Sprintf("%d:%d", uid, gid), "--group-add", strconv.Itoa(int(*psc.FSGroup))}
	if *sc.ReadOnlyRootFilesystem {
		args = append(args, "--read-only")
	}
	for _, cap := range sc.Capabilities.Drop {
		args = append(args, "--cap-drop", string(cap))
	}
	if !*sc.AllowPrivilegeEscalation {
		args = append(args, "--security-opt", "no-new-privileges")
	}
	require.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, sc.SeccompProfile.Type, "podman's default seccomp profile")
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	for _, vm := range c.VolumeMounts {
		if vols[vm.Name].EmptyDir != nil {
			args = append(args, "--tmpfs", vm.MountPath+":rw,size=64m,mode=1777")
			continue
		}
		opt := ""
		if vm.ReadOnly {
			opt = ":ro"
		}
		args = append(args, "-v", filepath.Join(root, vm.MountPath)+":"+vm.MountPath+opt)
	}
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil {
			switch e.ValueFrom.SecretKeyRef.Key {
			case "username":
				v = "flow"
			case "password":
				v = dbPassword
			default:
				t.Fatalf("%s: unknown secret key", e.Name)
			}
		}
		args = append(args, "-e", e.Name+"="+v)
	}
	return append(append(args, image), c.Args...)
}

// TestImageRunsAsTheChartRunsIt: two migrate init containers at once (two
// replicas starting together), then flow serve; /readyz answers 200; an
// mTLS call is served and a call without a client certificate refused;
// SIGTERM stops it with exit 0 after its graceful shutdown.
func TestImageRunsAsTheChartRunsIt(t *testing.T) {
	image := os.Getenv("FLOW_IMAGE")
	require.NotEmpty(t, image, "FLOW_IMAGE names the image to test (make image-test sets it)")
	start := time.Now()
	phase := func(name string) {
		t.Logf("%-28s %6.1fs", name, time.Since(start).Seconds())
	}

	// The image: labelled, no shell, under 45 MB unpacked (make image checks
	// the compressed size, under 15 MB, too).
	labels := podmanOut(t, "image", "inspect", "--format", `{{index .Labels "org.opencontainers.image.version"}} {{index .Labels "org.opencontainers.image.revision"}}`, image)
	require.Regexp(t, `^\S+ [0-9a-f]{40}$`, labels, "version and commit labels")
	size, err := strconv.ParseInt(podmanOut(t, "image", "inspect", "--format", "{{.Size}}", image), 10, 64)
	require.NoError(t, err)
	t.Logf("image %s: %.1f MB unpacked, labels %s", image, float64(size)/1e6, labels)
	require.Less(t, size, int64(45_000_000), "image under 45 MB unpacked (docs/deploy.md, Image size)")
	out, err := podman(context.Background(), "run", "--rm", "--entrypoint", "/bin/sh", image, "-c", "true").CombinedOutput()
	require.Error(t, err, "no shell in the image: %s", out)

	certs := devCerts(t)
	require.NoError(t, os.Chmod(filepath.Dir(certs), 0o755))
	pg := startTLSPostgres(t, certs)
	phase("postgres (TLS only) up")
	port, err := pglocal.FreePort()
	require.NoError(t, err)
	metricsPort, err := pglocal.FreePort()
	require.NoError(t, err)
	adminPort, err := pglocal.FreePort()
	require.NoError(t, err)
	vals := map[string]any{
		"database":               map[string]any{"host": "127.0.0.1", "port": pg.Port},
		"ports":                  map[string]any{"flow": port, "metrics": metricsPort},
		"adminListenAddr":        "127.0.0.1:" + strconv.Itoa(adminPort),
		"nicoCoreApi":            map[string]any{"url": ""},
		"shutdownTimeoutSeconds": 20,
		"images":                 map[string]any{"flow": map[string]any{"repository": strings.SplitN(image, ":", 2)[0], "tag": strings.SplitN(image, ":", 2)[1]}},
	}
	m := render(t, vals)
	flow := m.container(t, "flow")
	migrate := m.container(t, "migrate")
	require.Equal(t, image, flow.Image)

	root, err := os.MkdirTemp("", "flow-imagetest-pod-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(root) })
	require.NoError(t, os.Chmod(root, 0o755))
	podFS(t, m, flow, root, certs)

	// Two replicas starting together: both migrate init containers at once.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	migrations := make(chan error, 2)
	var logs [2]bytes.Buffer
	for i := range 2 {
		cmd := podman(ctx, append([]string{"run", "--rm"}, runArgs(t, m, migrate, root, image)...)...)
		cmd.Stdout, cmd.Stderr = &logs[i], &logs[i]
		require.NoError(t, cmd.Start())
		go func() { migrations <- cmd.Wait() }()
	}
	for range 2 {
		require.NoError(t, <-migrations, "flow db migrate:\n%s\n%s", &logs[0], &logs[1])
	}
	require.Contains(t, logs[0].String()+logs[1].String(), "status    up to date")
	phase("2 migrations at once")

	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	name := "flow-imagetest-" + hex.EncodeToString(suffix)
	podmanOut(t, append([]string{"run", "-d", "--name", name}, runArgs(t, m, flow, root, image)...)...)
	t.Cleanup(func() { _ = podman(context.Background(), "rm", "-f", "-t", "0", name).Run() })
	logsOf := func() string {
		out, _ := podman(context.Background(), "logs", name).CombinedOutput()
		return string(out)
	}

	// Ready: what the readiness probe asks.
	ready := fmt.Sprintf("http://127.0.0.1:%d/readyz", metricsPort)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		resp, err := http.Get(ready)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		state := podmanOut(t, "inspect", "--format", "{{.State.Status}}", name)
		require.Equal(t, "running", state, "the container stopped:\n%s", logsOf())
		require.True(t, time.Now().Before(deadline), "not ready in 3 minutes:\n%s", logsOf())
		time.Sleep(200 * time.Millisecond)
	}
	phase("ready (/readyz 200)")
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "what the ServiceMonitor scrapes")

	// An mTLS call, with a client certificate from the SPIFFE CA.
	base := fmt.Sprintf("https://127.0.0.1:%d", port)
	call := func(files cli.TLSFiles) (*flowv1.BuildInfo, error) {
		cfg, err := cli.TLSConfig(files)
		require.NoError(t, err)
		hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}}
		return flowv1connect.NewFlowClient(hc, base, connect.WithGRPC()).Version(context.Background(), &flowv1.VersionRequest{})
	}
	res, err := call(cli.TLSFiles{CA: filepath.Join(certs, "ca.crt"), Cert: filepath.Join(certs, "viewer.crt"), Key: filepath.Join(certs, "viewer.key")})
	require.NoError(t, err, "an mTLS call:\n%s", logsOf())
	require.Equal(t, strings.TrimSuffix(strings.Fields(labels)[1], "+dirty"), strings.TrimSuffix(res.GetGitCommit(), "+dirty"), "the binary is the labelled commit")
	phase("mTLS call served")
	anon, err := tls.Dial("tcp", strings.TrimPrefix(base, "https://"), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}) //nolint:gosec // the handshake must fail without a client certificate
	if err == nil {
		// TLS 1.3 reports a missing client certificate on the first read.
		_ = anon.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = anon.Read(make([]byte, 1))
		anon.Close()
	}
	require.Error(t, err, "a client without a certificate is refused")

	// SIGTERM, as the kubelet sends after preStop: graceful stop, exit 0.
	stopStart := time.Now()
	podmanOut(t, "kill", "--signal", "TERM", name)
	waitCtx, waitCancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer waitCancel()
	exit, err := podman(waitCtx, "wait", name).Output()
	require.NoError(t, err, "podman wait")
	stopped := time.Since(stopStart)
	require.Equal(t, "0", strings.TrimSpace(string(exit)), "exit code after SIGTERM:\n%s", logsOf())
	all := logsOf()
	require.Contains(t, all, `"msg":"shutting down"`)
	require.Contains(t, all, `"msg":"stopped"`)
	require.Less(t, stopped, 20*time.Second+15*time.Second, "within the grace period the chart gives")
	t.Logf("stopped after SIGTERM in %.1fs, exit 0", stopped.Seconds())
	phase("stopped")
}
