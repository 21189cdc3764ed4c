package chart_test

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/nicoflow/flow/app"
	"github.com/nicoflow/flow/edge"
)

// valueSet is one way an operator sets the chart up.
type valueSet struct {
	name string
	vals map[string]any
}

func valueSets(t *testing.T) []valueSet {
	return []valueSet{
		{"Defaults", nil},
		{"UpstreamValuesFile", values(t, "upstream-values.yaml")},
		{"PostgresTLSSecret", set(nil, "database.tls.existingSecret", "flow-db-tls")},
		{"PostgresNoTLS", set(nil, "database.certPath", "")},
		{"OneReplica", set(nil, "replicas", 1)},
		{"MetricsOff", map[string]any{"metrics": map[string]any{
			"serviceMonitor":   map[string]any{"enabled": false},
			"prometheusRule":   map[string]any{"enabled": false},
			"grafanaDashboard": map[string]any{"enabled": false},
		}}},
		{"ExistingCertificateSecret", set(set(nil, "certificate.create", false), "certificate.name", "site-spiffe")},
		{"DataKeyValue", set(set(nil, "dataEncryption.key.value", base64.StdEncoding.EncodeToString(make([]byte, 32))), "shutdownTimeoutSeconds", 120)},
	}
}

// TestChartRenders renders the chart for each value set, decodes every
// object strictly into its Kubernetes API type (render) and checks what a
// running Flow depends on.
func TestChartRenders(t *testing.T) {
	t.Parallel()
	for _, vs := range valueSets(t) {
		t.Run(vs.name, func(t *testing.T) {
			t.Parallel()
			m := render(t, vs.vals)
			checkDeployment(t, m, vs.vals)
			checkService(t, m)
			checkDisruptionBudget(t, m, vs.vals)
			checkMonitoring(t, m, vs.vals)
			checkNetworkPolicy(t, m)
			checkStartsFlow(t, m)
		})
	}
}

// lookup reads a dotted path from vals, else from the chart's values.yaml.
func lookup(t *testing.T, vals map[string]any, p string) any {
	t.Helper()
	for _, src := range []map[string]any{vals, values(t, "../flow/values.yaml")} {
		var cur any = src
		for _, part := range strings.Split(p, ".") {
			m, ok := cur.(map[string]any)
			if !ok {
				cur = nil
				break
			}
			cur = m[part]
		}
		if cur != nil {
			return cur
		}
	}
	t.Fatalf("no value %s", p)
	return nil
}

func lookupInt(t *testing.T, vals map[string]any, p string) int {
	t.Helper()
	switch v := lookup(t, vals, p).(type) {
	case float64:
		return int(v)
	case int:
		return v
	default:
		t.Fatalf("%s is %T", p, v)
		return 0
	}
}

