package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/sluicegw/sluice/internal/config"
	"github.com/sluicegw/sluice/internal/worker"
)

// Errors, by class. Pod problems (logged, the pod is left out until it changes):
var (
	// ErrAmbiguousRole: a pod matches both the prefill and the decode selector.
	ErrAmbiguousRole = errors.New("ambiguous worker role")
	// ErrBadAnnotation: a pod annotation discovery reads is malformed.
	ErrBadAnnotation = errors.New("bad pod annotation")
)

// Registration problems (logged, retried with backoff and at every re-list):
var (
	// ErrUnknownModel: neither the pod's metadata nor the engine names the model.
	ErrUnknownModel = errors.New("model unknown")
	// ErrRefused: the Completer refused the worker (detection failed or contradicts the pod).
	ErrRefused = errors.New("worker refused by detection")
)

// Health gate and configuration:
var (
	// ErrPodNotReady is what gated health probes report while Kubernetes calls the pod not ready.
	ErrPodNotReady = errors.New("pod not ready")
	// ErrInvalidConfig wraps every configuration problem New reports.
	ErrInvalidConfig = errors.New("invalid discovery configuration")
)

// Completer fills in what a worker spec leaves out (protocol, models) by asking the engine, or refuses
// the worker with an error. Discovery keeps URL, role, pod and (when the pod has one) bootstrap port and
// model as it set them.
type Completer interface {
	Complete(ctx context.Context, spec worker.Spec) (worker.Spec, error)
}

// CompleterFunc adapts a function to Completer.
type CompleterFunc func(ctx context.Context, spec worker.Spec) (worker.Spec, error)

// Complete calls f.
func (f CompleterFunc) Complete(ctx context.Context, spec worker.Spec) (worker.Spec, error) {
	return f(ctx, spec)
}

// Checker probes one worker at once; *worker.HealthChecker implements it.
type Checker interface {
	CheckNow(ctx context.Context, id string) (worker.Health, error)
}

// Config says which pods are workers and how often to re-list. Build it from config.DiscoveryConfig;
// zero durations and counts take the defaults in their comments.
type Config struct {
	// PD selects prefill/decode roles (PrefillSelector, DecodeSelector) instead of Selector.
	PD                                        bool
	Selector, PrefillSelector, DecodeSelector map[string]string
	// Namespace watched; empty = all namespaces.
	Namespace string
	// Port is the engine's port on every pod.
	Port int
	// Scheme is the workers' URL scheme: "http" (the default when empty) or "grpc" (the engines'
	// own gRPC).
	Scheme string
	// ModelIDFrom is where a pod's model id is read; zero = ask the engine.
	ModelIDFrom config.ModelIDSource
	// Resync is the period of the full re-list from the API server (5 min).
	Resync time.Duration
	// Workers is the number of reconciler goroutines (4): detection of a new engine may take seconds.
	Workers int
	// InferencePool names the InferencePool in Namespace whose selector (ANDed with the selectors
	// above) and target port pick the pods; Port is then unused, and a regular-mode Selector optional.
	InferencePool string
	// ZoneLabel, RackLabel, NodeLabel and RevisionLabel are the pod labels of a worker's topology
	// and engine revision (the reserved worker labels of worker/topology.go); empty = not read.
	ZoneLabel, RackLabel, NodeLabel, RevisionLabel string
	// RetryBase and RetryMax bound the backoff of a pod that could not be registered (500 ms, 1 min).
	RetryBase, RetryMax time.Duration
}

// FromConfig builds a Config from the gateway's validated settings.
func FromConfig(c config.DiscoveryConfig, pd bool) Config {
	return Config{
		PD: pd, Selector: c.Selector, PrefillSelector: c.PrefillSelector, DecodeSelector: c.DecodeSelector,
		Namespace: c.Namespace, Port: c.Port, Scheme: c.Protocol, ModelIDFrom: c.ModelIDFrom, InferencePool: c.InferencePool,
	}
}

