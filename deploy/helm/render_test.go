package chart_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// chartDir is the chart under test.
const chartDir = "flow"

// release is the release every render uses.
var release = chartutil.ReleaseOptions{Name: "flow", Namespace: "flow", Revision: 1, IsInstall: true}

// loadChart loads the chart from disk, as helm install does.
func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir)
	require.NoError(t, err)
	return ch
}

// renderErr renders the chart with vals over its values.yaml, validating
// them against values.schema.json first as helm install does. The engine is
// strict: a template that reads a value missing from values.yaml fails.
func renderErr(t *testing.T, vals map[string]any) (map[string]string, error) {
	t.Helper()
	ch := loadChart(t)
	values, err := chartutil.ToRenderValues(ch, vals, release, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	return engine.Engine{Strict: true}.Render(ch, values)
}

// manifests is one render, each object decoded strictly into its API type.
type manifests struct {
	deployment     *appsv1.Deployment
	service        *corev1.Service
	configMaps     map[string]*corev1.ConfigMap
	secrets        map[string]*corev1.Secret
	serviceAccount *corev1.ServiceAccount
	pdb            *policyv1.PodDisruptionBudget
	networkPolicy  *networkingv1.NetworkPolicy
	serviceMonitor *monitoringv1.ServiceMonitor
	prometheusRule *monitoringv1.PrometheusRule
	certificate    *certificate
	kinds          []string // every object's kind/name, sorted
}

// certificate is the part of cert-manager's Certificate (cert-manager.io/v1)
// the chart writes, field names as cert-manager's API spells them; the
// strict decode fails on any other field.
type certificate struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		SecretName  string   `json:"secretName"`
		Duration    string   `json:"duration"`
		RenewBefore string   `json:"renewBefore"`
		CommonName  string   `json:"commonName"`
		DNSNames    []string `json:"dnsNames"`
		URIs        []string `json:"uris"`
		Usages      []string `json:"usages"`
		PrivateKey  struct {
			Algorithm      string `json:"algorithm"`
			Size           int    `json:"size"`
			RotationPolicy string `json:"rotationPolicy"`
		} `json:"privateKey"`
		IssuerRef struct {
			Name  string `json:"name"`
			Kind  string `json:"kind"`
			Group string `json:"group"`
		} `json:"issuerRef"`
	} `json:"spec"`
}

// render renders vals and decodes every object; any failure fails t.
func render(t *testing.T, vals map[string]any) manifests {
	t.Helper()
	files, err := renderErr(t, vals)
	require.NoError(t, err)
	m := manifests{configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if strings.HasSuffix(name, "NOTES.txt") {
			continue
		}
		for _, doc := range strings.Split(files[name], "\n---") {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			m.add(t, name, doc)
		}
	}
	sort.Strings(m.kinds)
	return m
}

