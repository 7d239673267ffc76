package app

import (
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/backend"
	"github.com/sluicegw/sluice/internal/config"
)

// newAdmission builds the admission controller, the capacity recommender (PD mode) and the poller of
// the engines' own load reports that wakes admission's heads.
func (a *App) newAdmission(cfg *config.Config, tracer trace.Tracer) error {
	logger, httpClient := a.logger, a.upstream
	var err error
	a.Admission, err = admission.New(withTenants(admissionSettings(cfg.Admission), cfg.Tenants),
		admission.Deps{Metrics: admissionMetrics{m: a.Metrics, reg: a.Registry}, Tracer: tracer})
	if err != nil {
		return err
	}
	if err := a.newCapacity(cfg); err != nil {
		return err
	}
	a.loadSink = &engineLoadSink{m: a.Metrics}
	a.LoadMonitor, err = newLoadMonitor(cfg, a.Registry, &backend.Upstream{Client: httpClient}, a.Admission, a.loadSink, logger)
	return err
}