func checkDeployment(t *testing.T, m manifests, vals map[string]any) {
	d := m.deployment
	require.NotNil(t, d, "a Deployment")
	require.Equal(t, int32(lookupInt(t, vals, "replicas")), *d.Spec.Replicas)
	sel, err := metav1LabelSelector(d.Spec.Selector.MatchLabels)
	require.NoError(t, err)
	require.True(t, sel.Matches(labels.Set(d.Spec.Template.Labels)), "the selector picks the pods")

	// A rollout starts a new pod before it stops an old one.
	ru := d.Spec.Strategy.RollingUpdate
	require.Equal(t, "RollingUpdate", string(d.Spec.Strategy.Type))
	require.Equal(t, intstr.FromInt32(0), *ru.MaxUnavailable)
	require.Equal(t, intstr.FromInt32(1), *ru.MaxSurge)

	pod := d.Spec.Template.Spec
	// Restrictive: non-root numeric user, RuntimeDefault seccomp.
	require.True(t, *pod.SecurityContext.RunAsNonRoot)
	require.NotZero(t, *pod.SecurityContext.RunAsUser)
	require.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, pod.SecurityContext.SeccompProfile.Type)
	require.Equal(t, lookup(t, vals, "automountServiceAccountToken"), *pod.AutomountServiceAccountToken)

	flow := m.container(t, "flow")
	require.Equal(t, []string{"serve", "--metrics-port=" + strconv.Itoa(lookupInt(t, vals, "ports.metrics"))}, flow.Args)
	require.Contains(t, flow.Image, ":", "a tagged image")
	for _, c := range append(append([]corev1.Container{}, pod.InitContainers...), pod.Containers...) {
		sc := c.SecurityContext
		require.NotNil(t, sc, c.Name)
		require.True(t, *sc.ReadOnlyRootFilesystem, c.Name)
		require.False(t, *sc.AllowPrivilegeEscalation, c.Name)
		require.True(t, *sc.RunAsNonRoot, c.Name)
		require.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop, c.Name)
		require.Empty(t, sc.Capabilities.Add, c.Name)
		require.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, sc.SeccompProfile.Type, c.Name)
		require.NotEmpty(t, c.Resources.Requests, c.Name)
		require.NotEmpty(t, c.Resources.Limits, c.Name)
		checkEnvNames(t, c)
		checkMounts(t, pod, c)
	}

	// Migrations run first, with the server's own settings and image.
	require.Len(t, pod.InitContainers, 1)
	migrate := pod.InitContainers[0]
	require.Equal(t, []string{"db", "migrate"}, migrate.Args)
	require.Equal(t, flow.Image, migrate.Image)
	require.Equal(t, flow.Env, migrate.Env)
	require.Equal(t, flow.VolumeMounts, migrate.VolumeMounts)

	checkProbes(t, flow)

	// Hand-off: the kubelet waits for the preStop sleep and the whole
	// FLOW_SHUTDOWN_TIMEOUT before it kills the process.
	timeout, err := time.ParseDuration(env(t, flow)["FLOW_SHUTDOWN_TIMEOUT"].Value)
	require.NoError(t, err)
	require.Equal(t, time.Duration(lookupInt(t, vals, "shutdownTimeoutSeconds"))*time.Second, timeout)
	var preStop time.Duration
	if flow.Lifecycle != nil && flow.Lifecycle.PreStop != nil {
		require.NotNil(t, flow.Lifecycle.PreStop.Sleep, "preStop sleeps: the image has no shell")
		preStop = time.Duration(flow.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	}
	require.Equal(t, time.Duration(lookupInt(t, vals, "preStopSleepSeconds"))*time.Second, preStop)
	grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
	require.Greater(t, grace, preStop+timeout, "terminationGracePeriodSeconds above preStop + FLOW_SHUTDOWN_TIMEOUT")
}

func metav1LabelSelector(ml map[string]string) (labels.Selector, error) {
	if len(ml) == 0 {
		return nil, errors.New("empty selector")
	}
	return labels.SelectorFromSet(ml), nil
}

// flowVars are the variables Flow reads: `flow config`'s table.
func flowVars() map[string]bool {
	out := map[string]bool{}
	for _, v := range app.ConfigVars {
		out[v.Name] = true
	}
	return out
}

// checkEnvNames: every variable the chart sets is one Flow reads (a
// renamed variable fails here), or an OpenTelemetry one.
func checkEnvNames(t *testing.T, c corev1.Container) {
	t.Helper()
	known := flowVars()
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "OTEL_") {
			continue
		}
		require.True(t, known[e.Name], "%s sets %s, which Flow does not read (app.ConfigVars)", c.Name, e.Name)
	}
}

// checkMounts: every mount has its volume, read-only but /tmp.
func checkMounts(t *testing.T, pod corev1.PodSpec, c corev1.Container) {
	t.Helper()
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	for _, vm := range c.VolumeMounts {
		v, ok := vols[vm.Name]
		require.True(t, ok, "%s mounts %s: no such volume", c.Name, vm.Name)
		if v.EmptyDir != nil {
			require.Equal(t, "/tmp", vm.MountPath)
			continue
		}
		require.True(t, vm.ReadOnly, "%s mounts %s read-write", c.Name, vm.Name)
	}
}

// checkProbes: the probes reach the metrics listener (the port the
// --metrics-port argument opens) at paths the admin mux serves: /readyz
// answers 503 when Flow is not ready, /healthz 200 as long as the process
// answers.
func checkProbes(t *testing.T, c corev1.Container) {
	t.Helper()
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	metricsPort := strings.TrimPrefix(c.Args[1], "--metrics-port=")
	require.Equal(t, metricsPort, strconv.Itoa(int(ports["metrics"])), "the metrics port is the one --metrics-port opens")
	require.Equal(t, env(t, c)["FLOW_LISTEN_ADDR"].Value, ":"+strconv.Itoa(int(ports["grpc"])), "the grpc port is the one Flow listens on")

	var notReady error
	mux := edge.NewAdminMux(edge.AdminOptions{Ready: func(context.Context) error { return notReady }})
	get := func(p *corev1.Probe) int {
		require.NotNil(t, p)
		require.NotNil(t, p.HTTPGet)
		require.Equal(t, intstr.FromString("metrics"), p.HTTPGet.Port)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p.HTTPGet.Path, nil))
		return rec.Code
	}
	require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
	require.Equal(t, http.StatusOK, get(c.ReadinessProbe))
	require.Equal(t, http.StatusOK, get(c.LivenessProbe))
	require.Equal(t, http.StatusOK, get(c.StartupProbe))
	notReady = errors.New("database unreachable")
	require.Equal(t, http.StatusServiceUnavailable, get(c.ReadinessProbe), "readiness follows Flow's readiness")
	require.Equal(t, http.StatusOK, get(c.LivenessProbe), "liveness does not: a database outage must not restart every pod")
	require.Equal(t, http.StatusOK, get(c.StartupProbe))
}