// WithPlacement returns c reading workers' topology and revision from the pod labels p names.
func (c Config) WithPlacement(p config.PairingConfig) Config {
	c.ZoneLabel, c.RackLabel, c.NodeLabel, c.RevisionLabel = p.ZoneLabel, p.RackLabel, p.NodeLabel, p.RevisionLabel
	return c
}

func (c Config) normalized() (Config, error) {
	if c.Resync <= 0 {
		c.Resync = 5 * time.Minute
	}
	if c.Workers <= 0 {
		c.Workers = 4
	}
	if c.RetryBase <= 0 {
		c.RetryBase = 500 * time.Millisecond
	}
	if c.RetryMax <= 0 {
		c.RetryMax = time.Minute
	}
	if c.Scheme == "" {
		c.Scheme = "http"
	}
	var errs []error
	pool := c.InferencePool != ""
	if pool && c.Namespace == "" {
		errs = append(errs, fmt.Errorf("%w: an InferencePool needs its namespace", ErrInvalidConfig))
	}
	if !pool && (c.Port < 1 || c.Port > 65535) {
		errs = append(errs, fmt.Errorf("%w: port %d out of range", ErrInvalidConfig, c.Port))
	}
	if c.Scheme != "http" && c.Scheme != "grpc" {
		errs = append(errs, fmt.Errorf("%w: scheme %q: want http or grpc", ErrInvalidConfig, c.Scheme))
	}
	if c.PD && len(c.PrefillSelector) == 0 && len(c.DecodeSelector) == 0 {
		errs = append(errs, fmt.Errorf("%w: PD mode needs a prefill or decode selector", ErrInvalidConfig))
	}
	if !c.PD && len(c.Selector) == 0 && !pool {
		errs = append(errs, fmt.Errorf("%w: a selector is required", ErrInvalidConfig))
	}
	return c, errors.Join(errs...)
}

// Deps are what discovery works on. Client, Registry and Completer are required.
type Deps struct {
	Client kubernetes.Interface
	// Dynamic reads InferencePools; required with Config.InferencePool.
	Dynamic   dynamic.Interface
	Registry  *worker.Registry
	Completer Completer
	// Checker probes a new worker at once so that a healthy engine is routable without waiting for the
	// next health round; nil leaves it to the health checker's rounds.
	Checker Checker
	Logger  *slog.Logger
}

// Discovery keeps the registry in step with the pods. See the package doc.
type Discovery struct {
	cfg        Config
	d          Deps
	log        *slog.Logger
	classify   atomic.Pointer[classifier] // replaced when the InferencePool changes
	retarget   chan struct{}              // the classifier changed: list pods again under it
	started    atomic.Bool
	synced     atomic.Bool
	store      atomic.Pointer[cache.Store]
	watchFails atomic.Int64

	// mu guards the fields below; never held across registry, Completer, checker or API calls.
	mu       sync.Mutex
	served   map[string]*served // by pod key (namespace/name)
	gated    map[string]bool    // worker ids whose pod is not ready
	refusals map[string]string  // pod key -> last refusal logged, to warn once per reason

	drains sync.WaitGroup
}

// served is a pod discovery has registered as a worker.
type served struct {
	view    podView // as registered
	id      string  // worker id
	unready bool
}

