package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/sluicegw/sluice/internal/config"
)

const (
	repoRoot = "../.."
	chartDir = "deploy/helm/sluice"
)

// helm returns the command that runs helm: $SLUICE_HELM, or helm built as a Go tool from
// tools/helm.mod (compiling it takes about two minutes once, so only when CI is set).
func helm(t *testing.T) []string {
	t.Helper()
	if p := os.Getenv("SLUICE_HELM"); p != "" {
		return []string{p}
	}
	if os.Getenv("CI") == "" {
		t.Skip("set CI=1 to build helm as a Go tool (go tool -modfile=tools/helm.mod helm), or SLUICE_HELM=/path/to/helm")
	}
	return []string{"go", "tool", "-modfile=tools/helm.mod", "helm"}
}

func runHelm(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	h := helm(t)
	cmd := exec.Command(h[0], append(h[1:], args...)...)
	cmd.Dir = repoRoot
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, errors.New(err.Error() + ": " + stderr.String())
	}
	return out, nil
}

// object is one rendered manifest, decoded strictly into its typed struct.
type object struct {
	kind, name string
	obj        any
}

// newTyped returns the typed struct of an apiVersion/kind; nil for kinds the chart must not render.
func newTyped(apiVersion, kind string) any {
	switch apiVersion + "/" + kind {
	case "v1/Namespace":
		return &corev1.Namespace{}
	case "v1/ServiceAccount":
		return &corev1.ServiceAccount{}
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}
	case "v1/Secret":
		return &corev1.Secret{}
	case "v1/Service":
		return &corev1.Service{}
	case "apps/v1/Deployment":
		return &appsv1.Deployment{}
	case "rbac.authorization.k8s.io/v1/Role":
		return &rbacv1.Role{}
	case "rbac.authorization.k8s.io/v1/RoleBinding":
		return &rbacv1.RoleBinding{}
	case "rbac.authorization.k8s.io/v1/ClusterRole":
		return &rbacv1.ClusterRole{}
	case "rbac.authorization.k8s.io/v1/ClusterRoleBinding":
		return &rbacv1.ClusterRoleBinding{}
	case "policy/v1/PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}
	case "monitoring.coreos.com/v1/ServiceMonitor":
		return &monitoringv1.ServiceMonitor{} // the Prometheus Operator's own Go type
	case "autoscaling/v2/HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}
	case "keda.sh/v1alpha1/ScaledObject":
		return &kedaScaledObject{} // chart_autoscaling_test.go: KEDA's Go module is not in go.mod
	}
	return nil
}

// decodeStrict splits a multi-document YAML stream and decodes every document into its k8s.io/api
// (or Prometheus Operator) type, rejecting unknown or misspelled fields and duplicate keys.
func decodeStrict(stream []byte) ([]object, error) {
	r := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(stream)))
	var out []object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, err
		}
		if tm.Kind == "" {
			if len(bytes.TrimSpace(regexp.MustCompile(`(?m)^#.*$`).ReplaceAll(doc, nil))) == 0 {
				continue // comments only
			}
			return nil, errors.New("document without kind:\n" + string(doc))
		}
		obj := newTyped(tm.APIVersion, tm.Kind)
		if obj == nil {
			return nil, errors.New("no typed struct for " + tm.APIVersion + " " + tm.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return nil, errors.New(tm.Kind + ": " + err.Error())
		}
		var meta struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		_ = yaml.Unmarshal(doc, &meta)
		out = append(out, object{kind: tm.Kind, name: meta.Metadata.Name, obj: obj})
	}
}

func find[T any](t *testing.T, objs []object, kind string) T {
	t.Helper()
	for _, o := range objs {
		if o.kind == kind {
			return o.obj.(T)
		}
	}
	var zero T
	t.Fatalf("no %s rendered", kind)
	return zero
}

// findNamed is the rendered object of this kind and name.
func findNamed[T metav1.Object](t *testing.T, objs []object, kind, name string) T {
	t.Helper()
	for _, o := range objs {
		if o.kind == kind && o.obj.(T).GetName() == name {
			return o.obj.(T)
		}
	}
	var zero T
	t.Fatalf("no %s %s rendered", kind, name)
	return zero
}

func kinds(objs []object) []string {
	var ks []string
	for _, o := range objs {
		ks = append(ks, o.kind)
	}
	slices.Sort(ks)
	return ks
}

