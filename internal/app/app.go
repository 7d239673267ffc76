// Package app builds a sluice gateway from a validated config — registry, health checking, policies,
// admission, dispatch, the four API surfaces, telemetry — and runs it until its context ends, then shuts
// down gracefully. cmd/sluice only parses flags and calls it.
package app

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/alias"
	"github.com/sluicegw/sluice/internal/auth"
	"github.com/sluicegw/sluice/internal/capacity"
	"github.com/sluicegw/sluice/internal/cluster"
	"github.com/sluicegw/sluice/internal/config"
	"github.com/sluicegw/sluice/internal/discovery"
	"github.com/sluicegw/sluice/internal/dispatch"
	"github.com/sluicegw/sluice/internal/placement"
	"github.com/sluicegw/sluice/internal/server"
	"github.com/sluicegw/sluice/internal/telemetry"
	"github.com/sluicegw/sluice/internal/tenant"
	"github.com/sluicegw/sluice/internal/worker"
	adminsvc "github.com/sluicegw/sluice/services/admin"
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
	// KubeDynamic reads InferencePools (--inference-pool) beside an injected KubeClient; without
	// KubeClient both are built from the same credentials.
	KubeDynamic dynamic.Interface
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
	// Aliases is the live table of model aliases (--model-alias, admin API).
	Aliases *alias.Table
	Metrics *telemetry.Metrics
	Prom    *prometheus.Registry
	checker *worker.HealthChecker
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

// New builds the gateway; nothing listens until Start. Each step is a named constructor in its own
// file (named beside it), in the order the pieces need each other.
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
	tracer, err := a.newTelemetry(ctx, cfg, o.TracerProvider) // telemetry.go
	if err != nil {
		return nil, err
	}
	upstreamTLS, err := a.newSecurity() // security.go
	if err != nil {
		return nil, err
	}
	a.newRegistry(cfg, upstreamTLS)                                          // registry.go
	if err := a.newDiscovery(cfg, o.KubeClient, o.KubeDynamic); err != nil { // discovery.go
		return nil, err
	}
	if err := a.newHealth(cfg); err != nil { // registry.go
		return nil, err
	}
	if err := a.newPlacement(cfg); err != nil { // placement.go
		return nil, err
	}
	if err := a.newAdmission(cfg, tracer); err != nil { // admission.go
		return nil, err
	}
	// The budgets come before the cluster, which spreads their live changes and sets their shares.
	a.budgets = tenantBudgets(cfg.Tenants, cfg.Cluster)                                 // tenants.go
	if err := a.newCluster(cfg, o.KubeClient, o.ClusterHTTP, upstreamTLS); err != nil { // cluster.go
		return nil, err
	}
	if err := a.newAliases(cfg); err != nil { // aliases.go
		return nil, err
	}
	if err := a.newDispatch(cfg, tracer, tokenizers); err != nil { // dispatch.go
		return nil, err
	}
	a.unsubscribe = a.Registry.Subscribe(a.onEvent)               // registry.go
	a.registerCollectors(cfg)                                     // telemetry.go
	if err := a.newServers(cfg, tracer, tokenizers); err != nil { // servers.go
		return nil, err
	}
	return a, nil
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
