package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/sluicegw/sluice/internal/sim"
	"github.com/sluicegw/sluice/tests/testenv"
)

const (
	apiKey   = "test-api-key"
	adminKey = "test-admin-key"
	model    = "sim-model"
)

// startEngines starts one simulated SGLang engine per IP, all on one port (the chart's
// service-discovery-port), as engine pods on a cluster network share their container port.
func startEngines(t *testing.T, mode sim.Mode, roles map[string]sim.Role) map[string]*sim.Engine {
	t.Helper()
	var ips []string
	for ip := range roles {
		ips = append(ips, ip)
	}
	port := testenv.FreePort(t, ips...)
	engines := map[string]*sim.Engine{}
	for ip, role := range roles {
		e, err := sim.New(sim.Config{Role: role, Host: ip, Port: port, Mode: mode}, testenv.Logger())
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Start(context.Background()); err != nil {
			t.Fatalf("sim %s on %s:%d: %v", role, ip, port, err)
		}
		t.Cleanup(func() { _ = e.Close() })
		engines[ip] = e
	}
	return engines
}

// enginePort is the one port the engines listen on.
func enginePort(engines map[string]*sim.Engine) int {
	for _, e := range engines {
		u, err := url.Parse(e.URL())
		if err != nil {
			return 0
		}
		n, _ := strconv.Atoi(u.Port())
		return n
	}
	return 0
}

// enginePod is a pod of deploy/examples/sglang-pd.yaml's Deployments: the labels the example values select on.
func enginePod(name, role string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"app.kubernetes.io/name": "sglang", "sluice.dev/role": role, "sluice.dev/model": model,
	}}}
}

func createKeys(t *testing.T, cp *controlPlane, ns string) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sluice-keys"}, StringData: map[string]string{"api-key": apiKey, "admin-api-key": adminKey}}
	if _, err := cp.Admin.CoreV1().Secrets(ns).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// workers is the gateway's worker list from the admin REST API: health by URL.
func workers(g *gateway) (map[string]string, error) {
	req, _ := http.NewRequest(http.MethodGet, g.url()+"/admin/v1/workers", nil)
	req.Header.Set("Authorization", "Bearer "+adminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /admin/v1/workers: %s", resp.Status)
	}
	var body struct {
		Workers []struct{ URL, Health string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, w := range body.Workers {
		m[w.URL] = w.Health
	}
	return m, nil
}

// waitWorkers polls until the gateway's workers are exactly want (URL -> health).
func waitWorkers(t *testing.T, g *gateway, what string, want map[string]string) {
	t.Helper()
	eventually(t, time.Minute, what, func() error {
		got, err := workers(g)
		if err != nil {
			return err
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("workers %v, want %v", got, want)
		}
		return nil
	})
}

// chat sends one chat completion with the official SDK and returns the prefill worker that served it.
func chat(t *testing.T, g *gateway) string {
	t.Helper()
	client := openai.NewClient(option.WithBaseURL(g.url()+"/v1/"), option.WithAPIKey(apiKey), option.WithMaxRetries(0))
	var resp *http.Response
	c, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
	}, option.WithResponseInto(&resp))
	if err != nil {
		t.Fatalf("chat completion: %v", err)
	}
	if len(c.Choices) == 0 || c.Choices[0].Message.Content == "" {
		t.Fatalf("empty completion: %+v", c)
	}
	return resp.Header.Get("X-Sluice-Prefill-Worker")
}