func checkService(t *testing.T, m manifests) {
	t.Helper()
	svc := m.service
	require.NotNil(t, svc)
	require.Equal(t, "flow", svc.Name, "upstream's Service name (the certificate names flow.<ns>.svc)")
	require.True(t, labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(m.deployment.Spec.Template.Labels)))
	flow := m.container(t, "flow")
	named := map[string]bool{}
	for _, p := range flow.Ports {
		named[p.Name] = true
	}
	var names []string
	for _, p := range svc.Spec.Ports {
		require.True(t, named[p.TargetPort.StrVal], "service port %s targets container port %q", p.Name, p.TargetPort.StrVal)
		names = append(names, p.Name)
	}
	require.Equal(t, []string{"grpc", "metrics"}, names)
}

func checkDisruptionBudget(t *testing.T, m manifests, vals map[string]any) {
	t.Helper()
	if lookupInt(t, vals, "replicas") < 2 {
		require.Nil(t, m.pdb, "no budget for one replica: it would block every drain")
		return
	}
	require.NotNil(t, m.pdb)
	require.Equal(t, intstr.FromInt32(1), *m.pdb.Spec.MaxUnavailable)
	require.True(t, labels.SelectorFromSet(m.pdb.Spec.Selector.MatchLabels).Matches(labels.Set(m.deployment.Spec.Template.Labels)))
}

func checkMonitoring(t *testing.T, m manifests, vals map[string]any) {
	t.Helper()
	if lookup(t, vals, "metrics.serviceMonitor.enabled") == true {
		require.NotNil(t, m.serviceMonitor)
		ep := m.serviceMonitor.Spec.Endpoints
		require.Len(t, ep, 1)
		require.Equal(t, "metrics", ep[0].Port, "the Service's metrics port")
		require.Equal(t, "/metrics", ep[0].Path)
		require.True(t, labels.SelectorFromSet(m.serviceMonitor.Spec.Selector.MatchLabels).Matches(labels.Set(m.service.Labels)))
	} else {
		require.Nil(t, m.serviceMonitor)
	}
	if lookup(t, vals, "metrics.prometheusRule.enabled") == true {
		require.NotNil(t, m.prometheusRule)
		b, err := os.ReadFile("../prometheus/alerts.yaml")
		require.NoError(t, err)
		var src struct {
			Groups []struct {
				Name  string
				Rules []struct{ Alert, Expr string }
			}
		}
		require.NoError(t, yaml.Unmarshal(b, &src))
		var want, got []string
		for _, g := range src.Groups {
			for _, r := range g.Rules {
				want = append(want, g.Name+"/"+r.Alert+": "+r.Expr)
			}
		}
		for _, g := range m.prometheusRule.Spec.Groups {
			for _, r := range g.Rules {
				got = append(got, g.Name+"/"+r.Alert+": "+r.Expr.String())
			}
		}
		require.NotEmpty(t, want)
		require.Equal(t, want, got, "the PrometheusRule holds deploy/prometheus/alerts.yaml")
	} else {
		require.Nil(t, m.prometheusRule)
	}
	dash, ok := m.configMaps["flow-grafana-dashboard"]
	if lookup(t, vals, "metrics.grafanaDashboard.enabled") == true {
		require.True(t, ok)
		b, err := os.ReadFile("../grafana/flow.json")
		require.NoError(t, err)
		require.JSONEq(t, string(b), dash.Data["flow.json"])
		require.Equal(t, "1", dash.Labels["grafana_dashboard"], "Grafana's sidecar finds it")
	} else {
		require.False(t, ok)
	}
}

func checkNetworkPolicy(t *testing.T, m manifests) {
	t.Helper()
	np := m.networkPolicy
	require.NotNil(t, np)
	require.True(t, labels.SelectorFromSet(np.Spec.PodSelector.MatchLabels).Matches(labels.Set(m.deployment.Spec.Template.Labels)))
	var ports []string
	for _, r := range np.Spec.Ingress {
		for _, p := range r.Ports {
			ports = append(ports, p.Port.StrVal)
		}
	}
	require.Equal(t, []string{"grpc", "metrics"}, ports, "only the API and metrics ports are open")
}

