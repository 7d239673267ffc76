package app

import (
	"context"
	"crypto/tls"
	"errors"
	"time"

	"github.com/sluicegw/sluice/internal/backend"
	"github.com/sluicegw/sluice/internal/config"
	"github.com/sluicegw/sluice/internal/worker"
)

// newRegistry builds the worker registry and the HTTP client every engine call goes through.
func (a *App) newRegistry(cfg *config.Config, upstreamTLS *tls.Config) {
	logger := a.logger
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
}

// newHealth builds the health checker; with service discovery, a pod Kubernetes calls not ready is
// not probed back to Ready.
func (a *App) newHealth(cfg *config.Config) error {
	logger, httpClient := a.logger, a.upstream
	endpoint := cfg.Health.Endpoint
	var probe worker.Prober = worker.ProberFunc(func(ctx context.Context, w *worker.Worker) error {
		return (&backend.Upstream{Client: httpClient, APIKey: w.APIKey()}).Probe(ctx, w.URL(), endpoint)
	})
	if a.pods != nil {
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
		return err
	}
	checker.SetRedetect(a.redetect) // a.detector is built later in New and read only after Start
	a.checker = checker
	return nil
}

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
		a.warnUnboundedDecode(ev.Worker)
	}
	if ev.Kind == worker.EventAdded || ev.Kind == worker.EventReplaced || ev.Kind == worker.EventRemoved {
		a.kv.notify()
	}
	if leaving(ev) && a.Dispatcher != nil {
		a.Dispatcher.MigrateFrom(url) // its streams go on elsewhere rather than hold it (docs/migration.md)
	}
	a.Admission.Wake()
}

// leaving reports a decode or regular worker that starts draining or is removed: the streams it
// serves should move.
func leaving(ev worker.Event) bool {
	if r := ev.Worker.Role(); r != worker.RoleDecode && r != worker.RoleRegular {
		return false
	}
	return ev.Kind == worker.EventRemoved || ev.Kind == worker.EventHealthChanged && ev.New == worker.HealthDraining
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
