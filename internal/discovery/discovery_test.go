package discovery

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/config"
	"github.com/sluicegw/sluice/internal/testkit/poll"
	"github.com/sluicegw/sluice/internal/worker"
)

const ns = "inference"

func prefillLabels(model string) map[string]string {
	l := map[string]string{"app": "sglang", "role": "prefill"}
	if model != "" {
		l["model"] = model
	}
	return l
}

func decodeLabels(model string) map[string]string {
	l := map[string]string{"app": "sglang", "role": "decode"}
	if model != "" {
		l["model"] = model
	}
	return l
}

// mkPod returns a Running pod with the given readiness and IP.
func mkPod(name string, labels map[string]string, ip string, ready bool, mods ...func(*corev1.Pod)) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name), Labels: labels},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}},
		},
	}
	for _, m := range mods {
		m(p)
	}
	return p
}

func pdConfig() Config {
	return Config{
		PD:              true,
		PrefillSelector: prefillLabels(""), DecodeSelector: decodeLabels(""),
		Namespace: ns, Port: 30000,
		ModelIDFrom: config.ModelIDSource{Kind: config.ModelFromLabel, Key: "model"},
		Workers:     1, // FIFO: a later pod's event proves earlier ones were reconciled
		RetryBase:   10 * time.Millisecond, RetryMax: 50 * time.Millisecond,
	}
}

// engines is the test's Completer: it plays the engines' answers (protocol sglang, models by URL).
type engines struct {
	mu     sync.Mutex
	models map[string][]string // URL -> models the engine reports; absent = none
	calls  atomic.Int64
}

func (e *engines) set(url string, models ...string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.models[url] = models
}

func (e *engines) Complete(_ context.Context, s worker.Spec) (worker.Spec, error) {
	e.calls.Add(1)
	e.mu.Lock()
	defer e.mu.Unlock()
	s.Protocol = worker.ProtocolSGLang
	if len(s.Models) == 0 {
		s.Models = e.models[s.URL]
	}
	return s, nil
}

type harness struct {
	t       *testing.T
	client  *fake.Clientset
	reg     *worker.Registry
	checker *worker.HealthChecker
	disc    *Discovery
	engines *engines
	events  chan worker.Event
	dyn     *dynamicfake.FakeDynamicClient // InferencePools; set when cfg names one
}

