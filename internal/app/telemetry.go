package app

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluicegw/sluice/internal/config"
	"github.com/sluicegw/sluice/internal/telemetry"
)

// newTelemetry builds the Prometheus registry, the gateway's meters and the tracer provider (injected, when
// a test injects one) and returns the gateway's tracer.
func (a *App) newTelemetry(ctx context.Context, cfg *config.Config, injected *telemetry.TracerProvider) (trace.Tracer, error) {
	a.Prom = telemetry.NewRegistry()
	a.Metrics = telemetry.NewMetricsWithBuckets(a.Prom, cfg.Telemetry.DurationBuckets)
	a.tp = injected
	if a.tp == nil {
		tp, err := telemetry.NewTracerProvider(ctx, cfg.Telemetry.OTLPTracesEndpoint, cfg.Telemetry.TraceSampleRatio, Version)
		if err != nil {
			return nil, err
		}
		a.tp = tp
	}
	return a.tp.Tracer("github.com/sluicegw/sluice"), nil
}

// registerCollectors registers the collectors read at scrape time: breaker states, worker and rank
// loads and the gateway's state.
func (a *App) registerCollectors(cfg *config.Config) {
	telemetry.RegisterBreakerCollector(a.Prom, func() []telemetry.BreakerSample {
		now := time.Now()
		all := a.Registry.Snapshot().All()
		out := make([]telemetry.BreakerSample, len(all))
		for i, w := range all {
			out[i] = telemetry.BreakerSample{Worker: w.URL(), State: int(w.Breaker().State(now))}
		}
		return out
	})
	telemetry.RegisterActiveCollector(a.Prom, func() []telemetry.ActiveSample {
		all := a.Registry.Snapshot().All()
		out := make([]telemetry.ActiveSample, len(all))
		for i, w := range all {
			out[i] = telemetry.ActiveSample{Worker: w.URL(), Load: w.Load()}
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
}
