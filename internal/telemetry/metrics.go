package telemetry

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics holds the gateway's instruments, registered on one registry. Its methods are safe for
// concurrent use. Per-worker series are deleted by DeleteWorker when a worker is removed.
type Metrics struct {
	requests          *prometheus.CounterVec
	requestDuration   *prometheus.HistogramVec
	ttft              *prometheus.HistogramVec
	prefillDuration   prometheus.Histogram
	upstream          *prometheus.CounterVec
	retries           prometheus.Counter
	workerActive      *prometheus.GaugeVec
	workerHealth      *prometheus.GaugeVec
	admissionInflight *prometheus.GaugeVec
	admissionQueued   prometheus.Gauge
	admissionWait     prometheus.Histogram
	admissionRejects  *prometheus.CounterVec
	kvFallbacks       *prometheus.CounterVec
	admissionTokens   *prometheus.GaugeVec
	admissionLimit    *prometheus.GaugeVec
	bandQueued        *prometheus.GaugeVec
	bandWait          *prometheus.HistogramVec

	// statusText caches the label value of each status code: strconv on the hot path allocates.
	statusText sync.Map
}

// latencyBuckets spans 1 ms to ~5 min: admission waits and TTFT of LLM requests live in that range.
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// NewMetrics creates the instruments and registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_requests_total", Help: "Client requests by route, model and HTTP status.",
		}, []string{"route", "model", "status"}),
		requestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_request_duration_seconds", Help: "Client request duration, until the last byte.", Buckets: latencyBuckets,
		}, []string{"route"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_time_to_first_token_seconds", Help: "Time from request arrival to the first byte of the response body.", Buckets: latencyBuckets,
		}, []string{"route"}),
		prefillDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_pd_prefill_duration_seconds", Help: "Duration of the prefill leg of PD requests.", Buckets: latencyBuckets,
		}),
		upstream: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_upstream_responses_total", Help: "Responses from workers by worker and status (\"error\" for transport errors).",
		}, []string{"worker", "status"}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_retries_total", Help: "Request attempts retried after a retryable failure.",
		}),
		workerActive: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_worker_active_requests", Help: "Backend requests in flight per worker.",
		}, []string{"worker"}),
		workerHealth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_worker_healthy", Help: "1 when the worker is healthy (routable health state), else 0.",
		}, []string{"worker"}),
		admissionInflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_pd_prefill_admission_inflight", Help: "Prefill admission slots held per prefill worker.",
		}, []string{"worker"}),
		admissionQueued: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_pd_prefill_admission_queued", Help: "Requests waiting for a prefill admission slot.",
		}),
		admissionWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_pd_prefill_admission_wait_seconds", Help: "Time requests waited in the prefill admission queue.", Buckets: latencyBuckets,
		}),
		admissionRejects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_pd_prefill_admission_rejections_total", Help: "Requests rejected by prefill admission, by reason.",
		}, []string{"reason"}),
		kvFallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_pd_kv_transfer_fallbacks_total",
			Help: "PD requests whose decode ran without KV transfer parameters and recomputed the prompt, by KV handoff.",
		}, []string{"handoff"}),
		admissionTokens: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_pd_prefill_admission_inflight_tokens", Help: "Estimated prompt tokens of the prefill admission slots held per prefill worker.",
		}, []string{"worker"}),
		admissionLimit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_pd_prefill_admission_limit", Help: "Current adaptive prefill admission limit per prefill worker (with --prefill-adaptive-limit).",
		}, []string{"worker"}),
		bandQueued: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_pd_prefill_admission_band_queued", Help: "Requests waiting for a prefill admission slot, per priority band.",
		}, []string{"band"}),
		bandWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_pd_prefill_admission_band_wait_seconds", Help: "Time requests waited in the prefill admission queue, per priority band.", Buckets: latencyBuckets,
		}, []string{"band"}),
	}
	reg.MustRegister(m.requests, m.requestDuration, m.ttft, m.prefillDuration, m.upstream, m.retries,
		m.workerActive, m.workerHealth,
		m.admissionInflight, m.admissionQueued, m.admissionWait, m.admissionRejects, m.kvFallbacks,
		m.admissionTokens, m.admissionLimit, m.bandQueued, m.bandWait)
	return m
}