// renderedConfig writes the rendered ConfigMap's config.yaml to a file and parses it with sluice's own
// config parser, as the container will.
func renderedConfig(t *testing.T, objs []object) (string, *config.Config) {
	t.Helper()
	cm := find[*corev1.ConfigMap](t, objs, "ConfigMap")
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(cm.Data["config.yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]string{"--config", path}, io.Discard)
	if err != nil {
		t.Fatalf("the rendered config does not parse: %v\n%s", err, cm.Data["config.yaml"])
	}
	return path, cfg
}

func TestHelmChart(t *testing.T) {
	t.Parallel()
	render := func(t *testing.T, args ...string) []object {
		t.Helper()
		if _, err := runHelm(t, append([]string{"lint", "--strict", chartDir}, args...)...); err != nil {
			t.Fatalf("helm lint: %v", err)
		}
		out, err := runHelm(t, append([]string{"template", "sluice", chartDir, "--namespace", "inference"}, args...)...)
		if err != nil {
			t.Fatalf("helm template: %v", err)
		}
		objs, err := decodeStrict(out)
		if err != nil {
			t.Fatalf("strict decode: %v", err)
		}
		return objs
	}
	checkPod := func(t *testing.T, d *appsv1.Deployment) *corev1.Container {
		t.Helper()
		spec := d.Spec.Template.Spec
		if len(spec.Containers) != 1 {
			t.Fatalf("%d containers", len(spec.Containers))
		}
		c := &spec.Containers[0]
		psc := spec.SecurityContext
		if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil {
			t.Errorf("pod security context = %+v", psc)
		}
		sc := c.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil ||
			*sc.AllowPrivilegeEscalation || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("container security context = %+v", sc)
		}
		if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/health" || c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/readiness" {
			t.Errorf("probes: liveness %+v readiness %+v", c.LivenessProbe, c.ReadinessProbe)
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("resources = %+v", c.Resources)
		}
		if !slices.Equal(c.Args, []string{"serve", "--config", "/etc/sluice/config.yaml"}) {
			t.Errorf("args = %q", c.Args)
		}
		return c
	}

	t.Run("default values", func(t *testing.T) {
		objs := render(t)
		if got, want := kinds(objs), []string{"ConfigMap", "Deployment", "Service", "Service", "ServiceAccount"}; !slices.Equal(got, want) {
			t.Fatalf("kinds = %v, want %v (no RBAC without discovery)", got, want)
		}
		d := find[*appsv1.Deployment](t, objs, "Deployment")
		checkPod(t, d)
		if a := d.Spec.Template.Spec.AutomountServiceAccountToken; a == nil || *a {
			t.Error("the API token is mounted although discovery is off")
		}
		_, cfg := renderedConfig(t, objs)
		if cfg.Discovery.Enabled || cfg.Server.Port != 30000 {
			t.Errorf("default config: %+v", cfg.Discovery)
		}
		var headless *corev1.Service
		for _, o := range objs {
			if s, ok := o.obj.(*corev1.Service); ok && s.Spec.ClusterIP == corev1.ClusterIPNone {
				headless = s
			}
		}
		if headless == nil || !headless.Spec.PublishNotReadyAddresses {
			t.Error("no headless Service publishing every replica")
		}
	})

	t.Run("PD example values", func(t *testing.T) {
		objs := render(t, "-f", "deploy/examples/values-pd.yaml")
		// Two Roles and bindings: discovery's, and cluster admission's (the example's two replicas share
		// the per-worker limit).
		want := []string{"ConfigMap", "Deployment", "PodDisruptionBudget", "Role", "Role", "RoleBinding", "RoleBinding", "Service", "Service", "ServiceAccount", "ServiceMonitor"}
		if got := kinds(objs); !slices.Equal(got, want) {
			t.Fatalf("kinds = %v, want %v", got, want)
		}
		role := findNamed[*rbacv1.Role](t, objs, "Role", "sluice-discovery")
		if role.Namespace != "inference" || len(role.Rules) != 1 || !slices.Equal(role.Rules[0].Resources, []string{"pods"}) ||
			!slices.Equal(role.Rules[0].Verbs, []string{"list", "watch"}) || !slices.Equal(role.Rules[0].APIGroups, []string{""}) {
			t.Errorf("role = %+v, want list/watch on pods in inference only", role)
		}
		rb := findNamed[*rbacv1.RoleBinding](t, objs, "RoleBinding", "sluice-discovery")
		sa := find[*corev1.ServiceAccount](t, objs, "ServiceAccount")
		if rb.RoleRef.Name != role.Name || len(rb.Subjects) != 1 || rb.Subjects[0].Name != sa.Name {
			t.Errorf("role binding = %+v", rb)
		}
		d := find[*appsv1.Deployment](t, objs, "Deployment")
		c := checkPod(t, d)
		if a := d.Spec.Template.Spec.AutomountServiceAccountToken; a == nil || !*a || d.Spec.Template.Spec.ServiceAccountName != sa.Name {
			t.Error("discovery's service account token is not mounted")
		}
		secretEnv := map[string]string{}
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				secretEnv[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
			}
		}
		if secretEnv["SLUICE_API_KEY"] != "sluice-keys/api-key" || secretEnv["SLUICE_ADMIN_API_KEY"] != "sluice-keys/admin-api-key" {
			t.Errorf("API keys from the existing secret: %v", secretEnv)
		}
		sm := find[*monitoringv1.ServiceMonitor](t, objs, "ServiceMonitor")
		if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "http" || sm.Spec.Endpoints[0].Path != "/metrics" {
			t.Errorf("service monitor endpoints = %+v", sm.Spec.Endpoints)
		}
		_, cfg := renderedConfig(t, objs)
		dc := cfg.Discovery
		if !dc.Enabled || cfg.Mode() != config.ModePD || dc.Namespace != "inference" || dc.Port != 30000 ||
			config.FormatSelector(dc.PrefillSelector) != "app.kubernetes.io/name=sglang,sluice.dev/role=prefill" ||
			dc.ModelIDFrom.String() != "label:sluice.dev/model" || cfg.Admission.MaxInflightPerWorker != 4 {
			t.Errorf("rendered config: mode %s, discovery %+v, admission %+v", cfg.Mode(), dc, cfg.Admission)
		}
		if cfg.Cluster.Mode != config.CoordinationKubernetes || *d.Spec.Replicas != 2 {
			t.Errorf("the example's %d replicas must share its per-worker limit: admission coordination %q", *d.Spec.Replicas, cfg.Cluster.Mode)
		}
		if d.Spec.Template.Spec.TerminationGracePeriodSeconds == nil || *d.Spec.Template.Spec.TerminationGracePeriodSeconds != 135 {
			t.Errorf("termination grace = %v, want shutdown-grace-period-secs 120 + 15", d.Spec.Template.Spec.TerminationGracePeriodSeconds)
		}
	})

	t.Run("cluster-wide example values", func(t *testing.T) {
		objs := render(t, "-f", "deploy/examples/values-regular-cluster.yaml")
		cr := find[*rbacv1.ClusterRole](t, objs, "ClusterRole")
		if !slices.Equal(cr.Rules[0].Verbs, []string{"list", "watch"}) {
			t.Errorf("cluster role = %+v", cr)
		}
		crb := find[*rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding")
		if crb.Subjects[0].Namespace != "inference" {
			t.Errorf("cluster role binding subject = %+v", crb.Subjects)
		}
		sec := find[*corev1.Secret](t, objs, "Secret")
		if sec.StringData["api-key"] != "change-me" {
			t.Errorf("secret = %v", sec.StringData)
		}
		cm := find[*corev1.ConfigMap](t, objs, "ConfigMap")
		if strings.Contains(cm.Data["config.yaml"], "change-me") {
			t.Error("an API key reached the ConfigMap")
		}
		_, cfg := renderedConfig(t, objs)
		if cfg.Server.AdminPort != 9090 || config.FormatSelector(cfg.Discovery.Selector) != "app=vllm,tier=serving" {
			t.Errorf("rendered config: %+v %+v", cfg.Server, cfg.Discovery)
		}
		c := checkPod(t, find[*appsv1.Deployment](t, objs, "Deployment"))
		if len(c.Ports) != 2 || c.Ports[0].ContainerPort != 8080 || c.Ports[1].ContainerPort != 9090 {
			t.Errorf("container ports = %+v", c.Ports)
		}
	})

	t.Run("cluster admission", func(t *testing.T) {
		objs := render(t, "--set", "config.pd-disaggregation=true", "--set", "config.prefill-max-inflight-requests-per-worker=4",
			"--set", "config.admission-coordination=kubernetes", "--set", "config.admin-port=9090", "--set", "replicaCount=3")
		role := find[*rbacv1.Role](t, objs, "Role")
		want := []rbacv1.PolicyRule{
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		}
		if role.Namespace != "inference" || !reflect.DeepEqual(role.Rules, want) {
			t.Errorf("admission role in %q: %+v, want %+v", role.Namespace, role.Rules, want)
		}
		rb := find[*rbacv1.RoleBinding](t, objs, "RoleBinding")
		if rb.RoleRef.Name != role.Name || rb.Subjects[0].Name != find[*corev1.ServiceAccount](t, objs, "ServiceAccount").Name {
			t.Errorf("admission role binding = %+v", rb)
		}
		d := find[*appsv1.Deployment](t, objs, "Deployment")
		c := checkPod(t, d)
		env := map[string]string{}
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
				env[e.Name] = e.ValueFrom.FieldRef.FieldPath
			}
		}
		if env["POD_IP"] != "status.podIP" || env["POD_NAMESPACE"] != "metadata.namespace" {
			t.Errorf("downward API env = %v", env)
		}
		if a := d.Spec.Template.Spec.AutomountServiceAccountToken; a == nil || !*a {
			t.Error("the API token is not mounted although cluster admission needs it")
		}
		_, cfg := renderedConfig(t, objs)
		if cc := cfg.Cluster; cc.Mode != config.CoordinationKubernetes || cc.Service != "sluice-headless" || cc.Namespace != "inference" {
			t.Errorf("rendered cluster config: %+v", cc)
		}
		var headless *corev1.Service
		for _, o := range objs {
			if s, ok := o.obj.(*corev1.Service); ok && s.Spec.ClusterIP == corev1.ClusterIPNone {
				headless = s
			}
		}
		if headless == nil || headless.Name != "sluice-headless" || len(headless.Spec.Ports) != 2 {
			t.Errorf("headless service = %+v", headless)
		}
		if _, err := runHelm(t, "template", "sluice", chartDir, "--set", "config.admission-coordination=kubernetes", "--set", "headlessService.enabled=false"); err == nil ||
			!strings.Contains(err.Error(), "set headlessService.enabled") {
			t.Errorf("cluster admission without the headless Service: %v", err)
		}
	})

	t.Run("example engines", func(t *testing.T) {
		b, err := os.ReadFile(filepath.Join(repoRoot, "deploy/examples/sglang-pd.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decodeStrict(b)
		if err != nil {
			t.Fatalf("strict decode: %v", err)
		}
		if got := kinds(objs); !slices.Equal(got, []string{"Deployment", "Deployment", "Namespace"}) {
			t.Fatalf("kinds = %v", got)
		}
	})

	t.Run("API keys in config are refused", func(t *testing.T) {
		_, err := runHelm(t, "template", "sluice", chartDir, "--set", "config.api-key=x")
		if err == nil || !strings.Contains(err.Error(), "would put a secret in a ConfigMap") {
			t.Fatalf("helm template with config.api-key: %v", err)
		}
	})

	t.Run("decode is strict", func(t *testing.T) {
		out, err := runHelm(t, "template", "sluice", chartDir)
		if err != nil {
			t.Fatal(err)
		}
		bad := bytes.Replace(out, []byte("  replicas: 1\n"), []byte("  replicas: 1\n  replicaz: 2\n"), 1)
		if bytes.Equal(bad, out) {
			t.Fatal("test setup: replicas line not found")
		}
		if _, err := decodeStrict(bad); err == nil || !strings.Contains(err.Error(), "replicaz") {
			t.Fatalf("decode of a misspelled field = %v, want an unknown-field error", err)
		}
	})
}

// TestChartValuesListEveryFlag: every `sluice serve` flag is reachable from the chart's values: listed
// (with its default) in values.yaml's config section, except the API keys, which come from auth.*.
func TestChartValuesListEveryFlag(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(repoRoot, chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range config.FlagNames() {
		switch name {
		case "config", "api-key", "admin-api-key":
			continue
		}
		if !regexp.MustCompile(`(?m)^  (# )?` + regexp.QuoteMeta(name) + `: `).Match(b) {
			t.Errorf("values.yaml config section does not list --%s", name)
		}
	}
}

// TestHelmExampleRoutesPD is the "done when": the config that `helm template` renders from
// deploy/examples/values-pd.yaml, pointed at pods made from the pod templates of
// deploy/examples/sglang-pd.yaml (over simulated engines), routes PD requests to them as they come and go.
func TestHelmExampleRoutesPD(t *testing.T) {
	t.Parallel()
	// One gateway here: the replicas' shared limit is tests/kube's TestClusterAdmissionOnAPIServer.
	out, err := runHelm(t, "template", "sluice", chartDir, "--namespace", "inference", "-f", "deploy/examples/values-pd.yaml",
		"--set", "config.admission-coordination=off")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeStrict(out)
	if err != nil {
		t.Fatal(err)
	}
	path, _ := renderedConfig(t, objs)

	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy/examples/sglang-pd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	engines, err := decodeStrict(b)
	if err != nil {
		t.Fatal(err)
	}
	templates := map[string]podTemplate{}
	for _, o := range engines {
		if d, ok := o.obj.(*appsv1.Deployment); ok {
			md := d.Spec.Template.ObjectMeta
			labels := map[string]string{}
			for k, v := range md.Labels {
				labels[k] = v
			}
			labels["sluice.dev/model"] = simModel // the simulators serve sim-model
			templates[md.Labels["sluice.dev/role"]] = podTemplate{labels: labels, annotations: md.Annotations}
		}
	}
	if len(templates) != 2 || templates["prefill"].annotations["sglang.ai/bootstrap-port"] == "" {
		t.Fatalf("pod templates from the example = %+v", templates)
	}
	pdDiscoveryScenario(t, "inference", templates["prefill"], templates["decode"], "--config", path, "--log-json=false")
}
