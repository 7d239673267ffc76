package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicegw/sluice/internal/capacity"
)

// CapacityMetrics implements capacity.Metrics on a Prometheus registry: the recommendation per model
// and role (what an autoscaler reads), the target before hysteresis, the workers registered, and the
// inputs behind them. Models are label values the registry bounded (the recommender only knows the
// models its workers serve); role is prefill or decode.
type CapacityMetrics struct {
	recommended, target, current, offered, perWorker *prometheus.GaugeVec
	arrivals, rejections, tokens, prefillRate, itl   *prometheus.GaugeVec
}

var _ capacity.Metrics = (*CapacityMetrics)(nil)

// NewCapacityMetrics registers the capacity instruments on reg.
func NewCapacityMetrics(reg prometheus.Registerer) *CapacityMetrics {
	g := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	}
	m := &CapacityMetrics{
		recommended: g("sluice_capacity_recommended_workers", "Workers the load needs now, after smoothing and hysteresis (scale to this).", "model", "role"),
		target:      g("sluice_capacity_target_workers", "Workers the capacity model asks for at this instant, before hysteresis and the busy floor.", "model", "role"),
		current:     g("sluice_capacity_current_workers", "Workers registered for the model and role.", "model", "role"),
		offered:     g("sluice_capacity_offered_load", "Offered load: busy-equivalent prefill workers (λ·S), or decode sequences in flight at the ITL SLO.", "model", "role"),
		perWorker:   g("sluice_capacity_per_worker", "What one worker carries: 1 for prefill, the sequences within the ITL SLO (or seat limit) for decode.", "model", "role"),
		arrivals:    g("sluice_capacity_arrival_rate", "Smoothed requests per second that reached dispatch, refused ones included.", "model"),
		rejections:  g("sluice_capacity_rejection_rate", "Smoothed requests per second refused for capacity (429).", "model"),
		tokens:      g("sluice_capacity_mean_tokens", "Smoothed mean tokens per answered request, by kind (prompt, output).", "model", "kind"),
		prefillRate: g("sluice_capacity_prefill_tokens_per_busy_second", "Prompt tokens prefilled per busy prefill worker-second.", "model"),
		itl:         g("sluice_capacity_itl_fit_seconds", "The fitted decode ITL line: base (batch 0) and slope (per sequence in the batch).", "model", "term"),
	}
	reg.MustRegister(m.recommended, m.target, m.current, m.offered, m.perWorker, m.arrivals, m.rejections, m.tokens, m.prefillRate, m.itl)
	return m
}

// SetRecommendation implements capacity.Metrics.
func (m *CapacityMetrics) SetRecommendation(r *capacity.Recommendation) {
	role := string(r.Role)
	m.recommended.WithLabelValues(r.Model, role).Set(float64(r.Recommended))
	m.target.WithLabelValues(r.Model, role).Set(float64(r.Target))
	m.current.WithLabelValues(r.Model, role).Set(float64(r.Current))
	m.offered.WithLabelValues(r.Model, role).Set(r.OfferedLoad)
	m.perWorker.WithLabelValues(r.Model, role).Set(r.PerWorker)
	if r.Role != capacity.RolePrefill {
		return
	}
	in := r.Inputs
	m.arrivals.WithLabelValues(r.Model).Set(in.ArrivalRate)
	m.rejections.WithLabelValues(r.Model).Set(in.RejectionRate)
	m.tokens.WithLabelValues(r.Model, "prompt").Set(in.PromptTokens)
	m.tokens.WithLabelValues(r.Model, "output").Set(in.OutputTokens)
	m.prefillRate.WithLabelValues(r.Model).Set(in.PrefillRate)
	m.itl.WithLabelValues(r.Model, "base").Set(in.ITLBase.Seconds())
	m.itl.WithLabelValues(r.Model, "slope").Set(in.ITLSlope.Seconds())
}

// DeleteModel implements capacity.Metrics.
func (m *CapacityMetrics) DeleteModel(model string) {
	l := prometheus.Labels{"model": model}
	for _, v := range []*prometheus.GaugeVec{m.recommended, m.target, m.current, m.offered, m.perWorker,
		m.arrivals, m.rejections, m.tokens, m.prefillRate, m.itl} {
		v.DeletePartialMatch(l)
	}
}