// start runs discovery over a fake clientset (with objs) and a real registry and health checker whose
// probes succeed unless the discovery gate says the pod is not ready.
func start(t *testing.T, cfg Config, reactors func(*fake.Clientset), objs ...runtime.Object) *harness {
	t.Helper()
	h := &harness{t: t, client: fake.NewClientset(objs...), engines: &engines{models: map[string][]string{}}, events: make(chan worker.Event, 1024)}
	if reactors != nil {
		reactors(h.client)
	}
	h.reg = worker.NewRegistry(worker.RegistryOptions{})
	unsub := h.reg.Subscribe(func(ev worker.Event) {
		select {
		case h.events <- ev:
		default:
			panic("test event buffer full")
		}
	})
	t.Cleanup(unsub)
	var disc *Discovery
	healthy := worker.ProberFunc(func(context.Context, *worker.Worker) error { return nil })
	checker, err := worker.NewHealthChecker(h.reg, worker.ProberFunc(func(ctx context.Context, w *worker.Worker) error {
		return disc.Gate(healthy).Probe(ctx, w)
	}), worker.HealthConfig{Interval: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.checker = checker
	deps := Deps{Client: h.client, Registry: h.reg, Completer: h.engines, Checker: checker}
	if cfg.InferencePool != "" {
		h.dyn = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{PoolGVR: PoolKind + "List"})
		deps.Dynamic = h.dyn
	}
	disc, err = New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	h.disc = disc
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- disc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return h
}

// next waits for the next registry event matching want, failing after 10 s; other events are skipped.
func (h *harness) next(what string, want func(worker.Event) bool) worker.Event {
	h.t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		select {
		case ev := <-h.events:
			if want(ev) {
				return ev
			}
		case <-deadline.C:
			h.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func kind(k worker.EventKind, url string) func(worker.Event) bool {
	return func(ev worker.Event) bool { return ev.Kind == k && (url == "" || ev.Worker.URL() == url) }
}

func health(to worker.Health, url string) func(worker.Event) bool {
	return func(ev worker.Event) bool {
		return ev.Kind == worker.EventHealthChanged && ev.New == to && ev.Worker.URL() == url
	}
}

func (h *harness) create(p *corev1.Pod) {
	h.t.Helper()
	if _, err := h.client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) update(p *corev1.Pod) {
	h.t.Helper()
	if _, err := h.client.CoreV1().Pods(p.Namespace).Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) delete(name string) {
	h.t.Helper()
	if err := h.client.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

// barrier creates a ready marker decode pod and waits until it is Ready: with one reconciler taking
// keys in order, everything queued before it has been reconciled.
func (h *harness) barrier(name, ip string) *worker.Worker {
	h.t.Helper()
	url := "http://" + ip + ":30000"
	h.create(mkPod(name, decodeLabels("m1"), ip, true))
	return h.next("barrier "+name, health(worker.HealthReady, url)).Worker
}

func (h *harness) byURL(url string) (*worker.Worker, bool) {
	return h.reg.Snapshot().ByURL(url)
}

// TestPodLifecycle walks one prefill pod through added, ready, unready, ready again, IP change and
// termination with a request in flight, checking the registry's events at each step.
func TestPodLifecycle(t *testing.T) {
	t.Parallel()
	h := start(t, pdConfig(), nil)
	const url1, url2 = "http://10.0.0.1:30000", "http://10.0.0.5:30000"
	pod := mkPod("prefill-0", prefillLabels("m1"), "", false, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodPending
		p.Annotations = map[string]string{BootstrapPortAnnotation: "8998"}
	})
	h.create(pod)
	h.barrier("marker-1", "10.0.9.1")
	if _, ok := h.byURL(url1); ok || h.reg.Snapshot().Len() != 1 {
		t.Fatalf("a pending pod without IP was registered: %d workers", h.reg.Snapshot().Len())
	}

	// Running and ready with an IP: added, detected, probed at once.
	pod.Status.Phase, pod.Status.PodIP = corev1.PodRunning, "10.0.0.1"
	pod.Status.Conditions[0].Status = corev1.ConditionTrue
	h.update(pod)
	added := h.next("prefill added", kind(worker.EventAdded, url1)).Worker
	spec := added.Spec()
	if spec.Role != worker.RolePrefill || spec.BootstrapPort != 8998 || !slices.Equal(spec.Models, []string{"m1"}) ||
		spec.Source != worker.SourceKubernetes || spec.Namespace != ns || spec.Pod != "prefill-0" || spec.Protocol != worker.ProtocolSGLang {
		t.Fatalf("added spec = %+v", spec)
	}
	id := added.ID()
	h.next("prefill ready", health(worker.HealthReady, url1))

	// Unready: marked at once, and health checks cannot bring it back behind Kubernetes' back.
	pod.Status.Conditions[0].Status = corev1.ConditionFalse
	h.update(pod)
	h.next("prefill not ready", health(worker.HealthNotReady, url1))
	if got, err := h.checker.CheckNow(context.Background(), id); got != worker.HealthNotReady || !errors.Is(err, ErrPodNotReady) {
		t.Fatalf("CheckNow on an unready pod = %v, %v; want not_ready, ErrPodNotReady", got, err)
	}

	// Ready again: re-detected, replaced under the same id, ready.
	calls := h.engines.calls.Load()
	pod.Status.Conditions[0].Status = corev1.ConditionTrue
	h.update(pod)
	ev := h.next("prefill replaced on ready", kind(worker.EventReplaced, url1))
	if ev.Worker.ID() != id || h.engines.calls.Load() <= calls {
		t.Fatalf("replaced id %s (want %s), completer calls %d -> %d", ev.Worker.ID(), id, calls, h.engines.calls.Load())
	}
	h.next("prefill ready again", health(worker.HealthReady, url1))

	// IP change: replaced, same id, new URL.
	pod.Status.PodIP = "10.0.0.5"
	h.update(pod)
	ev = h.next("prefill replaced on IP change", kind(worker.EventReplaced, url2))
	if ev.Worker.ID() != id || ev.Prev.URL() != url1 {
		t.Fatalf("IP change: id %s prev %s; want %s and %s", ev.Worker.ID(), ev.Prev.URL(), id, url1)
	}
	if _, ok := h.byURL(url1); ok {
		t.Fatal("old URL still registered after the IP change")
	}
	w := h.next("prefill ready at new IP", health(worker.HealthReady, url2)).Worker

	// Terminating with a request in flight: drained at once, removed only once idle.
	guard := w.AcquireLoad()
	now := metav1.Now()
	pod.DeletionTimestamp = &now
	h.update(pod)
	h.next("prefill draining", health(worker.HealthDraining, url2))
	h.barrier("marker-2", "10.0.9.2")
	if _, ok := h.byURL(url2); !ok {
		t.Fatal("a draining worker with a request in flight was removed before its grace period")
	}
	guard.Release()
	h.next("prefill removed when idle", kind(worker.EventRemoved, url2))
	if got := h.disc.Served(); len(got) != 2 {
		t.Fatalf("served = %v, want the two markers", got)
	}
}

// TestDeletedPodRemovedAfterGrace: a deleted pod's worker is drained and removed once the pod's grace
// period has passed, even with a request still in flight.
func TestDeletedPodRemovedAfterGrace(t *testing.T) {
	t.Parallel()
	zero := int64(0)
	h := start(t, pdConfig(), nil, mkPod("decode-0", decodeLabels("m1"), "10.0.1.1", true, func(p *corev1.Pod) {
		p.Spec.TerminationGracePeriodSeconds = &zero
	}))
	const url = "http://10.0.1.1:30000"
	w := h.next("decode ready", health(worker.HealthReady, url)).Worker
	guard := w.AcquireLoad()
	defer guard.Release()
	h.delete("decode-0")
	h.next("decode draining", health(worker.HealthDraining, url))
	h.next("decode removed", kind(worker.EventRemoved, url))
	if h.reg.Snapshot().Len() != 0 {
		t.Fatalf("%d workers left", h.reg.Snapshot().Len())
	}
}

// TestUnknownModelNeverRegistered: without a model in the pod's metadata or from the engine the pod is
// not registered; once the engine names one, a retry registers it.
func TestUnknownModelNeverRegistered(t *testing.T) {
	t.Parallel()
	h := start(t, pdConfig(), nil)
	const url = "http://10.0.2.1:30000"
	h.engines.set(url, "unknown")
	h.create(mkPod("decode-x", decodeLabels(""), "10.0.2.1", true))
	for h.engines.calls.Load() < 3 { // retried with backoff
		select {
		case ev := <-h.events:
			t.Fatalf("unexpected registry event %v for %s", ev.Kind, ev.Worker.URL())
		case <-time.After(5 * time.Millisecond): // polling interval; the condition is re-checked
		}
	}
	if h.reg.Snapshot().Len() != 0 || h.disc.Refused() != 1 {
		t.Fatalf("a pod with an unknown model: %d workers, %d refused; want 0 and 1", h.reg.Snapshot().Len(), h.disc.Refused())
	}
	h.engines.set(url, "served-model")
	w := h.next("decode added once the model is known", kind(worker.EventAdded, url)).Worker
	// The registry announces the worker before register clears the pod's refusal.
	if !poll.Wait(5*time.Second, func() bool { return h.disc.Refused() == 0 }) {
		t.Fatalf("refused = %d after registration, want 0", h.disc.Refused())
	}
	if !slices.Equal(w.Models(), []string{"served-model"}) {
		t.Fatalf("models = %v", w.Models())
	}
}

// TestPeriodicRelistRepairsMissedEvents: every watch swallows its events, as a broken watch would;
// the periodic re-list alone must add the new pod and remove the deleted one.
func TestPeriodicRelistRepairsMissedEvents(t *testing.T) {
	t.Parallel()
	cfg := pdConfig()
	cfg.Resync = 100 * time.Millisecond
	var watchers []*watch.FakeWatcher
	var mu sync.Mutex
	h := start(t, cfg, func(c *fake.Clientset) {
		c.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
			w := watch.NewFake() // delivers nothing until stopped
			mu.Lock()
			watchers = append(watchers, w)
			mu.Unlock()
			return true, w, nil
		})
	}, mkPod("decode-old", decodeLabels("m1"), "10.0.3.1", true))
	h.next("initial pod ready", health(worker.HealthReady, "http://10.0.3.1:30000"))

	gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	if err := h.client.Tracker().Add(mkPod("decode-new", decodeLabels("m1"), "10.0.3.2", true)); err != nil {
		t.Fatal(err)
	}
	if err := h.client.Tracker().Delete(gvr, ns, "decode-old"); err != nil {
		t.Fatal(err)
	}
	h.next("missed add repaired", kind(worker.EventAdded, "http://10.0.3.2:30000"))
	h.next("missed delete repaired", kind(worker.EventRemoved, "http://10.0.3.1:30000"))
	mu.Lock()
	n := len(watchers)
	mu.Unlock()
	if n < 2 {
		t.Fatalf("%d watches opened; want a new one per re-list", n)
	}
}

// TestWatchErrorsBackOffAndResume: list and watch fail for a while; the registry keeps its worker,
// failures are counted, and once the API server answers again new pods are discovered.
func TestWatchErrorsBackOffAndResume(t *testing.T) {
	t.Parallel()
	var failWatch atomic.Bool
	failWatch.Store(true)
	var lists atomic.Int64
	h := start(t, pdConfig(), func(c *fake.Clientset) {
		c.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			if lists.Add(1) == 1 {
				return true, nil, apierrors.NewServiceUnavailable("apiserver restarting")
			}
			return false, nil, nil
		})
		c.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
			if failWatch.Load() {
				return true, nil, apierrors.NewServiceUnavailable("apiserver restarting")
			}
			return false, nil, nil
		})
	}, mkPod("decode-0", decodeLabels("m1"), "10.0.4.1", true))
	const url = "http://10.0.4.1:30000"
	h.next("pod discovered despite a failed first list", health(worker.HealthReady, url))
	if !poll.Wait(10*time.Second, func() bool { return h.disc.WatchFailures() >= 2 }) {
		t.Fatalf("watch failures = %d, want >= 2", h.disc.WatchFailures())
	}
	if w, ok := h.byURL(url); !ok || w.Health() != worker.HealthReady {
		t.Fatal("the worker was lost or unready while the watch failed")
	}
	failWatch.Store(false)
	h.create(mkPod("decode-1", decodeLabels("m1"), "10.0.4.2", true))
	h.next("new pod after the watch resumed", health(worker.HealthReady, "http://10.0.4.2:30000"))
}