// podFS writes the files the pod would see into root: each mounted
// volume's files, from the Secrets and ConfigMaps the chart rendered or,
// for those it references, from what the operator provides (the SPIFFE
// certificate cert-manager issues, from spiffe's ca.crt, tls.crt and
// tls.key; the database credentials, user flow and password dbPassword).
// It returns the container's environment, with secretKeyRef values
// resolved and the paths among them under root.
func podFS(t *testing.T, m manifests, c corev1.Container, root, spiffe string) map[string]string {
	t.Helper()
	external := map[string]map[string][]byte{} // Secrets the chart references and does not render
	readDir := func(dir string, names ...string) map[string][]byte {
		out := map[string][]byte{}
		for _, n := range names {
			b, err := os.ReadFile(filepath.Join(dir, n))
			require.NoError(t, err)
			out[n] = b
		}
		return out
	}
	credentials := map[string][]byte{"username": []byte("flow"), "password": []byte(dbPassword)}
	secretData := func(name string) map[string][]byte {
		if s, ok := m.secrets[name]; ok {
			return s.Data
		}
		if d, ok := external[name]; ok {
			return d
		}
		switch {
		case m.certificate != nil && m.certificate.Spec.SecretName == name, name == "site-spiffe", name == "flow-db-tls":
			// cert-manager writes ca.crt, tls.crt and tls.key.
			return readDir(spiffe, "ca.crt", "tls.crt", "tls.key")
		case name == "site-flow-data-key":
			return map[string][]byte{"flow-data-encryption-key": []byte(base64.StdEncoding.EncodeToString(make([]byte, 32)))}
		case strings.HasSuffix(name, ".credentials"):
			return credentials
		}
		t.Fatalf("the chart mounts Secret %s, neither rendered nor known to the test", name)
		return nil
	}
	vols := map[string]corev1.Volume{}
	for _, v := range m.deployment.Spec.Template.Spec.Volumes {
		vols[v.Name] = v
	}
	// Files as the kubelet writes them: the volume's defaultMode (0644
	// unset), with the pod's fsGroup owning them and g+r added; owned by
	// root (when the test runs as root).
	fsGroup := m.deployment.Spec.Template.Spec.SecurityContext.FSGroup
	write := func(dir string, data map[string][]byte, items []corev1.KeyToPath, defaultMode *int32) {
		require.NoError(t, os.MkdirAll(dir, 0o755))
		if items == nil {
			for k := range data {
				items = append(items, corev1.KeyToPath{Key: k, Path: k})
			}
		}
		mode := os.FileMode(0o644)
		if defaultMode != nil {
			mode = os.FileMode(*defaultMode)
		}
		if fsGroup != nil {
			mode |= 0o440
		}
		for _, it := range items {
			b, ok := data[it.Key]
			require.True(t, ok, "item %s is not in the volume's source", it.Key)
			p := filepath.Join(dir, it.Path)
			require.NoError(t, os.WriteFile(p, b, mode))
			require.NoError(t, os.Chmod(p, mode))
			if fsGroup != nil && os.Geteuid() == 0 {
				require.NoError(t, os.Chown(p, 0, int(*fsGroup)))
			}
		}
	}
	for _, vm := range c.VolumeMounts {
		v := vols[vm.Name]
		dir := filepath.Join(root, vm.MountPath)
		switch {
		case v.Secret != nil:
			write(dir, secretData(v.Secret.SecretName), v.Secret.Items, v.Secret.DefaultMode)
		case v.ConfigMap != nil:
			cm, ok := m.configMaps[v.ConfigMap.Name]
			require.True(t, ok, "ConfigMap %s is rendered", v.ConfigMap.Name)
			data := map[string][]byte{}
			for k, s := range cm.Data {
				data[k] = []byte(s)
			}
			write(dir, data, v.ConfigMap.Items, v.ConfigMap.DefaultMode)
		case v.EmptyDir != nil:
			require.NoError(t, os.MkdirAll(dir, 0o755))
		default:
			t.Fatalf("volume %s: unknown source", v.Name)
		}
	}
	out := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			b, ok := secretData(ref.Name)[ref.Key]
			require.True(t, ok, "%s: Secret %s has no key %s", e.Name, ref.Name, ref.Key)
			out[e.Name] = string(b)
		case e.ValueFrom != nil:
			t.Fatalf("%s: unexpected valueFrom", e.Name)
		case strings.HasPrefix(e.Value, "/"):
			out[e.Name] = filepath.Join(root, e.Value)
		default:
			out[e.Name] = e.Value
		}
	}
	return out
}