// New checks cfg and deps; nothing runs until Run.
func New(cfg Config, deps Deps) (*Discovery, error) {
	cfg, err := cfg.normalized()
	if err != nil {
		return nil, err
	}
	if deps.Client == nil || deps.Registry == nil || deps.Completer == nil {
		return nil, fmt.Errorf("%w: client, registry and completer are required", ErrInvalidConfig)
	}
	if cfg.InferencePool != "" && deps.Dynamic == nil {
		return nil, fmt.Errorf("%w: an InferencePool needs a dynamic client", ErrInvalidConfig)
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	c := classifier{
		pd: cfg.PD, selector: cfg.Selector, prefillSelector: cfg.PrefillSelector, decodeSelector: cfg.DecodeSelector,
		port: cfg.Port, scheme: cfg.Scheme, modelFrom: cfg.ModelIDFrom, poolMode: cfg.InferencePool != "",
		zoneLabel: cfg.ZoneLabel, rackLabel: cfg.RackLabel, nodeLabel: cfg.NodeLabel, revisionLabel: cfg.RevisionLabel,
	}
	d := &Discovery{
		cfg: cfg, d: deps, log: deps.Logger.With("component", "discovery"), retarget: make(chan struct{}, 1),
		served: map[string]*served{}, gated: map[string]bool{}, refusals: map[string]string{},
	}
	d.classify.Store(&c)
	return d, nil
}

func (d *Discovery) classifier() *classifier { return d.classify.Load() }

// Synced reports whether the first list of pods has completed.
func (d *Discovery) Synced() bool { return d.synced.Load() }

// WatchFailures counts list and watch errors since Run started (each one was retried with backoff).
func (d *Discovery) WatchFailures() int64 { return d.watchFails.Load() }

// Gate wraps a health prober: a worker whose pod Kubernetes calls not ready fails its probes with
// ErrPodNotReady, so health checks cannot mark it Ready behind Kubernetes' back. Other workers (flags,
// admin) are probed as usual.
func (d *Discovery) Gate(next worker.Prober) worker.Prober {
	return worker.ProberFunc(func(ctx context.Context, w *worker.Worker) error {
		d.mu.Lock()
		gated := d.gated[w.ID()]
		d.mu.Unlock()
		if gated {
			return ErrPodNotReady
		}
		return next.Probe(ctx, w)
	})
}

// Run watches pods and reconciles the registry until ctx ends; it returns after every goroutine it
// started has finished. It may be called once.
func (d *Discovery) Run(ctx context.Context) error {
	if !d.started.CompareAndSwap(false, true) {
		return errors.New("discovery: Run called twice")
	}
	// client-go logs through the context's logger: send it to ours, not to klog's global stderr.
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(d.log.Handler()))
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](d.cfg.RetryBase, d.cfg.RetryMax),
		workqueue.TypedRateLimitingQueueConfig[string]{},
	)
	var workers sync.WaitGroup
	for range d.cfg.Workers {
		workers.Go(func() {
			for d.processNext(ctx, q) {
			}
		})
	}
	ns := d.cfg.Namespace
	if ns == "" {
		ns = "(all)"
	}
	if d.cfg.InferencePool != "" {
		d.log.Info("service discovery started", "namespace", ns, "inference_pool", d.cfg.InferencePool, "resync", d.cfg.Resync)
		// The pool first: pods are listed under its selector, so an absent pool lists none.
		stop, synced := d.runPool(ctx)
		select {
		case <-d.retarget: // the first generation lists under the pool as synced
		default:
		}
		if synced {
			d.watch(ctx, q)
		}
		stop()
	} else {
		d.log.Info("service discovery started", "namespace", ns, "list_selector", config.FormatSelector(d.classifier().listSelector()), "port", d.cfg.Port, "resync", d.cfg.Resync)
		d.watch(ctx, q)
	}
	q.ShutDown()
	workers.Wait()
	d.drains.Wait()
	return nil
}

// generation is one informer: the first, a re-list, or the list under a changed InferencePool.
type generation struct {
	informer cache.SharedIndexInformer // nil when no pod can match (no InferencePool): store stays empty
	store    cache.Store
	stop     func()
}

func (g *generation) hasSynced() bool { return g.informer == nil || g.informer.HasSynced() }

func (g *generation) getStore() cache.Store {
	if g.informer == nil {
		return g.store
	}
	return g.informer.GetStore()
}

func (d *Discovery) startGeneration(ctx context.Context, q workqueue.TypedRateLimitingInterface[string]) *generation {
	c := d.classifier()
	if c.poolMode && c.pool == nil {
		return &generation{store: cache.NewStore(cache.MetaNamespaceKeyFunc), stop: func() {}}
	}
	pods := d.d.Client.CoreV1().Pods(d.cfg.Namespace)
	sel := config.FormatSelector(c.listSelector())
	lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = sel
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel
			return pods.Watch(ctx, o)
		},
	}, d.d.Client) // as generated informers do: streaming lists where the client supports them
	inf := cache.NewSharedIndexInformerWithOptions(lw, &corev1.Pod{}, cache.SharedIndexInformerOptions{})
	// Errors cannot happen: the informer has not started.
	_ = inf.SetTransform(func(obj any) (any, error) {
		if p, ok := obj.(*corev1.Pod); ok {
			p.ManagedFields = nil // the bulk of a pod object; nothing here reads it
		}
		return obj, nil
	})
	_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		d.watchFails.Add(1)
		d.log.Warn("pod list/watch failed; retrying with backoff, the registry keeps its workers", "err", err)
	})
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			q.Add(key)
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	})
	gctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		inf.RunWithContext(gctx)
	}()
	return &generation{informer: inf, stop: func() { cancel(); <-done }}
}

