package e2e

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/gen/sluice/admin/v1/adminv1connect"
	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
)

// podTemplate is the metadata a workload stamps on its pods (labels, annotations).
type podTemplate struct {
	labels, annotations map[string]string
}

// simFleet is SGLang-style simulated engines, each on its own loopback address and all on one port,
// as pods on a cluster network share the engine port (--service-discovery-port).
type simFleet struct {
	port    int
	engines map[string]*sim.Engine // by IP
}

func startSimFleet(t *testing.T, prefill, decode []string) *simFleet {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(prefill[0], "0"))
	if err != nil {
		t.Skipf("loopback address %s unusable here: %v", prefill[0], err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	f := &simFleet{port: port, engines: map[string]*sim.Engine{}}
	start := func(ip string, role sim.Role) {
		e, err := sim.New(sim.Config{Role: role, Host: ip, Port: port, Mode: sim.ModeInstant}, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Start(context.Background()); err != nil {
			t.Fatalf("sim %s on %s:%d: %v", role, ip, port, err)
		}
		t.Cleanup(func() { _ = e.Close() })
		f.engines[ip] = e
	}
	for _, ip := range prefill {
		start(ip, sim.RolePrefill)
	}
	for _, ip := range decode {
		start(ip, sim.RoleDecode)
	}
	return f
}

func (f *simFleet) url(ip string) string {
	return "http://" + net.JoinHostPort(ip, strconv.Itoa(f.port))
}

// kubePods is the test's view of a cluster's API: pods created, changed and deleted through the
// fake clientset that the gateway's discovery watches.
type kubePods struct {
	t      *testing.T
	client *fake.Clientset
	ns     string
}

func (k *kubePods) pod(name, ip string, tmpl podTemplate, ready bool) *corev1.Pod {
	cond := corev1.ConditionFalse
	if ready {
		cond = corev1.ConditionTrue
	}
	labels, annotations := map[string]string{}, map[string]string{}
	for key, v := range tmpl.labels {
		labels[key] = v
	}
	for key, v := range tmpl.annotations {
		annotations[key] = v
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.ns, UID: types.UID(name + "-uid"), Labels: labels, Annotations: annotations},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: cond}},
		},
	}
}

func (k *kubePods) create(p *corev1.Pod) {
	k.t.Helper()
	if _, err := k.client.CoreV1().Pods(k.ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		k.t.Fatal(err)
	}
}

func (k *kubePods) update(p *corev1.Pod) {
	k.t.Helper()
	if _, err := k.client.CoreV1().Pods(k.ns).Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		k.t.Fatal(err)
	}
}

func (k *kubePods) delete(name string) {
	k.t.Helper()
	if err := k.client.CoreV1().Pods(k.ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		k.t.Fatal(err)
	}
}

