package app

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"

	"github.com/sluicegw/sluice/internal/config"
	"github.com/sluicegw/sluice/internal/worker"
)

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
	for _, w := range a.cfg.ExposureWarnings() {
		a.logger.Warn("API open to the network: "+w, "addr", a.main.Addr().String())
	}
	if err := a.registerInitial(ctx); err != nil {
		_ = a.Shutdown(context.Background())
		return err
	}
	a.wg.Go(func() { a.checker.Run(bg) })
	a.wg.Go(func() { a.Policies.Run(bg) })
	a.wg.Go(func() { followMemoryLimit(bg, a.Policies.MappedBytes, memoryLimitEvery) })
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

// firstRole is the role a first worker of this gateway takes.
func (a *App) firstRole() string {
	if a.cfg.Mode() == config.ModePD {
		return "prefill|decode"
	}
	return "regular"
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
				KVEvents: a.cfg.KVEvents.Endpoints[wf.URL], Labels: maps.Clone(a.cfg.Pairing.Workers[wf.URL])}
			specs[i], errs[i] = a.completeSpec(ctx, spec)
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
