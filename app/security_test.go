package app

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/edge"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// TestTLSSettings: the API's certificate settings are checked when the
// configuration is read (edge's TestResolveCertSource checks the sources).
func TestTLSSettings(t *testing.T) {
	t.Parallel()
	_, err := LoadConfig(env(map[string]string{"FLOW_TLS_CERT": "x.crt"}))
	require.ErrorContains(t, err, "FLOW_TLS_CA, FLOW_TLS_CERT and FLOW_TLS_KEY must be set together")
	_, err = LoadConfig(env(map[string]string{"ALLOW_INSECURE_GRPC": "yes please"}))
	require.ErrorContains(t, err, "ALLOW_INSECURE_GRPC must be true or false")
}

// TestServeRefusesToStartWithoutCertificates runs `flow serve` as a child
// process with no certificate anywhere: it exits non-zero naming the three
// sources and the way out.
func TestServeRefusesToStartWithoutCertificates(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FLOW_TEST_CHILD=serve", "DATABASE_URL=postgres://unused@127.0.0.1:1/x",
		"FLOW_LISTEN_ADDR=127.0.0.1:0", "FLOW_ADMIN_LISTEN=off",
		"ALLOW_INSECURE_GRPC=", "FLOW_TLS_CA=", "FLOW_TLS_CERT=", "FLOW_TLS_KEY=", "CERTDIR=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.NotZero(t, exit.ExitCode())
	for _, want := range []string{"TLS certificates required", "FLOW_TLS_CA", "CERTDIR", edge.SPIFFECertDir, "ALLOW_INSECURE_GRPC=true"} {
		require.Contains(t, stderr.String(), want)
	}
}

// TestServeInsecureOptIn: with ALLOW_INSECURE_GRPC=true flow serve serves
// cleartext, warns, and every caller is the admin "insecure"; a policy file
// with cleartext is refused (it could identify nobody).
func TestServeInsecureOptIn(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"DATABASE_URL": dbtest.NewDB(t), "FLOW_LISTEN_ADDR": "127.0.0.1:0", "FLOW_ADMIN_LISTEN": "off", "ALLOW_INSECURE_GRPC": "true"}
	cfg, err := LoadConfig(env(vars))
	require.NoError(t, err)
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := newServer(ctx, cfg, newLogger(logs, "json", -4), serveOptions{})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.run(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()
	require.Contains(t, logs.String(), "serving the API in cleartext without authentication (ALLOW_INSECURE_GRPC=true)")
	_, err = flowv1connect.NewFlowClient(h2cClient(), "http://"+srv.Addr().String()).CreateExpectedRack(ctx, &flowv1.CreateExpectedRackRequest{
		Rack: &flowv1.Rack{Info: &flowv1.DeviceInfo{Name: "cleartext", Manufacturer: "NVIDIA", SerialNumber: "SN-cleartext"}}})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), `"identity":"insecure"`) }, 5*time.Second, 10*time.Millisecond)

	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(policyFile, []byte("identities:\n  a: admin\n"), 0o644))
	cfg.AuthzPolicy = policyFile
	_, err = newServer(ctx, cfg, newLogger(logs, "json", 0), serveOptions{})
	require.ErrorContains(t, err, "FLOW_AUTHZ_POLICY is set but the API serves cleartext")
}
