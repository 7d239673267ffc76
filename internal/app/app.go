// Package app builds a sluice gateway from a validated config — registry, health checking, policies,
// admission, dispatch, the four API surfaces, telemetry — and runs it until its context ends, then shuts
// down gracefully. cmd/sluice only parses flags and calls it.
package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/auth"
	"github.com/sluicegw/sluice/internal/backend"
	"github.com/sluicegw/sluice/internal/capacity"
	"github.com/sluicegw/sluice/internal/cluster"
	"github.com/sluicegw/sluice/internal/config"
	"github.com/sluicegw/sluice/internal/discovery"
	"github.com/sluicegw/sluice/internal/dispatch"
	"github.com/sluicegw/sluice/internal/httpapi"
	"github.com/sluicegw/sluice/internal/placement"
	"github.com/sluicegw/sluice/internal/server"
	"github.com/sluicegw/sluice/internal/telemetry"
	"github.com/sluicegw/sluice/internal/tenant"
	"github.com/sluicegw/sluice/internal/worker"
	adminsvc "github.com/sluicegw/sluice/services/admin"
	openaisvc "github.com/sluicegw/sluice/services/openai"
)

// Version is the gateway's version string, reported in traces.
const Version = "0.1.0"

// Options add test and embedding hooks to the config.
type Options struct {
	Logger *slog.Logger
	// TracerProvider overrides the one built from the config (tests inject an in-memory exporter).
	TracerProvider *telemetry.TracerProvider
	// KubeClient is the Kubernetes client of service discovery; nil builds one from the in-cluster
	// service account, or from $KUBECONFIG outside a cluster. Tests inject a fake clientset.
	KubeClient kubernetes.Interface
	// ClusterHTTP carries cluster admission's exchanges and pings to the other replicas; nil uses a
	// default client. Tests inject transports that partition replicas.
	ClusterHTTP *http.Client
}

// App is one running gateway.
type App struct {
	cfg        *config.Config
	logger     *slog.Logger
	Registry   *worker.Registry
	Admission  *admission.Controller
	Policies   *placement.Set
	Dispatcher *dispatch.Dispatcher
	Metrics    *telemetry.Metrics
	Prom       *prometheus.Registry
	checker    *worker.HealthChecker
	// LoadMonitor polls the engines' own load reports (nil when --engine-load-interval-secs is 0).
	LoadMonitor *worker.LoadMonitor
	loadSink    *engineLoadSink
	Capacity    *capacity.Recommender // capacity.go; nil unless PD mode
	detector    *dispatch.Detector
	pods        *discovery.Discovery // nil unless --service-discovery
	cluster     *cluster.Replica     // nil unless --admission-coordination
	tp          *telemetry.TracerProvider
	handlers    *server.Handlers
	smg         smgState // smg.go

	main, admin *server.Server
	adminSvc    *adminsvc.Service
	budgets     *tenant.Budgets // nil without a tenant source (tenants.go)
	upstream    *http.Client
	unsubscribe func()

	// Security (security.go): TLS, authentication and their metrics.
	Security  *telemetry.SecurityMetrics
	serverTLS *tls.Config
	auth      *auth.Authenticator
	idpClient *http.Client // JWT discovery and keys; nil without JWT

	kv *kvEvents // KV-cache event subscribers and their index (kvevents.go)

	shutdownOnce sync.Once
	shutdownErr  error
	wg           sync.WaitGroup
	stop         context.CancelFunc
}