func (m *Metrics) status(code int) string {
	if v, ok := m.statusText.Load(code); ok {
		return v.(string)
	}
	s := strconv.Itoa(code)
	m.statusText.Store(code, s)
	return s
}

// ObserveRequest records one finished client request.
func (m *Metrics) ObserveRequest(route, model string, status int, d time.Duration) {
	m.requests.WithLabelValues(route, model, m.status(status)).Inc()
	m.requestDuration.WithLabelValues(route).Observe(d.Seconds())
}

// ObserveTTFT records the time to the first response byte of a request.
func (m *Metrics) ObserveTTFT(route string, d time.Duration) {
	m.ttft.WithLabelValues(route).Observe(d.Seconds())
}

// ObservePrefill records the duration of a PD prefill leg.
func (m *Metrics) ObservePrefill(d time.Duration) { m.prefillDuration.Observe(d.Seconds()) }

// ObserveUpstream records a worker's response status; status 0 means a transport error.
func (m *Metrics) ObserveUpstream(worker string, status int) {
	s := "error"
	if status > 0 {
		s = m.status(status)
	}
	m.upstream.WithLabelValues(worker, s).Inc()
}

// IncKVTransferFallback counts a decode sent without KV transfer parameters (it recomputes the prompt).
func (m *Metrics) IncKVTransferFallback(handoff string) { m.kvFallbacks.WithLabelValues(handoff).Inc() }

// IncRetry counts one retried attempt.
func (m *Metrics) IncRetry() { m.retries.Inc() }

// AddWorkerActive moves a worker's in-flight backend request gauge by delta.
func (m *Metrics) AddWorkerActive(worker string, delta float64) {
	m.workerActive.WithLabelValues(worker).Add(delta)
}

// SetWorkerHealth records whether a worker is healthy.
func (m *Metrics) SetWorkerHealth(worker string, healthy bool) {
	v := 0.0
	if healthy {
		v = 1
	}
	m.workerHealth.WithLabelValues(worker).Set(v)
}

// SetInflight sets the admission slots held on worker.
func (m *Metrics) SetInflight(worker string, n int) {
	m.admissionInflight.WithLabelValues(worker).Set(float64(n))
}

// SetQueued sets the number of requests waiting for admission.
func (m *Metrics) SetQueued(n int) { m.admissionQueued.Set(float64(n)) }

// ObserveWait records one admission wait.
func (m *Metrics) ObserveWait(d time.Duration) { m.admissionWait.Observe(d.Seconds()) }

// IncRejectionReason counts one admission rejection.
func (m *Metrics) IncRejectionReason(reason string) { m.admissionRejects.WithLabelValues(reason).Inc() }

// SetInflightTokens sets the estimated prompt tokens of the admission slots held on worker.
func (m *Metrics) SetInflightTokens(worker string, n int64) {
	m.admissionTokens.WithLabelValues(worker).Set(float64(n))
}

// SetAdmissionLimit sets worker's current adaptive admission limit.
func (m *Metrics) SetAdmissionLimit(worker string, n int) {
	m.admissionLimit.WithLabelValues(worker).Set(float64(n))
}

// SetBandQueued sets the requests waiting for admission in one priority band.
func (m *Metrics) SetBandQueued(band string, n int) {
	m.bandQueued.WithLabelValues(band).Set(float64(n))
}

// ObserveBandWait records one admission wait of a request of band.
func (m *Metrics) ObserveBandWait(band string, d time.Duration) {
	m.bandWait.WithLabelValues(band).Observe(d.Seconds())
}

// DeleteWorker deletes every per-worker series of a removed worker.
func (m *Metrics) DeleteWorker(worker string) {
	m.admissionTokens.DeleteLabelValues(worker)
	m.admissionLimit.DeleteLabelValues(worker)
	m.admissionInflight.DeleteLabelValues(worker)
	m.workerActive.DeleteLabelValues(worker)
	m.workerHealth.DeleteLabelValues(worker)
	m.upstream.DeletePartialMatch(prometheus.Labels{"worker": worker})
}