// stripComments drops whole-line YAML comments (an empty template leaves
// only those).
func stripComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// add decodes one rendered object strictly: YAML to JSON refusing
// duplicate keys, then JSON into the kind's Go type refusing unknown
// fields.
func (m *manifests) add(t *testing.T, file, doc string) {
	t.Helper()
	js, err := yaml.YAMLToJSONStrict([]byte(doc))
	require.NoError(t, err, "%s: not YAML", file)
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	require.NoError(t, json.Unmarshal(js, &head), file)
	require.Equal(t, release.Namespace, head.Metadata.Namespace, "%s: %s %s in the release's namespace", file, head.Kind, head.Metadata.Name)
	strict := func(into any) {
		dec := json.NewDecoder(bytes.NewReader(js))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(into), "%s: %s %s does not decode strictly", file, head.Kind, head.Metadata.Name)
	}
	want := map[string]string{
		"Deployment": "apps/v1", "Service": "v1", "ConfigMap": "v1", "Secret": "v1", "ServiceAccount": "v1",
		"PodDisruptionBudget": "policy/v1", "NetworkPolicy": "networking.k8s.io/v1",
		"ServiceMonitor": "monitoring.coreos.com/v1", "PrometheusRule": "monitoring.coreos.com/v1", "Certificate": "cert-manager.io/v1",
	}
	require.Contains(t, want, head.Kind, "%s: unexpected kind", file)
	require.Equal(t, want[head.Kind], head.APIVersion, "%s: %s", file, head.Kind)
	m.kinds = append(m.kinds, head.Kind+"/"+head.Metadata.Name)
	switch head.Kind {
	case "Deployment":
		require.Nil(t, m.deployment, "one Deployment")
		m.deployment = &appsv1.Deployment{}
		strict(m.deployment)
	case "Service":
		m.service = &corev1.Service{}
		strict(m.service)
	case "ConfigMap":
		cm := &corev1.ConfigMap{}
		strict(cm)
		m.configMaps[cm.Name] = cm
	case "Secret":
		s := &corev1.Secret{}
		strict(s)
		m.secrets[s.Name] = s
	case "ServiceAccount":
		m.serviceAccount = &corev1.ServiceAccount{}
		strict(m.serviceAccount)
	case "PodDisruptionBudget":
		m.pdb = &policyv1.PodDisruptionBudget{}
		strict(m.pdb)
	case "NetworkPolicy":
		m.networkPolicy = &networkingv1.NetworkPolicy{}
		strict(m.networkPolicy)
	case "ServiceMonitor":
		m.serviceMonitor = &monitoringv1.ServiceMonitor{}
		strict(m.serviceMonitor)
	case "PrometheusRule":
		m.prometheusRule = &monitoringv1.PrometheusRule{}
		strict(m.prometheusRule)
	case "Certificate":
		m.certificate = &certificate{}
		strict(m.certificate)
	}
}

// container returns the pod's container (or init container) named name.
func (m manifests) container(t *testing.T, name string) corev1.Container {
	t.Helper()
	spec := m.deployment.Spec.Template.Spec
	for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return corev1.Container{}
}

// env returns the container's variables by name; it fails on a name set
// twice (Kubernetes keeps the last, silently).
func env(t *testing.T, c corev1.Container) map[string]corev1.EnvVar {
	t.Helper()
	out := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		require.NotContains(t, out, e.Name, "%s sets %s twice", c.Name, e.Name)
		out[e.Name] = e
	}
	return out
}

// values reads a values file from testdata.
func values(t *testing.T, file string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", file))
	require.NoError(t, err)
	var v map[string]any
	require.NoError(t, yaml.Unmarshal(b, &v))
	return v
}

// set returns vals with the dotted path set to v (maps created on the way).
func set(vals map[string]any, path string, v any) map[string]any {
	if vals == nil {
		vals = map[string]any{}
	}
	m := vals
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	m[parts[len(parts)-1]] = v
	return vals
}

// describe names a value set in failure messages.
func describe(vals map[string]any) string {
	b, _ := json.Marshal(vals)
	return fmt.Sprintf("values %s", b)
}

// TestChartOnCloudNativePG renders the chart with the values
// docs/deploy.md gives for a CloudNativePG cluster: Flow connects to the
// -rw Service over verified TLS with the CA alone, as the app Secret's
// user.
func TestChartOnCloudNativePG(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/deploy.md")
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)<!-- cloudnative-pg values: deploy/helm reads the next yaml block -->\n```yaml\n(.*?)```").FindSubmatch(doc)
	require.NotNil(t, m, "docs/deploy.md has the CloudNativePG values")
	var vals map[string]any
	require.NoError(t, yaml.Unmarshal(m[1], &vals))
	out := render(t, vals)
	for _, name := range []string{"flow", "migrate"} {
		e := env(t, out.container(t, name))
		require.Equal(t, "flow-db-rw.flow.svc", e["DB_HOST"].Value)
		require.Equal(t, "/var/run/secrets/flow-db-tls/ca.crt", e["DB_CERT_PATH"].Value)
		require.Equal(t, "flow-db-app", e["DB_USER"].ValueFrom.SecretKeyRef.Name)
		require.Equal(t, "password", e["DB_PASSWORD"].ValueFrom.SecretKeyRef.Key)
	}
	var secret string
	for _, v := range out.deployment.Spec.Template.Spec.Volumes {
		if v.Name == "db-tls" {
			secret = v.Secret.SecretName
		}
	}
	require.Equal(t, "flow-db-ca-crt", secret)
}
