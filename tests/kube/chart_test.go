package kube

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

// release is the chart installed into a namespace: the objects `helm template` rendered, applied.
type release struct {
	cp         *controlPlane
	ns         string
	objects    []*unstructured.Unstructured
	deployment *appsv1.Deployment
	config     string // the ConfigMap's config.yaml
}

// resources maps the kinds the chart renders to their API resource (true: namespaced).
var resources = map[string]struct {
	gvr        schema.GroupVersionResource
	namespaced bool
}{
	"v1/ServiceAccount":                               {schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}, true},
	"v1/ConfigMap":                                    {schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, true},
	"v1/Secret":                                       {schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, true},
	"v1/Service":                                      {schema.GroupVersionResource{Version: "v1", Resource: "services"}, true},
	"apps/v1/Deployment":                              {schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, true},
	"policy/v1/PodDisruptionBudget":                   {schema.GroupVersionResource{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"}, true},
	"rbac.authorization.k8s.io/v1/Role":               {schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}, true},
	"rbac.authorization.k8s.io/v1/RoleBinding":        {schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}, true},
	"rbac.authorization.k8s.io/v1/ClusterRole":        {schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}, false},
	"rbac.authorization.k8s.io/v1/ClusterRoleBinding": {schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"}, false},
}

// renderChart runs `helm template` on the chart with a values file and --set overrides, and decodes the
// objects. mutate may change them before they are applied (a test removing a verb from a Role).
func renderChart(t *testing.T, ns, valuesFile string, sets ...string) []*unstructured.Unstructured {
	t.Helper()
	args := []string{"tool", "-modfile=tools/helm.mod", "helm", "template", "sluice", "deploy/helm/sluice", "-n", ns, "-f", valuesFile}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = repoRoot
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.String())
	}
	var objs []*unstructured.Unstructured
	dec := k8syaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode rendered chart: %v", err)
		}
		if m == nil {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	return objs
}

// install applies the rendered objects with the admin token, as `helm install` would.
func install(t *testing.T, cp *controlPlane, ns string, objs []*unstructured.Unstructured) *release {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cp.restConfig(adminToken))
	if err != nil {
		t.Fatal(err)
	}
	r := &release{cp: cp, ns: ns, objects: objs}
	for _, o := range objs {
		key := o.GetAPIVersion() + "/" + o.GetKind()
		res, ok := resources[key]
		if !ok {
			t.Fatalf("chart renders %s %s, which this test does not know how to apply", key, o.GetName())
		}
		var ri dynamic.ResourceInterface = dyn.Resource(res.gvr)
		if res.namespaced {
			ri = dyn.Resource(res.gvr).Namespace(ns)
		}
		if _, err := ri.Create(context.Background(), o, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
			t.Fatalf("apply %s %s: %v", key, o.GetName(), err)
		}
		switch key {
		case "apps/v1/Deployment":
			r.deployment = &appsv1.Deployment{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, r.deployment); err != nil {
				t.Fatal(err)
			}
		case "v1/ConfigMap":
			data, _, _ := unstructured.NestedStringMap(o.Object, "data")
			r.config = data["config.yaml"]
		}
	}
	if r.deployment == nil || r.config == "" {
		t.Fatal("chart rendered no Deployment or no config.yaml")
	}
	return r
}

// gateway is one replica of the Deployment: its pod (written as the ReplicaSet controller and kubelet
// would) and the sluice process running as that pod's container.
type gateway struct {
	pod, ip string
	port    int
	proc    *process
}

func (g *gateway) url() string { return "http://" + net.JoinHostPort(g.ip, strconv.Itoa(g.port)) }

// startGateway creates a pod from the Deployment's template with the IP ip and runs its container: the
// container's args (config path mapped to the rendered ConfigMap), its env resolved as the kubelet does
// (fieldRef, secretKeyRef), and a kubeconfig holding a token of the pod's ServiceAccount in place of the
// mounted one. port is the gateway's port from the values (to poll /health). extra flags go last.
func (r *release) startGateway(t *testing.T, k *kubelet, name, ip string, port int, extra ...string) *gateway {
	t.Helper()
	spec := r.deployment.Spec.Template
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: spec.Labels, Annotations: spec.Annotations}, Spec: *spec.Spec.DeepCopy()}
	k.run(pod, ip, false)
	c := spec.Spec.Containers[0]
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(r.config), 0o600); err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, a := range c.Args {
		args = append(args, strings.ReplaceAll(a, "/etc/sluice/config.yaml", cfgPath))
	}
	// The pod's network namespace is its own IP; here the process binds that loopback address.
	args = append(append(args, "--host", ip), extra...)
	env := []string{"KUBECONFIG=" + r.cp.kubeconfig(r.ns, spec.Spec.ServiceAccountName)}
	for _, e := range c.Env {
		v, ok := r.resolveEnv(t, e, ip)
		if ok {
			env = append(env, e.Name+"="+v)
		}
	}
	g := &gateway{pod: name, ip: ip, port: port}
	g.proc = startProcessEnv(t, "sluice-"+name, bins.sluice, env, args...)
	t.Cleanup(func() {
		g.proc.stop()
		if t.Failed() {
			t.Log(g.proc.tail())
		}
	})
	return g
}

func (r *release) resolveEnv(t *testing.T, e corev1.EnvVar, ip string) (string, bool) {
	switch {
	case e.ValueFrom == nil:
		return e.Value, true
	case e.ValueFrom.FieldRef != nil:
		switch e.ValueFrom.FieldRef.FieldPath {
		case "status.podIP":
			return ip, true
		case "metadata.namespace":
			return r.ns, true
		}
		t.Fatalf("env %s: fieldRef %s not simulated", e.Name, e.ValueFrom.FieldRef.FieldPath)
	case e.ValueFrom.SecretKeyRef != nil:
		ref := e.ValueFrom.SecretKeyRef
		s, err := r.cp.Admin.CoreV1().Secrets(r.ns).Get(context.Background(), ref.Name, metav1.GetOptions{})
		if err != nil || s.Data[ref.Key] == nil {
			if ref.Optional != nil && *ref.Optional {
				return "", false
			}
			t.Fatalf("env %s: secret %s key %s: %v", e.Name, ref.Name, ref.Key, err)
		}
		return string(s.Data[ref.Key]), true
	case e.ValueFrom.ResourceFieldRef != nil:
		return "", false // limits the test does not set
	}
	return "", false
}

// waitHealthy polls the gateway's /health until it answers 200, failing if the process exits.
func (g *gateway) waitHealthy(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if g.proc.exited() {
			t.Fatalf("gateway %s exited: %v\n%s", g.pod, g.proc.err, g.proc.tail())
		}
		resp, err := http.Get(g.url() + "/health")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond) // polling interval: the child process's /health is re-checked
	}
	t.Fatalf("gateway %s not healthy after 2m\n%s", g.pod, g.proc.tail())
}

// eventually polls cond until it returns nil, failing with its last error after d.
func eventually(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	var err error
	for time.Now().Before(deadline) {
		if err = cond(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond) // polling interval: cond (API-server reads) is re-checked
	}
	t.Fatalf("%s: not within %s: %v", what, d, err)
}