// New builds the gateway; nothing listens until Start.
func New(ctx context.Context, cfg *config.Config, o Options) (*App, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	// First, before anything starts: a tokenizer that cannot load stops startup (tokenizers.go).
	tokenizers, err := loadTokenizers(cfg.Tokenizer.Paths, logger)
	if err != nil {
		return nil, err
	}
	a := &App{cfg: cfg, logger: logger}
	a.Prom = telemetry.NewRegistry()
	a.Metrics = telemetry.NewMetricsWithBuckets(a.Prom, cfg.SMG.DurationBuckets)
	a.tp = o.TracerProvider
	if a.tp == nil {
		tp, err := telemetry.NewTracerProvider(ctx, cfg.Telemetry.OTLPTracesEndpoint, cfg.Telemetry.TraceSampleRatio, Version)
		if err != nil {
			return nil, err
		}
		a.tp = tp
	}
	tracer := a.tp.Tracer("github.com/sluicegw/sluice")
	a.Security = telemetry.NewSecurityMetrics(a.Prom)
	upstreamTLS, err := a.setupTLS()
	if err != nil {
		return nil, err
	}
	if err := a.setupAuth(upstreamTLS); err != nil {
		return nil, err
	}

	a.Registry = worker.NewRegistry(worker.RegistryOptions{
		Logger:              logger,
		OnBreakerTransition: a.onBreakerTransition,
		Breaker: worker.BreakerConfig{
			FailureThreshold: cfg.Breaker.FailureThreshold,
			SuccessThreshold: cfg.Breaker.SuccessThreshold,
			Timeout:          cfg.Breaker.Timeout,
			Disabled:         cfg.Breaker.Disabled,
		},
		StartReady: cfg.Health.Disabled,
	})
	httpClient := backend.NewHTTPClient(backend.HTTPClientOptions{TLSClientConfig: upstreamTLS, IdleConnTimeout: upstreamIdleTimeout(cfg)})
	a.upstream = httpClient
	endpoint := cfg.Health.Endpoint
	var probe worker.Prober = worker.ProberFunc(func(ctx context.Context, w *worker.Worker) error {
		return (&backend.Upstream{Client: httpClient, APIKey: w.APIKey()}).Probe(ctx, w.URL(), endpoint)
	})
	if cfg.Discovery.Enabled {
		if err := a.newPodDiscovery(cfg, o.KubeClient); err != nil {
			return nil, err
		}
		probe = a.pods.Gate(probe) // a pod Kubernetes calls not ready is not probed back to Ready
	}
	checker, err := worker.NewHealthChecker(a.Registry, probe, worker.HealthConfig{
		Interval:         cfg.Health.Interval,
		Timeout:          cfg.Health.Timeout,
		SuccessThreshold: cfg.Health.SuccessThreshold,
		FailureThreshold: cfg.Health.FailureThreshold,
		Endpoint:         cfg.Health.Endpoint,
		Disabled:         cfg.Health.Disabled,
		KeepBreakerOpen:  cfg.Breaker.HealthRecoveryDisabled,
	}, logger)
	if err != nil {
		return nil, err
	}
	a.checker = checker

	if a.kv, err = newKVEvents(a.Prom, a.Registry, cfg.KVEvents.RetryInterval, logger); err != nil {
		return nil, err
	}
	a.Policies, err = placement.NewSet(placement.Config{
		Policy:              cfg.Placement.Policy,
		PrefillPolicy:       cfg.Placement.PrefillPolicy,
		DecodePolicy:        cfg.Placement.DecodePolicy,
		CacheThreshold:      cfg.Placement.CacheThreshold,
		BalanceAbsThreshold: int64(cfg.Placement.BalanceAbsThreshold),
		BalanceRelThreshold: cfg.Placement.BalanceRelThreshold,
		MaxTreeSize:         cfg.Placement.MaxTreeSize,
		EvictionInterval:    cfg.Placement.EvictionInterval,
		VirtualNodes:        cfg.Placement.VirtualNodes,
		StickyIdle:          cfg.SMG.StickyIdle,
		AssignmentMode:      cfg.SMG.AssignmentMode,
		KVIndex:             a.kv.index,
		SessionAffinity:     cfg.Tenants.SessionHeader != "",
	})
	if err != nil {
		return nil, err
	}
	a.Admission, err = admission.New(withTenants(admissionSettings(cfg.Admission), cfg.Tenants),
		admission.Deps{Metrics: admissionMetrics{m: a.Metrics, reg: a.Registry}, Tracer: tracer})
	if err != nil {
		return nil, err
	}
	if err := a.newCapacity(cfg); err != nil {
		return nil, err
	}
	a.loadSink = &engineLoadSink{m: a.Metrics}
	a.LoadMonitor, err = newLoadMonitor(cfg, a.Registry, &backend.Upstream{Client: httpClient}, a.Admission, a.loadSink, logger)
	if err != nil {
		return nil, err
	}
	if err := a.newCluster(cfg, o.KubeClient, o.ClusterHTTP, upstreamTLS); err != nil {
		return nil, err
	}
	attempts := cfg.Retry.MaxRetries
	if cfg.Retry.Disabled {
		attempts = 1
	}
	a.budgets = tenantBudgets(cfg.Tenants, cfg.Cluster)
	a.Dispatcher, err = dispatch.New(dispatch.Config{
		PD:                            cfg.Mode() == config.ModePD,
		RequestTimeout:                cfg.Server.RequestTimeout,
		DropClientAuthorization:       a.auth.InferenceProtected(),
		IgnoreRanks:                   !cfg.Placement.DPAware,
		RequestIDHeaders:              cfg.SMG.RequestIDHeaders,
		RoutingKeyHeaders:             routingKeyHeaders(cfg),
		CharsPerToken:                 cfg.Admission.CharsPerToken,
		CheckOverload:                 cfg.Load.OverloadWaitingRequests >= 0,
		OverloadWaitingRequests:       cfg.Load.OverloadWaitingRequests,
		CheckDecodeOverload:           cfg.Load.DecodeOverloadWaitingRequests >= 0,
		DecodeOverloadWaitingRequests: cfg.Load.DecodeOverloadWaitingRequests,
		DecodeMaxKVUsage:              cfg.Load.DecodeMaxKVUsage,
		LocalPrefillMaxTokens:         cfg.Admission.LocalPrefillMaxTokens,
		Tenants:                       tenantResolver(cfg.Tenants),
		Budgets:                       a.budgets,
		Retry: dispatch.RetryConfig{MaxAttempts: attempts, Backoff: backend.BackoffConfig{
			Initial: cfg.Retry.InitialBackoff, Multiplier: cfg.Retry.BackoffMultiplier,
			Max: cfg.Retry.MaxBackoff, Jitter: cfg.Retry.JitterFactor,
		}},
	}, dispatch.Deps{
		Registry: a.Registry, Admission: a.Admission, Policies: a.Policies,
		HTTP: httpClient, Metrics: dispatchMetrics{Metrics: a.Metrics, reg: a.Registry, capacity: a.Capacity,
			tenants: newTenantMetrics(a.Prom, cfg.Tenants)}, Tracer: tracer,
		Propagator: telemetry.Propagator(), Logger: logger, Tokenizer: tokenizers,
	})
	if err != nil {
		return nil, err
	}
	var models []string
	if cfg.Workers.ModelID != "" {
		models = []string{cfg.Workers.ModelID}
	}
	a.detector = &dispatch.Detector{HTTP: httpClient, DefaultProtocol: worker.Protocol(cfg.Workers.Runtime),
		DefaultModels: models, DefaultKVConnector: cfg.Workers.KVConnector, Logger: logger}
	a.unsubscribe = a.Registry.Subscribe(a.onEvent)
	telemetry.RegisterBreakerCollector(a.Prom, func() []telemetry.BreakerSample {
		now := time.Now()
		all := a.Registry.Snapshot().All()
		out := make([]telemetry.BreakerSample, len(all))
		for i, w := range all {
			out[i] = telemetry.BreakerSample{Worker: w.URL(), State: int(w.Breaker().State(now))}
		}
		return out
	})
	telemetry.RegisterRankCollector(a.Prom, func() []telemetry.RankSample {
		var out []telemetry.RankSample
		for _, w := range a.Registry.Snapshot().All() {
			for _, r := range w.Ranks() {
				out = append(out, telemetry.RankSample{Worker: w.URL(), Rank: r.Rank(), Load: r.Load()})
			}
		}
		return out
	})
	telemetry.RegisterStateCollector(a.Prom, Version, string(cfg.Mode()), a.stateSample)

	a.adminSvc = adminsvc.New(adminsvc.Deps{
		Registry: a.Registry, Admission: a.Admission, Checker: a.checker, Detector: a.detector,
		HTTP: httpClient, Logger: logger, Cluster: a.clusterStatus(), PD: cfg.Mode() == config.ModePD,
		OnAdmissionUpdate: a.keepBandSeries, Capacity: a.Capacity, Budgets: a.budgets,
	})
	audited := adminsvc.NewAudited(a.adminSvc, logger)
	smgRoutes, err := a.setupSMG(cfg, audited)
	if err != nil {
		return nil, err
	}
	openai := openaisvc.New(a.Dispatcher)
	rest := httpapi.New(httpapi.Options{
		Dispatcher: a.Dispatcher, MaxPayloadSize: cfg.Server.MaxPayloadSize, Metrics: a.Metrics,
		Tracer: tracer, Propagator: telemetry.Propagator(), Logger: logger, SpanAttributes: principalAttrs,
		Tokenizer: tokenizers,
	})
	a.handlers, err = server.NewHandlers(server.Options{
		Logger:        logger,
		Admin:         audited,
		AdminAuth:     a.auth.Admin,
		OpenAI:        openai,
		InferenceAuth: a.auth.Inference,
		REST:          rest,
		Metrics:       telemetry.MetricsHandler(a.Prom),
		Ready:         a.Ready,
		SeparateAdmin: cfg.Server.AdminPort != 0,
		Internal:      a.clusterService(),
		Pprof:         cfg.Telemetry.Pprof,
		HandlerOptions: []connect.HandlerOption{
			connect.WithReadMaxBytes(int(min(cfg.Server.MaxPayloadSize, 1<<31-1))),
			connect.WithInterceptors(telemetry.RPCTracing{Tracer: tracer, Propagator: telemetry.Propagator(), Attributes: principalAttrs}),
		},
		CORSAllowedOrigins: cfg.Auth.CORSAllowedOrigins,
		BodyReadTimeout:    cfg.Limits.BodyReadTimeout,
		WriteTimeout:       cfg.Limits.WriteTimeout,
		HSTS:               cfg.TLS.Enabled(),
		Concurrency:        a.smg.limiter,
		Routes:             smgRoutes,
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}

// Handler is the main port's handler (tests can serve it themselves).
func (a *App) Handler() http.Handler { return a.handlers.Main }

// onEvent keeps admission, policies and metrics in step with the registry. It must not block.
func (a *App) onEvent(ev worker.Event) {
	url := ev.Worker.URL()
	switch ev.Kind {
	case worker.EventRemoved:
		a.Admission.RemoveWorker(url)
		a.Policies.Forget(ev.Worker)
		a.loadSink.deleteWorker(url)
	case worker.EventReplaced:
		if ev.Prev != nil && ev.Prev.URL() != url {
			a.Admission.RemoveWorker(ev.Prev.URL())
			a.loadSink.deleteWorker(ev.Prev.URL())
		}
		if ev.Prev != nil {
			a.Policies.Forget(ev.Prev)
		}
		a.Policies.Forget(ev.Worker)
	case worker.EventHealthChanged:
		a.Metrics.IncHealthTransition(url, ev.Old.String(), ev.New.String())
		a.Metrics.SetWorkerHealth(url, ev.Worker.Health() == worker.HealthReady)
	case worker.EventAdded:
		a.Metrics.SetWorkerHealth(url, ev.Worker.Health() == worker.HealthReady)
	}
	if ev.Kind == worker.EventAdded || ev.Kind == worker.EventReplaced {
		declareDecodeWindow(a.Admission, ev.Worker)
	}
	if ev.Kind == worker.EventAdded || ev.Kind == worker.EventReplaced || ev.Kind == worker.EventRemoved {
		a.kv.notify()
	}
	a.Admission.Wake()
}

// Ready reports whether the gateway can serve: in PD mode at least one healthy prefill and one healthy
// decode worker, else at least one healthy regular worker.
func (a *App) Ready() error {
	if a.Admission.Draining() {
		return errors.New("shutting down")
	}
	snap := a.Registry.Snapshot()
	now := time.Now()
	healthy := func(role worker.Role) bool {
		for _, w := range snap.ByRole(role) {
			if w.Routable(now) {
				return true
			}
		}
		return false
	}
	if a.cfg.Mode() == config.ModePD {
		if !healthy(worker.RolePrefill) {
			return errors.New("no healthy prefill worker")
		}
		if !healthy(worker.RoleDecode) {
			return errors.New("no healthy decode worker")
		}
		return nil
	}
	if !healthy(worker.RoleRegular) {
		return errors.New("no healthy worker")
	}
	return nil
}

// Start binds every listener, then registers the configured workers and starts the background loops:
// a port in use fails at once, before any engine is probed; requests arriving meanwhile see a gateway
// that is not ready yet.
func (a *App) Start(ctx context.Context) error {
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	a.stop = stop
	if err := a.listen(); err != nil {
		return err
	}
	if len(a.cfg.Workers.Initial) == 0 && !a.cfg.Discovery.Enabled {
		a.logger.Warn("no worker configured: every inference request fails until one is added",
			"add", "sluice workers add --url URL --role "+a.firstRole()+" (or --worker-urls, --prefill/--decode, --service-discovery)")
	}
	if err := a.registerInitial(ctx); err != nil {
		_ = a.Shutdown(context.Background())
		return err
	}
	a.wg.Go(func() { a.checker.Run(bg) })
	a.wg.Go(func() { a.Policies.Run(bg) })
	a.wg.Go(func() { a.kv.run(bg) })
	if a.LoadMonitor != nil {
		a.wg.Go(func() { a.LoadMonitor.Run(bg) })
	}
	a.startCapacity(bg)
	if a.pods != nil {
		// After the flag workers, so that an address given both ways stays the flag's.
		a.wg.Go(func() { _ = a.pods.Run(bg) })
	}
	if err := a.startCluster(ctx, bg); err != nil {
		_ = a.Shutdown(context.Background())
		return err
	}
	a.logger.Info("sluice listening", "addr", a.main.Addr().String(), "mode", a.cfg.Mode(), "admission", a.cfg.Admission.Enabled(),
		"tls", a.serverTLS != nil)
	return nil
}

// listen binds and serves the main, admin and SMG listeners; on an error none is left open.
func (a *App) listen() error {
	host := a.cfg.Server.Host
	var err error
	a.main, err = server.Listen(net.JoinHostPort(host, strconv.Itoa(a.cfg.Server.Port)), a.handlers.Main, a.listenOptions("main"))
	if err != nil {
		a.stopBackground()
		return fmt.Errorf("listen (--port): %w", err)
	}
	a.serve(a.main)
	if a.handlers.Admin != nil {
		a.admin, err = server.Listen(net.JoinHostPort(host, strconv.Itoa(a.cfg.Server.AdminPort)), a.handlers.Admin, a.listenOptions("admin"))
		if err != nil {
			_ = a.Shutdown(context.Background())
			return fmt.Errorf("listen admin (--admin-port): %w", err)
		}
		a.serve(a.admin)
	}
	if err := a.startSMGListeners(); err != nil {
		_ = a.Shutdown(context.Background())
		return err
	}
	return nil
}

// firstRole is the role a first worker of this gateway takes.
func (a *App) firstRole() string {
	if a.cfg.Mode() == config.ModePD {
		return "prefill|decode"
	}
	return "regular"
}

func (a *App) serve(s *server.Server) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if err := s.Serve(); err != nil {
			a.logger.Error("server stopped", "err", err)
		}
	}()
}

