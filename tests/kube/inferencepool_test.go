package kube

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/sluicegw/sluice/internal/discovery"
	"github.com/sluicegw/sluice/internal/sim"
	"github.com/sluicegw/sluice/tests/testenv"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// installPoolCRD creates deploy/crds/inferencepool.yaml (the CRD of our Go types) and waits until the API
// server serves the resource.
func installPoolCRD(t *testing.T, dyn dynamic.Interface) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "crds", "inferencepool.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	crd := &unstructured.Unstructured{Object: m}
	if _, err := dyn.Resource(crdGVR).Create(context.Background(), crd, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
		t.Fatalf("install the InferencePool CRD: %v", err)
	}
	eventually(t, time.Minute, "the InferencePool CRD established", func() error {
		_, err := dyn.Resource(discovery.PoolGVR).Namespace("default").List(context.Background(), metav1.ListOptions{})
		return err
	})
}

// pool is an InferencePool object, built from our Go types.
func pool(t *testing.T, name string, selector map[string]string, port int) *unstructured.Unstructured {
	t.Helper()
	p := discovery.InferencePool{
		TypeMeta:   metav1.TypeMeta{APIVersion: discovery.PoolGroup + "/" + discovery.PoolVersion, Kind: discovery.PoolKind},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: discovery.InferencePoolSpec{
			Selector:          discovery.LabelSelector{MatchLabels: selector},
			TargetPorts:       []discovery.Port{{Number: int32(port)}},
			EndpointPickerRef: discovery.EndpointPickerRef{Name: "unused-epp"},
		},
	}
	b, err := yaml.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

// TestInferencePoolDiscovery installs our InferencePool CRD and the chart with values-inferencepool.yaml
// (its Role must grant the pool), runs the gateway under the chart's ServiceAccount and drives the pool
// and its pods: no workers before the pool exists, the pool's pods once it does (requests served), an
// edited selector adds the pods it now matches and retires the ones it no longer does, new and deleted
// pods come and go, the API server refuses a pool without a port, and deleting the pool drains all.
func TestInferencePoolDiscovery(t *testing.T) {
	cp := startControlPlane(t, planeOptions{})
	dyn, err := dynamic.NewForConfig(cp.restConfig(adminToken))
	if err != nil {
		t.Fatal(err)
	}
	installPoolCRD(t, dyn)
	const ns = "inference" // the example values' namespace
	cp.createNamespace(ns)
	createKeys(t, cp, ns)
	const p0, p1, d0, d1 = "127.14.0.2", "127.14.0.3", "127.14.0.4", "127.14.0.5"
	engines := startEngines(t, sim.ModeInstant, map[string]sim.Role{p0: sim.RolePrefill, p1: sim.RolePrefill, d0: sim.RoleDecode, d1: sim.RoleDecode})
	port := enginePort(engines)
	eurl := func(ip string) string { return "http://" + net.JoinHostPort(ip, strconv.Itoa(port)) }
	const gwIP = "127.14.1.1"
	gwPort := testenv.FreePort(t, gwIP)
	objs := renderChart(t, ns, "deploy/examples/values-inferencepool.yaml", "serviceMonitor.enabled=false",
		"config.port="+strconv.Itoa(gwPort), "config.health-check-interval-secs=1")
	rel := install(t, cp, ns, objs)
	k := &kubelet{t: t, c: cp.Admin, ns: ns}
	inPool := func(name, role, pool string) {
		pod := enginePod(name, role)
		pod.Labels["pool"] = pool
		ip := map[string]string{"prefill-0": p0, "prefill-1": p1, "decode-0": d0, "decode-1": d1}[name]
		k.run(pod, ip, true)
	}
	inPool("prefill-0", "prefill", "a")
	inPool("decode-0", "decode", "a")
	inPool("prefill-1", "prefill", "b")

	g := rel.startGateway(t, k, "sluice-0", gwIP, gwPort)
	g.waitHealthy(t)
	pools := dyn.Resource(discovery.PoolGVR).Namespace(ns)
	const name = "sglang-pool" // the example values' inference-pool
	waitWorkers(t, g, "no pool, no workers", map[string]string{})

	created, err := pools.Create(context.Background(), pool(t, name, map[string]string{"pool": "a"}, port), metav1.CreateOptions{FieldValidation: "Strict"})
	if err != nil {
		t.Fatalf("create pool: %v", err)
	}
	waitWorkers(t, g, "the pool's pods become workers", map[string]string{eurl(p0): "ready", eurl(d0): "ready"})
	if got := chat(t, g); got != eurl(p0) {
		t.Fatalf("served by prefill %q, want %q", got, eurl(p0))
	}

	// Edit: the selector widens to every sglang pod, then narrows to pool b's.
	if err := unstructured.SetNestedStringMap(created.Object, map[string]string{"app.kubernetes.io/name": "sglang"}, "spec", "selector", "matchLabels"); err != nil {
		t.Fatal(err)
	}
	if created, err = pools.Update(context.Background(), created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("widen pool: %v", err)
	}
	waitWorkers(t, g, "a widened selector adds pods", map[string]string{eurl(p0): "ready", eurl(p1): "ready", eurl(d0): "ready"})
	inPool("decode-1", "decode", "b")
	waitWorkers(t, g, "a new pod of the pool is added", map[string]string{eurl(p0): "ready", eurl(p1): "ready", eurl(d0): "ready", eurl(d1): "ready"})
	if err := unstructured.SetNestedStringMap(created.Object, map[string]string{"pool": "b"}, "spec", "selector", "matchLabels"); err != nil {
		t.Fatal(err)
	}
	if _, err = pools.Update(context.Background(), created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("narrow pool: %v", err)
	}
	waitWorkers(t, g, "a narrowed selector retires pods", map[string]string{eurl(p1): "ready", eurl(d1): "ready"})
	if got := chat(t, g); got != eurl(p1) {
		t.Fatalf("served by prefill %q, want %q", got, eurl(p1))
	}
	k.terminate("decode-1")
	waitWorkers(t, g, "a terminating pod of the pool is drained away", map[string]string{eurl(p1): "ready"})
	k.finish("decode-1")

	// The CRD's schema is ours: a pool without a port never reaches the gateway.
	bad := pool(t, "no-port", map[string]string{"pool": "a"}, port)
	unstructured.RemoveNestedField(bad.Object, "spec", "targetPorts")
	if _, err := pools.Create(context.Background(), bad, metav1.CreateOptions{}); err == nil {
		t.Fatal("the API server accepted an InferencePool without targetPorts")
	}

	if err := pools.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitWorkers(t, g, "a deleted pool drains its workers", map[string]string{})
}