// pdDiscoveryScenario runs a gateway (serve flags args) whose discovery watches namespace ns through
// a fake clientset, and drives pods made from the prefill and decode templates over simulated
// engines: readiness waits for both roles, PD requests go to the pods that are there, admin shows and
// protects them, and pods coming, going, moving and turning unready are followed.
func pdDiscoveryScenario(t *testing.T, ns string, prefill, decode podTemplate, args ...string) {
	const p0, p1, d0, d1 = "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"
	fleet := startSimFleet(t, []string{p0, p1}, []string{d0, d1})
	pods := &kubePods{t: t, client: fake.NewClientset(), ns: ns}
	args = append(args, "--service-discovery-port", strconv.Itoa(fleet.port))
	gw := startGateway(t, app.Options{KubeClient: pods.client}, args...)
	ctx := context.Background()
	admin := adminv1connect.NewAdminServiceClient(http.DefaultClient, gw.URL)
	client := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))

	workerByURL := func(url string) *adminv1.Worker {
		list, err := admin.ListWorkers(ctx, &adminv1.ListWorkersRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range list.GetWorkers() {
			if w.GetUrl() == url {
				return w
			}
		}
		return nil
	}
	waitHealth := func(url, health string) *adminv1.Worker {
		t.Helper()
		var w *adminv1.Worker
		waitFor(t, url+" "+health, 15*time.Second, func() bool {
			w = workerByURL(url)
			return w != nil && w.GetHealth() == health
		})
		return w
	}
	waitGone := func(url string) {
		t.Helper()
		waitFor(t, url+" removed", 15*time.Second, func() bool { return workerByURL(url) == nil })
	}
	readiness := func() int {
		resp, _ := get(t, gw.URL+"/readiness")
		return resp.StatusCode
	}
	// chat sends one PD request (n=1) and returns the prefill and decode workers that served it.
	chat := func() (prefillURL, decodeURL string) {
		t.Helper()
		var resp *http.Response
		out, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: simModel, MaxTokens: openai.Int(4),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
		}, option.WithResponseInto(&resp))
		if err != nil {
			t.Fatalf("chat: %v", err)
		}
		if len(out.Choices) != 1 || out.Choices[0].Message.Content == "" {
			t.Fatalf("chat = %+v", out)
		}
		return resp.Header.Get("X-Sluice-Prefill-Worker"), resp.Header.Get("X-Sluice-Worker")
	}
	withBootstrap := func(tmpl podTemplate, ip string) podTemplate {
		out := podTemplate{labels: tmpl.labels, annotations: map[string]string{}}
		for k, v := range tmpl.annotations {
			out.annotations[k] = v
		}
		out.annotations["sglang.ai/bootstrap-port"] = strconv.Itoa(fleet.engines[ip].BootstrapPort())
		return out
	}

	// No workers: not ready. A prefill pod alone: still not ready.
	if code := readiness(); code != http.StatusServiceUnavailable {
		t.Fatalf("readiness with no pods = %d, want 503", code)
	}
	prefillPod := pods.pod("sglang-prefill-0", p0, withBootstrap(prefill, p0), true)
	pods.create(prefillPod)
	pw := waitHealth(fleet.url(p0), "ready")
	if pw.GetSource() != "kubernetes" || pw.GetNamespace() != ns || pw.GetPod() != "sglang-prefill-0" ||
		pw.GetRole() != "prefill" || pw.GetBootstrapPort() != uint32(fleet.engines[p0].BootstrapPort()) ||
		len(pw.GetModels()) != 1 || pw.GetModels()[0] != simModel || pw.GetProtocol() != "sglang" {
		t.Fatalf("discovered prefill worker = %v", pw)
	}
	if code := readiness(); code != http.StatusServiceUnavailable {
		t.Fatalf("readiness with a prefill pod only = %d, want 503", code)
	}

	// A decode pod too: ready, and PD requests go to the two pods.
	pods.create(pods.pod("sglang-decode-0", d0, decode, true))
	waitHealth(fleet.url(d0), "ready")
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return readiness() == http.StatusOK })
	if p, d := chat(); p != fleet.url(p0) || d != fleet.url(d0) {
		t.Fatalf("served by %s + %s, want %s + %s", p, d, fleet.url(p0), fleet.url(d0))
	}
	if _, metrics := get(t, gw.URL+"/metrics"); !strings.Contains(string(metrics), "\nsluice_discovery_workers 2\n") ||
		!strings.Contains(string(metrics), "\nsluice_discovery_synced 1\n") {
		t.Fatalf("discovery metrics missing or wrong:\n%s", metrics)
	}

	// The admin API refuses to remove or drain a discovered worker, and says why.
	_, err := admin.RemoveWorker(ctx, &adminv1.RemoveWorkerRequest{Id: pw.GetId()})
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || apierror.CodeString(err) != apierror.CodeWorkerManaged ||
		!strings.Contains(err.Error(), ns+"/sglang-prefill-0") {
		t.Fatalf("RemoveWorker(discovered) = %v, want failed_precondition worker_managed naming the pod", err)
	}
	_, err = admin.DrainWorker(ctx, &adminv1.DrainWorkerRequest{Id: pw.GetId(), RemoveWhenIdle: true})
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("DrainWorker(discovered) = %v, want failed_precondition", err)
	}
	port := uint32(1)
	_, err = admin.UpdateWorker(ctx, &adminv1.UpdateWorkerRequest{Id: pw.GetId(), BootstrapPort: &port})
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("UpdateWorker(bootstrap_port of a discovered worker) = %v, want failed_precondition", err)
	}
	if _, err = admin.UpdateWorker(ctx, &adminv1.UpdateWorkerRequest{Id: pw.GetId(), Labels: map[string]string{"team": "a"}}); err != nil {
		t.Fatalf("labels of a discovered worker: %v", err)
	}
	req, _ := http.NewRequest(http.MethodDelete, gw.URL+"/admin/v1/workers/"+pw.GetId(), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("REST DELETE of a discovered worker = %d, want 409", resp.StatusCode)
	}
	if w := workerByURL(fleet.url(p0)); w == nil || w.GetHealth() != "ready" {
		t.Fatalf("refused removal changed the worker: %v", w)
	}

	// The decode pod goes, another comes: requests follow.
	pods.delete("sglang-decode-0")
	pods.create(pods.pod("sglang-decode-1", d1, decode, true))
	waitGone(fleet.url(d0))
	waitHealth(fleet.url(d1), "ready")
	if p, d := chat(); p != fleet.url(p0) || d != fleet.url(d1) {
		t.Fatalf("after the decode swap served by %s + %s, want %s + %s", p, d, fleet.url(p0), fleet.url(d1))
	}

	// The prefill pod moves to another address: replaced under the same id, requests follow.
	prefillPod.Status.PodIP = p1
	prefillPod.Annotations = withBootstrap(prefill, p1).annotations
	pods.update(prefillPod)
	moved := waitHealth(fleet.url(p1), "ready")
	if moved.GetId() != pw.GetId() || workerByURL(fleet.url(p0)) != nil {
		t.Fatalf("moved prefill has id %s (want %s); old address still listed: %v", moved.GetId(), pw.GetId(), workerByURL(fleet.url(p0)) != nil)
	}
	if p, _ := chat(); p != fleet.url(p1) {
		t.Fatalf("after the move served by prefill %s, want %s", p, fleet.url(p1))
	}

	// The only decode pod turns unready: not ready, and requests fail fast with 503 until it is back.
	decodePod := pods.pod("sglang-decode-1", d1, decode, false)
	pods.update(decodePod)
	waitHealth(fleet.url(d1), "not_ready")
	waitFor(t, "gateway not ready", 10*time.Second, func() bool { return readiness() == http.StatusServiceUnavailable })
	_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: simModel, MaxTokens: openai.Int(4), Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("request with no ready decode pod: %v, want 503", err)
	}
	decodePod.Status.Conditions[0].Status = corev1.ConditionTrue
	pods.update(decodePod)
	waitHealth(fleet.url(d1), "ready")
	if _, d := chat(); d != fleet.url(d1) {
		t.Fatalf("after recovery served by decode %s, want %s", d, fleet.url(d1))
	}
}

// TestKubernetesDiscoveryPD: discovery configured with flags, as the Rust gateway's users write them.
func TestKubernetesDiscoveryPD(t *testing.T) {
	t.Parallel()
	prefill := podTemplate{labels: map[string]string{"app": "sglang", "component": "prefill", "model": simModel}}
	decode := podTemplate{labels: map[string]string{"app": "sglang", "component": "decode"}} // model from the engine
	pdDiscoveryScenario(t, "inference", prefill, decode,
		"--pd-disaggregation", "--service-discovery",
		"--prefill-selector", "app=sglang", "--prefill-selector", "component=prefill",
		"--decode-selector", "app=sglang,component=decode",
		"--service-discovery-namespace", "inference", "--model-id-from", "label:model",
		"--prefill-max-inflight-requests-per-worker", "4",
	)
}