// TestDiscoveryWithChartRBAC installs the chart with the example PD values, runs the gateway with its
// ServiceAccount, and drives engine pods: workers come as pods turn ready, go NotReady and come back with
// readiness, drain on deletion; then the API server restarts after enough writes that the gateway's watch
// resumes from an expired resourceVersion (410), and discovery follows pods changed after that.
func TestDiscoveryWithChartRBAC(t *testing.T) {
	// Watches straight from etcd (no watch cache, so no bookmarks move a watcher's resourceVersion on) and
	// a compaction every second: a watch resumed from before a compaction gets 410, deterministically.
	cp := startControlPlane(t, planeOptions{apiserverArgs: []string{"--watch-cache=false", "--etcd-compaction-interval=1s"}})
	const ns = "inference" // the example values watch this namespace
	cp.createNamespace(ns)
	createKeys(t, cp, ns)
	const p0, p1, p2, d0, d1 = "127.13.0.2", "127.13.0.3", "127.13.0.4", "127.13.0.5", "127.13.0.6"
	engines := startEngines(t, sim.ModeInstant, map[string]sim.Role{p0: sim.RolePrefill, p1: sim.RolePrefill, p2: sim.RolePrefill, d0: sim.RoleDecode, d1: sim.RoleDecode})
	enginePort := enginePort(engines)
	eurl := func(ip string) string { return "http://" + net.JoinHostPort(ip, strconv.Itoa(enginePort)) }
	const gwIP = "127.13.1.1"
	gwPort := testenv.FreePort(t, gwIP)
	objs := renderChart(t, ns, "deploy/examples/values-pd.yaml", "serviceMonitor.enabled=false",
		"config.port="+strconv.Itoa(gwPort), "config.service-discovery-port="+strconv.Itoa(enginePort),
		"config.health-check-interval-secs=1", "config.admission-coordination=off") // one gateway: TestClusterAdmissionOnAPIServer runs the fleet
	rel := install(t, cp, ns, objs)
	k := &kubelet{t: t, c: cp.Admin, ns: ns}

	k.run(enginePod("prefill-0", "prefill"), p0, true)
	k.run(enginePod("decode-0", "decode"), d0, true)
	k.run(enginePod("prefill-1", "prefill"), p1, false) // not ready yet: not a worker
	// debug: client-go's reflector reports an expired watch (410) at V(4), which the gateway logs at debug.
	g := rel.startGateway(t, k, "sluice-0", gwIP, gwPort, "--log-level", "debug")
	g.waitHealthy(t)
	waitWorkers(t, g, "ready pods become workers", map[string]string{eurl(p0): "ready", eurl(d0): "ready"})
	if got := chat(t, g); got != eurl(p0) {
		t.Fatalf("served by prefill %q, want %q", got, eurl(p0))
	}

	k.setReady("prefill-1", true)
	waitWorkers(t, g, "a pod turning ready is added", map[string]string{eurl(p0): "ready", eurl(p1): "ready", eurl(d0): "ready"})
	k.setReady("prefill-0", false)
	waitWorkers(t, g, "a pod turning unready is NotReady", map[string]string{eurl(p0): "not_ready", eurl(p1): "ready", eurl(d0): "ready"})
	for range 3 {
		if got := chat(t, g); got != eurl(p1) {
			t.Fatalf("served by prefill %q while %s is not ready", got, eurl(p0))
		}
	}
	k.setReady("prefill-0", true)
	k.run(enginePod("decode-1", "decode"), d1, true)
	waitWorkers(t, g, "ready again", map[string]string{eurl(p0): "ready", eurl(p1): "ready", eurl(d0): "ready", eurl(d1): "ready"})
	k.terminate("decode-0") // deletionTimestamp: drained, then removed once idle
	waitWorkers(t, g, "a terminating pod is drained away", map[string]string{eurl(p0): "ready", eurl(p1): "ready", eurl(d1): "ready"})
	k.finish("decode-0")
	chat(t, g)

	// Watch expiry and restart: the pod watch's resourceVersion falls behind while other objects are
	// written, etcd compacts past it, and the watch the gateway resumes after the restart gets 410, so
	// the informer lists again.
	pods, err := cp.Admin.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	behind := pods.ResourceVersion // not older than what the gateway's watch has seen
	for i := range 20 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("churn-%d", i)}}
		if _, err := cp.Admin.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, time.Minute, "etcd compacted past the pod watch's resourceVersion", func() error {
		return expired(cp, ns, behind)
	})
	// etcd restarts: the API server's watch for the gateway resumes at its compacted revision and
	// ends in 410, which the gateway (at debug) logs before it lists again. An API server restart would
	// not do: its first answers after the restart can be RBAC refusals while its caches fill, and the
	// reflector lists again after those without ever resuming the old watch.
	cp.restartEtcd()
	const gone = "The resourceVersion for the provided watch is too old"
	eventually(t, time.Minute, "the gateway's pod watch expired (410)", func() error {
		if !strings.Contains(g.proc.output(), gone) {
			return errors.New("no 410 in the gateway's log")
		}
		return nil
	})
	cp.restartAPIServer()
	k.run(enginePod("prefill-2", "prefill"), p2, true)
	k.terminate("prefill-1")
	waitWorkers(t, g, "discovery follows pods after the restart", map[string]string{eurl(p0): "ready", eurl(p2): "ready", eurl(d1): "ready"})
	k.finish("prefill-1")
	chat(t, g)
}

// expired is nil once a pod watch from resourceVersion rv is refused with 410 Gone (its history compacted).
func expired(cp *controlPlane, ns, rv string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	w, err := cp.Admin.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		if st, ok := ev.Object.(*metav1.Status); ev.Type == watch.Error && ok && st.Code == http.StatusGone {
			return nil
		}
	}
	return fmt.Errorf("a watch from resourceVersion %s still runs", rv)
}