// dbPassword is the database password in the credentials Secret podFS
// provides.
const dbPassword = "chart-s3cret"

// devCerts writes a throwaway CA, server pair (valid for 127.0.0.1 and
// localhost) and client pairs (edge.WriteDevCerts) and returns the folder.
func devCerts(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "certs")
	require.NoError(t, edge.WriteDevCerts(dir, nil))
	return dir
}

// checkStartsFlow loads Flow's configuration (app.LoadConfig, what
// flow serve and flow db migrate do first) from the container's
// environment, over the files its mounts hold: every path the chart gives
// Flow exists where Flow reads it, and Flow accepts every setting. It
// returns the configuration and the folder that stands for the pod's /.
func checkStartsFlow(t *testing.T, m manifests) (app.Config, string) {
	t.Helper()
	flow := m.container(t, "flow")
	root := t.TempDir()
	vars := podFS(t, m, flow, root, devCerts(t))
	vars["FLOW_CONFIG_FILE"] = filepath.Join(root, app.DefaultFlowConfigFile) // Flow's default path, under root
	// Flow's certificates: the SPIFFE mount, its default when neither
	// CERTDIR nor FLOW_TLS_* is set.
	for _, name := range []string{"CERTDIR", "FLOW_TLS_CA", "FLOW_TLS_CERT", "FLOW_TLS_KEY"} {
		require.NotContains(t, vars, name)
	}
	for _, f := range []string{"ca.crt", "tls.crt", "tls.key"} {
		require.FileExists(t, filepath.Join(root, edge.SPIFFECertDir, f), "the SPIFFE mount is where Flow looks for its certificates")
	}
	require.FileExists(t, vars["FLOW_CONFIG_FILE"], "flowconfig.yaml is where Flow reads it")
	cfg, err := app.LoadConfig(func(k string) string { return vars[k] })
	require.NoError(t, err)
	if p := vars["DB_CERT_PATH"]; p != "" {
		require.Contains(t, cfg.DatabaseURL, "sslmode=verify-full")
		require.Contains(t, cfg.DatabaseURL, "sslcert=", "the client certificate beside the CA is used")
	} else {
		require.Contains(t, cfg.DatabaseURL, "sslmode=prefer")
	}
	require.NotEmpty(t, cfg.KeyPath)
	key, err := os.ReadFile(cfg.KeyPath)
	require.NoError(t, err)
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(key)))
	require.NoError(t, err, "the data-encryption key is base64")
	require.Len(t, raw, 32)
	require.Equal(t, filepath.Join(root, app.DefaultFlowConfigFile), cfg.SystemJobs.File)
	return cfg, root
}

// TestChartGeneratesDataKey: without a key given, the chart renders a
// Secret with a fresh one that Helm keeps on uninstall.
func TestChartGeneratesDataKey(t *testing.T) {
	t.Parallel()
	m := render(t, nil)
	s := m.secrets["flow-data-encryption-key"]
	require.NotNil(t, s)
	require.Equal(t, "keep", s.Annotations["helm.sh/resource-policy"])
	raw, err := base64.StdEncoding.DecodeString(string(s.Data["flow-data-encryption-key"]))
	require.NoError(t, err)
	require.Len(t, raw, 32)
	again := render(t, nil).secrets["flow-data-encryption-key"]
	require.NotEqual(t, s.Data, again.Data, "random, not a fixed key")

	m = render(t, set(nil, "dataEncryption.key.existingSecret", "mine"))
	require.NotContains(t, m.secrets, "flow-data-encryption-key")
	var vol *corev1.Volume
	for _, v := range m.deployment.Spec.Template.Spec.Volumes {
		if v.Name == "data-encryption-key" {
			vol = &v
		}
	}
	require.NotNil(t, vol)
	require.Equal(t, "mine", vol.Secret.SecretName)
}

// TestChartFilesMatchSources: Helm reads only files inside the chart, so
// the alert rules and the dashboard are copies; they must stay the same
// as the sources (deploy/prometheus, deploy/grafana) the telemetry tests
// check. Fix a failure with
// make generate (which copies them).
func TestChartFilesMatchSources(t *testing.T) {
	t.Parallel()
	for copy, src := range map[string]string{
		"flow/files/alerts.yaml": "../prometheus/alerts.yaml",
		"flow/files/flow.json":   "../grafana/flow.json",
	} {
		a, err := os.ReadFile(copy)
		require.NoError(t, err)
		b, err := os.ReadFile(src)
		require.NoError(t, err)
		require.Equal(t, string(b), string(a), "%s differs from %s", copy, src)
	}
}