// watch runs informer generations until ctx ends: each re-list starts a new informer, which replaces
// the old one once it has synced.
func (d *Discovery) watch(ctx context.Context, q workqueue.TypedRateLimitingInterface[string]) {
	var old *generation
	gen := d.startGeneration(ctx, q)
	for {
		if !cache.WaitForCacheSync(ctx.Done(), gen.hasSynced) {
			gen.stop()
			if old != nil {
				old.stop()
			}
			return
		}
		st := gen.getStore()
		d.store.Store(&st)
		if old != nil {
			old.stop()
			old = nil
		}
		if d.synced.CompareAndSwap(false, true) {
			d.log.Info("pods listed", "pods", len(st.ListKeys()))
		}
		d.enqueueAll(q, st)
		timer := time.NewTimer(d.cfg.Resync)
		select {
		case <-ctx.Done():
			timer.Stop()
			gen.stop()
			return
		case <-timer.C:
		case <-d.retarget:
			timer.Stop()
		}
		old, gen = gen, d.startGeneration(ctx, q)
	}
}

// enqueueAll queues every pod in st and every pod discovery serves, so a full pass reconciles both.
func (d *Discovery) enqueueAll(q workqueue.TypedRateLimitingInterface[string], st cache.Store) {
	keys := st.ListKeys()
	d.mu.Lock()
	for k := range d.served {
		keys = append(keys, k)
	}
	d.mu.Unlock()
	for _, k := range keys {
		q.Add(k)
	}
}

func (d *Discovery) processNext(ctx context.Context, q workqueue.TypedRateLimitingInterface[string]) bool {
	key, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(key)
	st := d.store.Load()
	if err := d.reconcile(ctx, key); err != nil && ctx.Err() == nil {
		q.AddRateLimited(key)
		return true
	}
	q.Forget(key)
	if d.store.Load() != st {
		// A new generation (a re-list, a changed pool) queued every pod it has and every pod served
		// while this one was reconciled under the old: a pod registered meanwhile was in neither.
		q.Add(key)
	}
	return true
}

// podFor returns the pod with key from the current store (nil when absent).
func (d *Discovery) podFor(key string) *corev1.Pod {
	st := d.store.Load()
	if st == nil {
		return nil
	}
	obj, ok, err := (*st).GetByKey(key)
	if err != nil || !ok {
		return nil
	}
	pod, _ := obj.(*corev1.Pod)
	return pod
}

// noteRefusal logs why a pod is not served: a warning the first time a reason is seen, debug after.
func (d *Discovery) noteRefusal(key string, err error) {
	msg := err.Error()
	d.mu.Lock()
	same := d.refusals[key] == msg
	d.refusals[key] = msg
	d.mu.Unlock()
	level := slog.LevelWarn
	if same {
		level = slog.LevelDebug
	}
	d.log.Log(context.Background(), level, "pod not served", "pod", key, "reason", msg)
}

func (d *Discovery) clearRefusal(key string) {
	d.mu.Lock()
	delete(d.refusals, key)
	d.mu.Unlock()
}

// knownModels reports whether models is non-empty and names only real models: an empty list would
// mean "any model" to the registry, and "unknown" is what engines and peer gateways fill in when they
// do not know.
func knownModels(models []string) bool {
	for _, m := range models {
		if m = strings.TrimSpace(m); m == "" || strings.EqualFold(m, "unknown") {
			return false
		}
	}
	return len(models) > 0
}