// Addr is the main listener's address (after Start).
func (a *App) Addr() string { return a.main.Addr().String() }

// AdminAddr is the admin listener's address, or the main one when the admin API shares it.
func (a *App) AdminAddr() string {
	if a.admin != nil {
		return a.admin.Addr().String()
	}
	return a.Addr()
}

// registerInitial asks the flag workers' engines what they are in parallel, then registers them in
// flag order (so their ids follow it: w1 is the first flag worker) and probes them in parallel.
func (a *App) registerInitial(ctx context.Context) error {
	initial := a.cfg.Workers.Initial
	specs := make([]worker.Spec, len(initial))
	errs := make([]error, len(initial))
	var wg sync.WaitGroup
	for i, wf := range initial {
		wg.Go(func() {
			role, err := worker.ParseRole(wf.Role)
			if err != nil {
				errs[i] = err
				return
			}
			spec := worker.Spec{URL: wf.URL, Role: role, Protocol: worker.Protocol(wf.Protocol), BootstrapPort: wf.BootstrapPort, Source: worker.SourceFlag,
				KVEvents: a.cfg.KVEvents.Endpoints[wf.URL]}
			if specs[i], errs[i] = a.detector.Complete(ctx, spec); errs[i] == nil && specs[i].DPSize == 0 && specs[i].Protocol != worker.ProtocolGRPC {
				specs[i].DPSize = a.cfg.Workers.DPSize
			}
			if errs[i] == nil && specs[i].Role == worker.RoleDecode && specs[i].DecodeWindow == 0 {
				specs[i].DecodeWindow = a.cfg.Admission.DecodeWindow
			}
			if errs[i] == nil && specs[i].Role == worker.RoleDecode {
				specs[i].KVRole = a.cfg.Workers.DecodeKVRole // Registry.Add refuses it on an SGLang engine
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	ids := make([]string, len(initial))
	for i, spec := range specs {
		w, err := a.Registry.Add(spec)
		if err != nil {
			return fmt.Errorf("worker %s: %w", initial[i].URL, err)
		}
		ids[i] = w.ID()
	}
	for _, id := range ids {
		wg.Go(func() { _, _ = a.checker.CheckNow(ctx, id) })
	}
	wg.Wait()
	return nil
}

func (a *App) stopBackground() {
	if a.stop != nil {
		a.stop()
	}
	a.wg.Wait()
}

// Shutdown stops accepting, lets in-flight requests finish until ctx ends, then stops everything. Only
// the first call does the work; later ones return its result.
func (a *App) Shutdown(ctx context.Context) error {
	a.shutdownOnce.Do(func() { a.shutdownErr = a.shutdown(ctx) })
	return a.shutdownErr
}

func (a *App) shutdown(ctx context.Context) error {
	var errs []error
	// Drain admission before the servers stop: queued requests get 503 shutting_down now, so their
	// clients retry on another replica instead of waiting out the grace period here; granted
	// requests (streams in flight) keep their slots and finish within it. Readiness fails from now.
	if n := a.Admission.Drain(); n > 0 {
		a.logger.Info("admission drained", "queued_answered", n)
	}
	if a.cluster != nil {
		a.cluster.Leave() // hand coordination over now; keep reporting while requests drain
	}
	for _, s := range []*server.Server{a.main, a.admin} {
		if s != nil {
			if err := s.Shutdown(ctx); err != nil {
				errs = append(errs, err)
			}
		}
	}
	errs = append(errs, a.shutdownSMG(ctx)...)
	a.stopBackground()
	a.adminSvc.Close()
	a.upstream.CloseIdleConnections() // their read loops would otherwise linger until the idle timeout
	if a.idpClient != nil {
		a.idpClient.CloseIdleConnections()
	}
	if a.unsubscribe != nil {
		a.unsubscribe()
	}
	flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := a.tp.Shutdown(flushCtx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Run starts the gateway and serves until ctx ends, then shuts down within the grace period.
func Run(ctx context.Context, cfg *config.Config, o Options) error {
	a, err := New(ctx, cfg, o)
	if err != nil {
		return err
	}
	if err := a.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	if o.Logger != nil {
		o.Logger.Info("shutting down", "grace_period", cfg.Server.ShutdownGracePeriod)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.Server.ShutdownGracePeriod)
	defer cancel()
	return a.Shutdown(sctx)
}