// TestChartLint runs helm lint's checks (Chart.yaml, values against the
// schema, templates render and parse, objects well-formed) with the
// default values and with upstream's values file.
func TestChartLint(t *testing.T) {
	t.Parallel()
	for _, vs := range []valueSet{{"Defaults", nil}, {"UpstreamValuesFile", values(t, "upstream-values.yaml")}} {
		t.Run(vs.name, func(t *testing.T) {
			l := lint.All(chartDir, vs.vals, release.Namespace, false)
			for _, msg := range l.Messages {
				require.Less(t, msg.Severity, support.WarningSev, "helm lint: %s", msg)
			}
		})
	}
}

// TestChartRefusesBadValues: values.schema.json refuses misspelled keys
// and mistyped values, naming them, and the templates refuse what the
// schema cannot express; nothing renders.
func TestChartRefusesBadValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		vals map[string]any
		want string
	}{
		{"MisspelledTopLevel", map[string]any{"replica": 3}, "replica"},
		{"MisspelledNested", set(nil, "database.hots", "pg"), "hots"},
		{"MisspelledUpstreamKey", set(nil, "nicoCoreApi.uri", "x:1"), "uri"},
		{"ReplicasNotANumber", map[string]any{"replicas": "two"}, "replicas"},
		{"PortOutOfRange", set(nil, "ports.metrics", 70000), "metrics"},
		{"DatabasePortString", set(nil, "database.port", "5432"), "port"},
		{"FlowEnvUnknown", map[string]any{"flowEnv": "prod"}, "flowEnv"},
		{"DurationWithoutUnit", set(nil, "flowConfig.inventoryRunFrequency", "60"), "inventoryRunFrequency"},
		{"DisableNotBoolean", set(nil, "flowConfig.disableInventory", "yes"), "disableInventory"},
		{"ExtraEnvNotAList", set(nil, "extraEnv.flow", map[string]any{"FLOW_LOG_LEVEL": "debug"}), "flow"},
		{"ExtraEnvUnknownField", set(nil, "extraEnv.flow", []any{map[string]any{"name": "A", "vaule": "b"}}), "vaule"},
		{"DataKeyNotBase64Of32Bytes", set(nil, "dataEncryption.key.value", "c2hvcnQ="), "value"},
		{"ZeroDuration", set(nil, "flowConfig.leakDetectionInterval", "0s"), "flowConfig.leakDetectionInterval must not be zero"},
		{"GraceBelowShutdown", map[string]any{"terminationGracePeriodSeconds": 30}, "terminationGracePeriodSeconds (30) must exceed"},
		{"KeyTwice", set(set(nil, "dataEncryption.key.value", base64.StdEncoding.EncodeToString(make([]byte, 32))), "dataEncryption.key.existingSecret", "k"), "exclude each other"},
		{"NoImage", set(nil, "images.flow.repository", ""), "images.flow.repository (or global.image.repository)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := renderErr(t, tc.vals)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// upstreamEnv is the environment upstream's nico-flow chart gives its
// container for vals (spec upstream-delta §4.6, in its order): FLOW_ENV,
// the DB_* set, NICO_CORE_API_URL, the six TEMPORAL_* variables,
// FLOW_DATA_ENCRYPTION_KEY_PATH, then extraEnv.flow. DB_USER and
// DB_PASSWORD come from the credentials Secret.
func upstreamEnv(t *testing.T, vals map[string]any) []corev1.EnvVar {
	s := func(p string) string {
		switch v := lookup(t, vals, p).(type) {
		case string:
			return v
		case bool:
			return strconv.FormatBool(v)
		default:
			return strconv.Itoa(lookupInt(t, vals, p))
		}
	}
	secret := func(key string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: s("database.flow.credentialsSecret")}, Key: key}}
	}
	out := []corev1.EnvVar{
		{Name: "FLOW_ENV", Value: s("flowEnv")},
		{Name: "DB_NAME", Value: s("database.flow.name")},
		{Name: "DB_USER", ValueFrom: secret(s("database.flow.usernameKey"))},
		{Name: "DB_PASSWORD", ValueFrom: secret("password")},
		{Name: "DB_HOST", Value: s("database.host")},
		{Name: "DB_PORT", Value: s("database.port")},
		{Name: "DB_CERT_PATH", Value: s("database.certPath")},
		{Name: "NICO_CORE_API_URL", Value: s("nicoCoreApi.url")},
		{Name: "TEMPORAL_NAMESPACE", Value: s("temporal.namespace")},
		{Name: "TEMPORAL_HOST", Value: s("temporal.host")},
		{Name: "TEMPORAL_PORT", Value: s("temporal.port")},
		{Name: "TEMPORAL_CERT_PATH", Value: s("temporal.certPath")},
		{Name: "TEMPORAL_ENABLE_TLS", Value: s("temporal.enableTls")},
		{Name: "TEMPORAL_SERVER_NAME", Value: s("temporal.serverName")},
		{Name: "FLOW_DATA_ENCRYPTION_KEY_PATH", Value: "/var/run/secrets/flow-data-encryption/encryption-key"},
	}
	extra, _ := lookup(t, vals, "extraEnv.flow").([]any)
	for _, e := range extra {
		m := e.(map[string]any)
		out = append(out, corev1.EnvVar{Name: m["name"].(string), Value: m["value"].(string)})
	}
	return out
}

