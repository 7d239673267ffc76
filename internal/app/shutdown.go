package app

import (
	"context"
	"errors"
	"time"

	"github.com/sluicegw/sluice/internal/server"
)

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