// TestQueuedRequestServedByNewPod: a request waiting in prefill admission (the only prefill worker is
// at its limit) is granted on a prefill pod discovered while it waits.
func TestQueuedRequestServedByNewPod(t *testing.T) {
	t.Parallel()
	h := start(t, pdConfig(), nil, mkPod("prefill-a", prefillLabels("m1"), "10.0.5.1", true))
	adm, err := admission.New(admission.Settings{MaxInflightPerWorker: 1, QueueSize: 10, QueueTimeout: 30 * time.Second}, admission.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.reg.Subscribe(func(worker.Event) { adm.Wake() })) // as the gateway wires it
	h.next("prefill-a ready", health(worker.HealthReady, "http://10.0.5.1:30000"))

	req := admission.Request{Queue: "m1", Select: func(hasCapacity func(string) bool) (string, error) {
		now := time.Now()
		for _, w := range h.reg.Snapshot().Candidates(worker.RolePrefill, "m1") {
			if w.Routable(now) && hasCapacity(w.URL()) {
				return w.URL(), nil
			}
		}
		return "", admission.ErrNoCapacity
	}}
	ctx := context.Background()
	first, err := adm.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Release(admission.ReleaseCompleted)
	type result struct {
		slot *admission.Slot
		err  error
	}
	second := make(chan result, 1)
	go func() {
		s, err := adm.Acquire(ctx, req)
		second <- result{s, err}
	}()
	poll.Until(t, "the second request queued", 10*time.Second, func() bool { return adm.Status().QueuedTotal == 1 })

	h.create(mkPod("prefill-b", prefillLabels("m1"), "10.0.5.2", true))
	select {
	case r := <-second:
		if r.err != nil {
			t.Fatalf("queued request: %v", r.err)
		}
		defer r.slot.Release(admission.ReleaseCompleted)
		if r.slot.Worker() != "http://10.0.5.2:30000" {
			t.Fatalf("queued request granted on %s, want the new pod", r.slot.Worker())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("queued request was not woken by the new worker")
	}
}

// TestFlagWorkersCoexist: a worker registered by a flag is never touched; a pod at the same address is
// left out until the flag worker goes away.
func TestFlagWorkersCoexist(t *testing.T) {
	t.Parallel()
	h := start(t, pdConfig(), nil)
	const url = "http://10.0.6.1:30000"
	flagW, err := h.reg.Add(worker.Spec{URL: url, Role: worker.RoleDecode, Protocol: worker.ProtocolSGLang, Models: []string{"m1"}, Source: worker.SourceFlag})
	if err != nil {
		t.Fatal(err)
	}
	h.create(mkPod("decode-clash", decodeLabels("m1"), "10.0.6.1", true))
	h.barrier("marker", "10.0.6.2")
	if w, _ := h.byURL(url); w != flagW || w.Spec().Source != worker.SourceFlag {
		t.Fatal("discovery took over a flag worker")
	}
	h.delete("decode-clash")
	h.barrier("marker-2", "10.0.6.3")
	if w, ok := h.byURL(url); !ok || w != flagW {
		t.Fatal("deleting a clashing pod removed the flag worker")
	}
	if err := h.reg.Remove(flagW.ID()); err != nil {
		t.Fatal(err)
	}
	h.create(mkPod("decode-clash", decodeLabels("m1"), "10.0.6.1", true))
	ev := h.next("pod registered once the address is free", kind(worker.EventAdded, url))
	if ev.Worker.Spec().Source != worker.SourceKubernetes {
		t.Fatalf("source = %q", ev.Worker.Spec().Source)
	}
}

func TestNewRejects(t *testing.T) {
	t.Parallel()
	good := pdConfig()
	deps := Deps{Client: fake.NewClientset(), Registry: worker.NewRegistry(worker.RegistryOptions{}), Completer: &engines{}}
	for _, tt := range []struct {
		name string
		cfg  func(*Config)
		deps func(*Deps)
	}{
		{"bad port", func(c *Config) { c.Port = 0 }, nil},
		{"pd without selectors", func(c *Config) { c.PrefillSelector, c.DecodeSelector = nil, nil }, nil},
		{"regular without selector", func(c *Config) { c.PD = false }, nil},
		{"no client", nil, func(d *Deps) { d.Client = nil }},
		{"no completer", nil, func(d *Deps) { d.Completer = nil }},
	} {
		c, d := good, deps
		if tt.cfg != nil {
			tt.cfg(&c)
		}
		if tt.deps != nil {
			tt.deps(&d)
		}
		if _, err := New(c, d); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: err = %v, want ErrInvalidConfig", tt.name, err)
		}
	}
}

func Example() {
	client := fake.NewClientset(mkPod("decode-0", decodeLabels("llama"), "10.1.0.7", true))
	reg := worker.NewRegistry(worker.RegistryOptions{StartReady: true})
	added := make(chan string, 1)
	defer reg.Subscribe(func(ev worker.Event) {
		if ev.Kind == worker.EventAdded {
			added <- fmt.Sprint(ev.Worker.Role(), " ", ev.Worker.URL(), " ", ev.Worker.Models(), " pod ", ev.Worker.Spec().Pod)
		}
	})()
	d, err := New(Config{PD: true, DecodeSelector: map[string]string{"role": "decode"}, Port: 30000,
		ModelIDFrom: config.ModelIDSource{Kind: config.ModelFromLabel, Key: "model"}},
		Deps{Client: client, Registry: reg, Completer: CompleterFunc(func(_ context.Context, s worker.Spec) (worker.Spec, error) {
			s.Protocol = worker.ProtocolSGLang // a real gateway asks the engine
			return s, nil
		})})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- d.Run(ctx) }()
	fmt.Println(<-added)
	cancel()
	<-done
	// Output: decode http://10.1.0.7:30000 [llama] pod decode-0
}