// upstreamMounts are upstream's mounts (path: volume source) for vals,
// but the Temporal certificate's.
func upstreamMounts(t *testing.T, vals map[string]any) map[string]string {
	key := lookup(t, vals, "dataEncryption.key.existingSecret").(string)
	if key == "" {
		key = "flow-data-encryption-key"
	}
	return map[string]string{
		edge.SPIFFECertDir:                      "secret " + lookup(t, vals, "certificate.name").(string),
		path.Dir(app.DefaultFlowConfigFile):     "configMap flow-config-files",
		"/var/run/secrets/flow-data-encryption": "secret " + key + " flow-data-encryption-key>encryption-key",
	}
}

// TestChartStartsFlowAsUpstreams renders the chart with an operator's
// nico-flow values file and checks, name by name, that the Deployment
// starts Flow with the settings upstream's chart would give it: the same
// variables with the same values (the TEMPORAL_* ones left out: Flow
// accepts them and does not need them), the same argument, the same
// Secrets and ConfigMap at the same paths, the same flowconfig.yaml keys,
// the same image rule; and that Flow loads both environments into the
// same configuration.
func TestChartStartsFlowAsUpstreams(t *testing.T) {
	t.Parallel()
	vals := values(t, "upstream-values.yaml")
	m := render(t, vals)
	flow := m.container(t, "flow")
	ours := env(t, flow)
	want := upstreamEnv(t, vals)
	accepted := map[string]bool{}
	for _, v := range app.ConfigVars {
		if strings.Contains(v.Meaning, "accepted, not needed") || strings.Contains(v.Meaning, "accepted and not needed") {
			accepted[v.Name] = true
		}
	}
	var upstreamNames []string
	for _, e := range want {
		upstreamNames = append(upstreamNames, e.Name)
		if strings.HasPrefix(e.Name, "TEMPORAL_") {
			require.True(t, accepted[e.Name], "Flow documents %s as accepted and not needed", e.Name)
			require.NotContains(t, ours, e.Name)
			continue
		}
		require.Contains(t, ours, e.Name, "upstream's chart sets %s", e.Name)
		require.Equal(t, e, ours[e.Name], "%s as upstream's chart sets it", e.Name)
	}
	// Ours adds only Flow's own settings, and keeps extraEnv last, as
	// upstream does.
	for _, e := range flow.Env {
		if !slices.Contains(upstreamNames, e.Name) {
			require.Contains(t, []string{"FLOW_LISTEN_ADDR", "FLOW_ADMIN_LISTEN_ADDR", "FLOW_SHUTDOWN_TIMEOUT"}, e.Name)
		}
	}
	n := len(flow.Env)
	require.Equal(t, "OTEL_EXPORTER_OTLP_ENDPOINT", flow.Env[n-2].Name)
	require.Equal(t, "FLOW_AUTHORIZATION_MODE", flow.Env[n-1].Name)
	require.Equal(t, ":50051", ours["FLOW_LISTEN_ADDR"].Value, "upstream's port, Flow's default")

	require.Contains(t, flow.Args, "--metrics-port=9360", "upstream's argument")
	require.Equal(t, "registry.example.com/flow:v1.4.0", flow.Image, "images.flow wins, as upstream")
	require.Equal(t, "nvcr.io/example-site/nico-flow:2.3.0",
		render(t, set(set(values(t, "upstream-values.yaml"), "images.flow.repository", ""), "images.flow.tag", "")).container(t, "flow").Image,
		"else <global.image.repository>/nico-flow:<global.image.tag>, as upstream")

	vols := map[string]corev1.Volume{}
	for _, v := range m.deployment.Spec.Template.Spec.Volumes {
		vols[v.Name] = v
	}
	got := map[string]string{}
	for _, vm := range flow.VolumeMounts {
		v := vols[vm.Name]
		switch {
		case v.Secret != nil:
			desc := "secret " + v.Secret.SecretName
			for _, it := range v.Secret.Items {
				desc += " " + it.Key + ">" + it.Path
			}
			got[vm.MountPath] = desc
		case v.ConfigMap != nil:
			got[vm.MountPath] = "configMap " + v.ConfigMap.Name
		}
	}
	require.Equal(t, upstreamMounts(t, vals), got)

	var fc map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(m.configMaps["flow-config-files"].Data[path.Base(app.DefaultFlowConfigFile)]), &fc))
	require.Equal(t, map[string]any{
		"inventory_run_frequency": "2m", "disable_inventory": false,
		"leak_detection_interval": "30s", "disable_leak_detection": false,
		"tracing": map[string]any{"enabled": false},
	}, fc, "upstream's flowconfig.yaml keys")
	require.Equal(t, "racks", m.deployment.Spec.Template.Annotations["example.com/team"])
	require.Equal(t, "flow", m.deployment.Spec.Template.Annotations["kubectl.kubernetes.io/default-container"])
	require.NotEmpty(t, m.deployment.Spec.Template.Annotations["checksum/config"])
	require.Equal(t, int64(10001), *flow.SecurityContext.RunAsUser, "containerSecurityContext merges over the chart's")
	require.True(t, *m.deployment.Spec.Template.Spec.AutomountServiceAccountToken, "upstream's automountServiceAccountToken")
	require.Equal(t, []corev1.LocalObjectReference{{Name: "flow-image-pull-secret"}}, m.deployment.Spec.Template.Spec.ImagePullSecrets)
	require.Contains(t, m.secrets, "flow-image-pull-secret")
	require.Equal(t, "site-controller", m.deployment.Labels["app.kubernetes.io/part-of"], "global.labels")

	cert := m.certificate
	require.NotNil(t, cert)
	require.Equal(t, "flow-certificate", cert.Spec.SecretName)
	require.Equal(t, "flow.flow.svc.cluster.local", cert.Spec.CommonName)
	require.Equal(t, []string{"flow.flow.svc.cluster.local", "flow.flow", "flow.site.example"}, cert.Spec.DNSNames)
	require.Equal(t, []string{"spiffe://nico.local/nico-system/sa/nico-flow"}, cert.Spec.URIs)
	require.Contains(t, cert.Spec.Usages, "client auth", "Flow presents it to NICo Core and PostgreSQL")

	// Flow reads both environments into the same configuration.
	cfg, ourRoot := checkStartsFlow(t, m)
	root := t.TempDir()
	upstreamVars := podFS(t, m, flow, root, devCerts(t))
	for _, e := range want {
		if e.ValueFrom == nil {
			upstreamVars[e.Name] = e.Value
			if strings.HasPrefix(e.Value, "/") {
				upstreamVars[e.Name] = filepath.Join(root, e.Value)
			}
		}
	}
	for _, name := range []string{"FLOW_LISTEN_ADDR", "FLOW_ADMIN_LISTEN_ADDR", "FLOW_SHUTDOWN_TIMEOUT"} {
		delete(upstreamVars, name)
	}
	upstreamVars["FLOW_CONFIG_FILE"] = filepath.Join(root, app.DefaultFlowConfigFile)
	up, err := app.LoadConfig(func(k string) string { return upstreamVars[k] })
	require.NoError(t, err)
	under := func(root string) func(string) string {
		return func(s string) string {
			s, err := url.QueryUnescape(s)
			require.NoError(t, err)
			return strings.ReplaceAll(s, root, "")
		}
	}
	rel, ourRel := under(root), under(ourRoot)
	require.Equal(t, rel(up.DatabaseURL), ourRel(cfg.DatabaseURL))
	require.Equal(t, rel(up.KeyPath), ourRel(cfg.KeyPath))
	require.Equal(t, up.Env, cfg.Env)
	require.Equal(t, up.NICoURL, cfg.NICoURL)
	require.Equal(t, up.ListenAddr, cfg.ListenAddr)
	require.Equal(t, up.AuthzMode, cfg.AuthzMode)
	require.Equal(t, up.Tracing, cfg.Tracing)
	require.Equal(t, up.SystemJobs.InventoryInterval, cfg.SystemJobs.InventoryInterval)
	require.Equal(t, 2*time.Minute, cfg.SystemJobs.InventoryInterval)
	require.Equal(t, 30*time.Second, cfg.SystemJobs.LeakDetectionInterval)
	require.Equal(t, "/var/run/secrets/flow-data-encryption/encryption-key", ourRel(cfg.KeyPath))
}
