package app

import (
	"sync"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/capacity"
	"github.com/sluicegw/sluice/internal/config"
	"github.com/sluicegw/sluice/internal/dispatch"
	"github.com/sluicegw/sluice/internal/telemetry"
	"github.com/sluicegw/sluice/internal/worker"
)

// How the core's measurements reach the Prometheus instruments (telemetry.Metrics): the adapters
// below translate, and bound every model and queue label to the models the registered workers name
// (telemetry.ModelLabel), so a client's model string never becomes a label value.

// modelLabel bounds a model (or queue key) label against the registry.
func modelLabel(reg *worker.Registry, model string) string {
	return telemetry.ModelLabel(reg.Snapshot().Models(), model)
}

// admissionMetrics adapts telemetry.Metrics to admission.Metrics.
type admissionMetrics struct {
	m   *telemetry.Metrics
	reg *worker.Registry
}

func (a admissionMetrics) SetInflight(w string, n int) { a.m.SetInflight(w, n) }
func (a admissionMetrics) DeleteWorker(w string)       { a.m.DeleteWorker(w) }
func (a admissionMetrics) AddQueued(q string, delta int) {
	a.m.AddQueued(modelLabel(a.reg, q), delta)
}
func (a admissionMetrics) ObserveWait(q, w string, d time.Duration) {
	a.m.ObserveWait(modelLabel(a.reg, q), w, d)
}
func (a admissionMetrics) IncRejection(q string, o admission.Outcome) {
	a.m.IncRejection(modelLabel(a.reg, q), o.String())
}

// dispatchMetrics adapts telemetry.Metrics to dispatch.Metrics: every method but ObserveRequest is
// telemetry's own.
type dispatchMetrics struct {
	*telemetry.Metrics
	reg      *worker.Registry
	capacity *capacity.Recommender // nil unless PD mode
	tenants  *tenantMetrics        // nil without a tenant source (tenants.go)
}

func (d dispatchMetrics) ObserveRequest(s *dispatch.RequestStats) {
	model := modelLabel(d.reg, s.Model)
	d.Metrics.ObserveRequest(s.Route, model, s.Status, s.Duration, s.Trace)
	if s.Stream && s.TTFT > 0 {
		d.ObserveStream(s.Route, model, s.Worker, s.TTFT, s.ITL, s.Trace)
	}
	if s.HasUsage {
		d.AddTokens(s.Route, model, s.Usage.Prompt, s.Usage.Completion)
	}
	if o := s.Prediction; o.Predicted {
		d.ObservePrediction(o.Worker, o.PredictedTTFT, o.TTFT, s.Trace)
	}
	if s.Handoff != "" && s.DecodeTTFT > 0 {
		d.ObserveDecodeFirstToken(s.Handoff, s.DecodeTTFT, s.KVWait(), s.Trace)
	}
	observeCapacity(d.capacity, model, s)
	d.tenants.observe(s)
}

// engineLoadSink records engine loads. A poll can end after its worker was removed: the removal
// (onEvent, under the same lock) deletes the worker's series, and a late reading must not bring them
// back, so a reading counts only while its worker is registered (Removed is set before the event).
type engineLoadSink struct {
	mu sync.Mutex
	m  *telemetry.Metrics
}

// result records one poll's outcome (worker.LoadMonitorConfig.OnResult).
func (s *engineLoadSink) result(w *worker.Worker, l worker.EngineLoad, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case w.Removed():
	case err != nil:
		s.m.EngineLoadFailed(w.URL())
	default:
		s.m.SetEngineLoad(w.URL(), l.Running, l.Waiting, l.KVUsage)
	}
}

// deleteWorker deletes every per-worker series, serialised with the engine load readings.
func (s *engineLoadSink) deleteWorker(url string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m.DeleteWorker(url)
}

// stateSample is what the state collector exports at scrape time: the registry and the admission
// settings as they are now.
func (a *App) stateSample() telemetry.State {
	st := telemetry.State{Roles: []string{string(worker.RoleRegular)}}
	if a.cfg.Mode() == config.ModePD {
		st.Roles = []string{string(worker.RolePrefill), string(worker.RoleDecode)}
	}
	for _, w := range a.Registry.Snapshot().All() {
		st.Workers = append(st.Workers, telemetry.WorkerSample{Worker: w.URL(), ID: w.ID(), Role: string(w.Role()),
			Protocol: string(w.Protocol()), Health: w.Health().String()})
	}
	if as := a.Admission.Status(); as.Settings.Enabled() {
		s := as.Settings
		st.Admission = telemetry.AdmissionSample{Enabled: true, Limit: s.StartLimit(), Limits: as.Limits,
			QueueSize: s.QueueSize, QueueTimeout: s.QueueTimeout.Seconds()}
	}
	return st
}
