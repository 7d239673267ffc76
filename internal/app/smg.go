package app

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/sluicegw/sluice/internal/concurrency"
	"github.com/sluicegw/sluice/internal/config"
	"github.com/sluicegw/sluice/internal/server"
	"github.com/sluicegw/sluice/internal/smgapi"
)

// The pieces that came with parity with the Rust gateway (SMG): the gateway-wide concurrency limit,
// its REST routes (/workers, /get_loads, ...), and the metrics and probe listeners.

// smgState is what the App keeps of them.
type smgState struct {
	limiter *concurrency.Limiter // nil without --max-concurrent-requests
	routes  *smgapi.Handler
	// metrics and probe are the --prometheus-port and --health-check-port listeners (nil when off).
	metrics, probe *server.Server
}

// upstreamIdleTimeout is --upstream-pool-idle-timeout-secs for the engine client; 0 (SMG's "keep
// idle connections forever") becomes a century, since the client's zero means its default.
func upstreamIdleTimeout(cfg *config.Config) time.Duration {
	if d := cfg.Workers.UpstreamIdleTimeout; d > 0 {
		return d
	}
	return 100 * 365 * 24 * time.Hour
}

// setupSMG builds the limiter and the SMG routes; admin is the audited admin service the worker
// routes change workers through. It runs in New after the admin service exists.
func (a *App) setupSMG(cfg *config.Config, admin smgapi.Admin) ([]server.Route, error) {
	if cc := cfg.Concurrency; cc.Enabled() {
		l, err := concurrency.New(cc, concurrency.Deps{Metrics: concurrency.NewPrometheusMetrics(a.Prom)})
		if err != nil {
			return nil, err
		}
		a.smg.limiter = l
	}
	a.smg.routes = smgapi.New(smgapi.Deps{
		Registry: a.Registry, Admin: admin, Detector: a.detector, Checker: a.checker,
		HTTP: a.upstream, PD: cfg.Mode() == config.ModePD, DrainSettle: cfg.Workers.DrainSettle, Logger: a.logger,
	})
	// SMG guards its control plane with --api-key when no control-plane credential is configured; so
	// does the admin guard (auth.New), for these routes and /admin/v1 alike.
	adminGuard := a.auth.Admin
	var routes []server.Route
	for _, rt := range a.smg.routes.Routes() {
		r := server.Route{Pattern: rt.Pattern, Handler: rt.Handler}
		switch rt.Access {
		case "admin":
			r.Guard, r.Admin = adminGuard, true
		case "inference":
			r.Guard = a.auth.Inference
		}
		routes = append(routes, r)
	}
	return routes, nil
}

// startSMGListeners binds the --prometheus-port and --health-check-port listeners. Both are plain
// HTTP even when the main listener serves TLS, as SMG's are: scrapers and kubelet probes then need no
// certificate, and neither serves anything the main port does not serve without a credential.
func (a *App) startSMGListeners() error {
	m := a.cfg.Telemetry
	plain := func(name string) server.ListenOptions {
		o := a.listenOptions(name)
		o.TLS = nil
		return o
	}
	if m.MetricsPort >= 0 && a.handlers.Metrics != nil {
		s, err := server.Listen(net.JoinHostPort(m.MetricsHost, strconv.Itoa(m.MetricsPort)), a.handlers.Metrics, plain("metrics"))
		if err != nil {
			return fmt.Errorf("listen metrics (--prometheus-port): %w", err)
		}
		a.smg.metrics = s
		a.serve(s)
	}
	if hp := a.cfg.Server.HealthCheckPort; hp > 0 {
		s, err := server.Listen(net.JoinHostPort(a.cfg.Server.Host, strconv.Itoa(hp)), a.handlers.Probe, plain("probe"))
		if err != nil {
			return fmt.Errorf("listen probes (--health-check-port): %w", err)
		}
		a.smg.probe = s
		a.serve(s)
	}
	return nil
}

// MetricsAddr is the --prometheus-port listener's address ("" without it).
func (a *App) MetricsAddr() string {
	if a.smg.metrics == nil {
		return ""
	}
	return a.smg.metrics.Addr().String()
}

// ProbeAddr is the --health-check-port listener's address ("" without it).
func (a *App) ProbeAddr() string {
	if a.smg.probe == nil {
		return ""
	}
	return a.smg.probe.Addr().String()
}

// shutdownSMG stops the extra listeners (with the main ones) and pending worker removals.
func (a *App) shutdownSMG(ctx context.Context) []error {
	var errs []error
	for _, s := range []*server.Server{a.smg.metrics, a.smg.probe} {
		if s != nil {
			if err := s.Shutdown(ctx); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if a.smg.routes != nil {
		a.smg.routes.Close()
	}
	return errs
}
