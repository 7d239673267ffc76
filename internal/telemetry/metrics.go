package telemetry

import (
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/trace"
)

// Metrics holds the gateway's instruments, registered on one registry. Its methods are safe for
// concurrent use. Per-worker series are deleted by DeleteWorker when a worker is removed. The names,
// labels and meaning of every instrument are documented in docs/metrics.md; keep the two in step.
//
// Labels stay low-cardinality: workers are labelled by URL, models only with the ids the registered
// workers serve (ModelLabel), routes by path, and every other label has a small closed set of values.
type Metrics struct {
	requests        *prometheus.CounterVec
	requestDuration *prometheus.HistogramVec
	ttft            *prometheus.HistogramVec
	itl             *prometheus.HistogramVec
	tokens          *prometheus.CounterVec
	retries         prometheus.Counter

	prefillDuration *prometheus.HistogramVec
	decodeTTFT      *prometheus.HistogramVec
	kvWait          *prometheus.HistogramVec
	splits          *prometheus.CounterVec
	splitSamples    *prometheus.CounterVec
	prefillSkipped  *prometheus.CounterVec
	pdPairs         *prometheus.CounterVec
	kvFallbacks     *prometheus.CounterVec
	migrations      *prometheus.CounterVec
	migrationTokens prometheus.Counter

	upstream           *prometheus.CounterVec
	workerErrors       *prometheus.CounterVec
	workerHealth       *prometheus.GaugeVec
	healthTransitions  *prometheus.CounterVec
	breakerTransitions *prometheus.CounterVec
	workerTTFT         *prometheus.HistogramVec
	workerITL          *prometheus.HistogramVec
	predictedTTFT      *prometheus.HistogramVec
	predictionError    *prometheus.HistogramVec
	engineRunning      *prometheus.GaugeVec
	engineWaiting      *prometheus.GaugeVec
	engineKVUsage      *prometheus.GaugeVec
	engineLoadErrors   *prometheus.CounterVec

	admissionInflight *prometheus.GaugeVec
	admissionQueued   *prometheus.GaugeVec
	admissionWait     *prometheus.HistogramVec
	admissionRejects  *prometheus.CounterVec
	admissionTokens   *prometheus.GaugeVec
	decodeInflight    *prometheus.GaugeVec
	decodeLimit       *prometheus.GaugeVec
	decodeWait        *prometheus.HistogramVec
	bandQueued        *prometheus.GaugeVec
	bandWait          *prometheus.HistogramVec

	// statusText caches the label value of each status code: strconv on the hot path allocates.
	statusText sync.Map
	// requestSeries (requestKey -> *requestSeries) and tokenSeries (tokenKey -> prometheus.Counter)
	// hold the children every request writes, created when the vec would have created them: a
	// WithLabelValues hashes the labels and takes the vec's lock. Their labels are bounded (routes,
	// ModelLabel, statuses) and these series are never deleted.
	requestSeries sync.Map
	tokenSeries   sync.Map
	// The children every PD request writes, resolved once (children). Those of a worker's series
	// fill under workerMu, which DeleteWorker holds while it drops them.
	workerMu   sync.Mutex
	upstreamOK children[string, prometheus.Counter]     // sluice_upstream_responses_total{status="200"} by worker
	inflightOf children[string, prometheus.Gauge]       // by worker
	tokensOf   children[string, prometheus.Gauge]       // by worker
	waitOf     children[[2]string, prometheus.Observer] // by queue and worker
	prefillOf  children[string, prometheus.Observer]    // by handoff; never deleted
	pairOf     children[[2]string, prometheus.Counter]  // by distance and revision; never deleted
}

// latencyBuckets spans 1 ms to 5 min: admission waits, TTFT and whole LLM requests live in that range.
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// tokenLatencyBuckets spans 0.5 ms to 2.5 s: the time per output token of one stream.
var tokenLatencyBuckets = []float64{.0005, .001, .0025, .005, .0075, .01, .015, .02, .03, .05, .075, .1, .25, .5, 1, 2.5}

// predictionErrorBuckets span a prediction's error, predicted - measured, both ways: 5 ms to 10 s
// too early or too late.
var predictionErrorBuckets = []float64{-10, -2.5, -1, -.5, -.25, -.1, -.05, -.025, -.01, -.005, 0,
	.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10}

// Token types of sluice_tokens_total, as OpenTelemetry's gen_ai.token.type names them.
const (
	TokenInput  = "input"
	TokenOutput = "output"
)

// Error classes of sluice_worker_errors_total: a small closed set (ErrorClass returns one of them).
const (
	ClassClientError = "client_error" // 4xx other than 408 and 429: the request was wrong for the engine
	ClassRateLimited = "rate_limited" // 429: the engine is busy
	ClassServerError = "server_error" // 5xx other than 504
	ClassTimeout     = "timeout"      // 408, 504, or no answer within a deadline
	ClassTransport   = "transport"    // the connection failed before an answer
	ClassStream      = "stream"       // a streamed answer broke off or carried an error event
)

// ErrorClass maps an engine's HTTP status to its error class; "" for statuses below 400.
func ErrorClass(status int) string {
	switch {
	case status < 400:
		return ""
	case status == 408 || status == 504:
		return ClassTimeout
	case status == 429:
		return ClassRateLimited
	case status < 500:
		return ClassClientError
	}
	return ClassServerError
}

// OtherModel is the model label of requests for a model no registered worker names (workers that
// serve any model accept any string: those strings must not become label values).
const OtherModel = "other"

// ModelLabel is the label value for model: model itself when known (a sorted list of the models the
// registered workers name), else OtherModel. An empty model (SGLang /generate without one) stays "".
func ModelLabel(known []string, model string) string {
	if model == "" {
		return ""
	}
	if _, ok := slices.BinarySearch(known, model); ok {
		return model
	}
	return OtherModel
}

// NewMetrics creates the instruments and registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics { return NewMetricsWithBuckets(reg, nil) }

// NewMetricsWithBuckets is NewMetrics with other buckets for the request-duration, prefill-duration
// and time-to-first-token histograms (SMG's --prometheus-duration-buckets, which it applies to its
// *duration_seconds and TTFT histograms); nil keeps latencyBuckets.
func NewMetricsWithBuckets(reg prometheus.Registerer, durationBuckets []float64) *Metrics {
	if len(durationBuckets) == 0 {
		durationBuckets = latencyBuckets
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	}
	hist := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	}
	m := &Metrics{
		requests: counter("sluice_requests_total", "Client requests by route, model and HTTP status.", "route", "model", "status"),
		requestDuration: hist("sluice_request_duration_seconds",
			"Client request duration, from arrival until the last byte of the answer.", durationBuckets, "route", "model"),
		ttft: hist("sluice_time_to_first_token_seconds",
			"Streamed requests: time from arrival to the first event of the answer.", durationBuckets, "route", "model"),
		itl: hist("sluice_inter_token_latency_seconds",
			"Streamed requests: mean time between output tokens of one stream, after the first.", tokenLatencyBuckets, "route", "model"),
		tokens: counter("sluice_tokens_total",
			"Tokens of answered requests by type (input = prompt, output = completion), from the engines' usage.", "route", "model", "type"),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_retries_total", Help: "Request attempts retried after a retryable failure.",
		}),

		prefillDuration: hist("sluice_pd_prefill_duration_seconds",
			"PD requests: duration of the prefill leg, by KV handoff.", durationBuckets, "handoff"),
		decodeTTFT: hist("sluice_pd_decode_time_to_first_token_seconds",
			"Streamed PD requests: time from the first leg sent to the decode's first event, by KV handoff.", durationBuckets, "handoff"),
		kvWait: hist("sluice_pd_kv_transfer_wait_seconds",
			"Streamed PD requests: decode time to first token minus prefill duration (KV transfer and the decode's first step), by KV handoff.",
			latencyBuckets, "handoff"),
		splits: counter("sluice_pd_split_requests_total",
			"PD requests with n > 1 split into single-sample requests under one admission slot, by KV handoff.", "handoff"),
		splitSamples: counter("sluice_pd_split_samples_total",
			"Single-sample requests sent for split n > 1 PD requests, by KV handoff.", "handoff"),
		prefillSkipped: counter("sluice_pd_prefill_skipped_total",
			"PD requests sent to a decode worker alone (it computes the prompt), by KV handoff and reason.", "handoff", "reason"),
		pdPairs: counter("sluice_pd_pairs_total",
			"PD pairs formed (one per attempt), by topology distance between prefill and decode (node, rack, zone, cross_zone, unknown) and the pair's revision (\"\" when none).", "distance", "revision"),
		kvFallbacks: counter("sluice_pd_kv_transfer_fallbacks_total",
			"PD requests whose decode ran without KV transfer parameters and recomputed the prompt, by KV handoff.", "handoff"),
		migrations: counter("sluice_migrations_total",
			"Streams whose decode engine broke off mid-stream, continued on another pair (outcome migrated), whose continuation could not start (failed) or that had no migration left (exhausted), by reason.", "reason", "outcome"),
		migrationTokens: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_migration_prefill_tokens_total",
			Help: "Tokens prefilled again by migrated streams' continuations (the client's prompt and what was generated before the break); the only extra cost of a migration."}),

		upstream: counter("sluice_upstream_responses_total",
			"Responses from workers by worker and status (\"error\" for transport errors).", "worker", "status"),
		workerErrors: counter("sluice_worker_errors_total",
			"Failed legs per worker by class: client_error, rate_limited, server_error, timeout, transport, stream.", "worker", "class"),
		workerHealth: gauge("sluice_worker_healthy", "1 when the worker is healthy (routable health state), else 0.", "worker"),
		healthTransitions: counter("sluice_worker_health_transitions_total",
			"Health state changes per worker (pending, ready, not_ready, draining).", "worker", "from", "to"),
		breakerTransitions: counter("sluice_worker_breaker_transitions_total",
			"Circuit breaker state changes per worker (closed, open, half_open), by reason.", "worker", "from", "to", "reason"),
		workerTTFT: hist("sluice_worker_time_to_first_token_seconds",
			"Streamed requests: time to the first event, by the worker that generated (decode or regular).", durationBuckets, "worker"),
		workerITL: hist("sluice_worker_inter_token_latency_seconds",
			"Streamed requests: mean time between output tokens, by the worker that generated.", tokenLatencyBuckets, "worker"),
		predictedTTFT: hist("sluice_predicted_ttft_seconds",
			"predicted_latency policy: the time to first token predicted for each streamed request at its pick, by the worker picked; compare with sluice_predicted_ttft_error_seconds.",
			durationBuckets, "worker"),
		predictionError: hist("sluice_predicted_ttft_error_seconds",
			"predicted_latency policy: predicted minus measured time to first token (measured from the pick) of each streamed request, by the worker picked; negative when the request was slower than predicted.",
			predictionErrorBuckets, "worker"),
		engineRunning: gauge("sluice_worker_engine_running_requests",
			"Requests the engine reports running, polled every --engine-load-interval-secs.", "worker"),
		engineWaiting: gauge("sluice_worker_engine_waiting_requests",
			"Requests the engine reports waiting in its own queue, polled every --engine-load-interval-secs.", "worker"),
		engineKVUsage: gauge("sluice_worker_engine_kv_cache_usage_ratio",
			"Fraction of the engine's KV cache in use (0..1) as it reports it, polled every --engine-load-interval-secs.", "worker"),
		engineLoadErrors: counter("sluice_worker_engine_load_errors_total",
			"Engine load polls that failed; the worker's engine gauges are dropped until a poll succeeds.", "worker"),

		admissionInflight: gauge("sluice_pd_prefill_admission_inflight", "Prefill admission slots held per prefill worker.", "worker"),
		admissionQueued: gauge("sluice_pd_prefill_admission_queued",
			"Requests waiting for a prefill admission slot, per queue (model); sum them for the total bounded by the queue size.", "queue"),
		admissionWait: hist("sluice_pd_prefill_admission_wait_seconds",
			"Time requests waited for a prefill admission slot, per queue (model) and the worker that granted it (\"\" when none did).",
			latencyBuckets, "queue", "worker"),
		admissionRejects: counter("sluice_pd_prefill_admission_rejections_total",
			"Requests rejected by prefill admission, per queue (model) and reason.", "queue", "reason"),
		admissionTokens: gauge("sluice_pd_prefill_admission_inflight_tokens",
			"Estimated prompt tokens of the prefill admission slots held per prefill worker.", "worker"),
		decodeInflight: gauge("sluice_pd_decode_admission_inflight",
			"Decode seats held per decode worker (URL, or URL@rank for a data-parallel rank), with decode seats on.", "worker"),
		decodeLimit: gauge("sluice_pd_decode_admission_limit",
			"Decode seat bound per decode worker (its window with auto; <= 0: none), with decode seats on.", "worker"),
		decodeWait: hist("sluice_pd_decode_admission_wait_seconds",
			"Time requests waited in the admission queue, per queue (model), when the decode side (no free seat) held them back at the end of their wait; sluice_pd_prefill_admission_wait_seconds counts every wait.",
			latencyBuckets, "queue"),
		bandQueued: gauge("sluice_pd_prefill_admission_band_queued",
			"Requests waiting for a prefill admission slot, per priority band.", "band"),
		bandWait: hist("sluice_pd_prefill_admission_band_wait_seconds",
			"Time requests waited in the prefill admission queue, per priority band.", latencyBuckets, "band"),
	}
	reg.MustRegister(m.requests, m.requestDuration, m.ttft, m.itl, m.tokens, m.retries,
		m.prefillDuration, m.decodeTTFT, m.kvWait, m.splits, m.splitSamples, m.prefillSkipped, m.kvFallbacks, m.pdPairs,
		m.migrations, m.migrationTokens, m.upstream, m.workerErrors, m.workerHealth, m.healthTransitions, m.breakerTransitions,
		m.workerTTFT, m.workerITL, m.predictedTTFT, m.predictionError, m.engineRunning, m.engineWaiting, m.engineKVUsage, m.engineLoadErrors,
		m.admissionInflight, m.admissionQueued, m.admissionWait, m.admissionRejects,
		m.admissionTokens, m.bandQueued, m.bandWait, m.decodeInflight, m.decodeLimit, m.decodeWait)
	// The one handoff that can fall back or skip its prefill (vLLM NIXL: n > 1, dispatch's
	// ReasonNGreaterThanOne) is exported at 0 from the start: "none yet" is an answer, not no data.
	m.kvFallbacks.WithLabelValues("vllm_nixl")
	m.prefillSkipped.WithLabelValues("vllm_nixl", "n_gt_1")
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

// observe records v on o, with the trace id as an exemplar when sc is a sampled trace: the exemplar
// links a slow bucket to its trace (exposed in the OpenMetrics format, which Prometheus asks for).
func observe(o prometheus.Observer, v float64, sc trace.SpanContext) {
	if sc.IsValid() && sc.IsSampled() {
		if eo, ok := o.(prometheus.ExemplarObserver); ok {
			eo.ObserveWithExemplar(v, prometheus.Labels{"trace_id": sc.TraceID().String()})
			return
		}
	}
	o.Observe(v)
}

type requestKey struct {
	route, model string
	status       int
}

type requestSeries struct {
	count    prometheus.Counter
	duration prometheus.Observer
}

type tokenKey struct{ route, model, kind string }

// ObserveRequest records one finished client request: its count and duration.
func (m *Metrics) ObserveRequest(route, model string, status int, d time.Duration, sc trace.SpanContext) {
	k := requestKey{route, model, status}
	v, ok := m.requestSeries.Load(k)
	if !ok {
		v, _ = m.requestSeries.LoadOrStore(k, &requestSeries{
			count:    m.requests.WithLabelValues(route, model, m.status(status)),
			duration: m.requestDuration.WithLabelValues(route, model),
		})
	}
	rs := v.(*requestSeries)
	rs.count.Inc()
	observe(rs.duration, d.Seconds(), sc)
}

// ObserveStream records what a streamed answer showed: its time to first token, its mean
// inter-token latency (itl 0 = not measured: fewer than two tokens) and the worker that generated.
func (m *Metrics) ObserveStream(route, model, worker string, ttft, itl time.Duration, sc trace.SpanContext) {
	observe(m.ttft.WithLabelValues(route, model), ttft.Seconds(), sc)
	if worker != "" {
		observe(m.workerTTFT.WithLabelValues(worker), ttft.Seconds(), sc)
	}
	if itl > 0 {
		observe(m.itl.WithLabelValues(route, model), itl.Seconds(), sc)
		if worker != "" {
			observe(m.workerITL.WithLabelValues(worker), itl.Seconds(), sc)
		}
	}
}

// AddTokens counts a request's tokens as its usage reported them.
func (m *Metrics) AddTokens(route, model string, input, output int64) {
	if input > 0 {
		m.tokenCounter(route, model, TokenInput).Add(float64(input))
	}
	if output > 0 {
		m.tokenCounter(route, model, TokenOutput).Add(float64(output))
	}
}

func (m *Metrics) tokenCounter(route, model, kind string) prometheus.Counter {
	k := tokenKey{route, model, kind}
	if v, ok := m.tokenSeries.Load(k); ok {
		return v.(prometheus.Counter)
	}
	v, _ := m.tokenSeries.LoadOrStore(k, m.tokens.WithLabelValues(route, model, kind))
	return v.(prometheus.Counter)
}

// ObservePrefill records the duration of a PD prefill leg.
func (m *Metrics) ObservePrefill(handoff string, d time.Duration, sc trace.SpanContext) {
	h := m.prefillOf.get(nil, handoff, func() prometheus.Observer { return m.prefillDuration.WithLabelValues(handoff) })
	observe(h, d.Seconds(), sc)
}

// ObservePrediction records a predicted_latency pick's predicted time to first token against the
// one measured from the pick, by the worker picked.
func (m *Metrics) ObservePrediction(worker string, predicted, measured time.Duration, sc trace.SpanContext) {
	observe(m.predictedTTFT.WithLabelValues(worker), predicted.Seconds(), sc)
	observe(m.predictionError.WithLabelValues(worker), (predicted - measured).Seconds(), sc)
}

// ObserveDecodeFirstToken records a streamed PD request's decode time to first token and the KV wait
// derived from it.
func (m *Metrics) ObserveDecodeFirstToken(handoff string, decodeTTFT, kvWait time.Duration, sc trace.SpanContext) {
	observe(m.decodeTTFT.WithLabelValues(handoff), decodeTTFT.Seconds(), sc)
	observe(m.kvWait.WithLabelValues(handoff), kvWait.Seconds(), sc)
}

// IncSplit counts an n > 1 request split into samples single-sample requests.
func (m *Metrics) IncSplit(handoff string, samples int) {
	m.splits.WithLabelValues(handoff).Inc()
	m.splitSamples.WithLabelValues(handoff).Add(float64(samples))
}

// IncMigration counts a mid-stream migration's try by reason and outcome.
func (m *Metrics) IncMigration(reason, outcome string) {
	m.migrations.WithLabelValues(reason, outcome).Inc()
}

// AddMigrationPrefill counts the tokens a migrated stream's continuation prefilled again.
func (m *Metrics) AddMigrationPrefill(tokens int) { m.migrationTokens.Add(float64(tokens)) }

// IncPrefillSkipped counts a PD request sent to a decode worker alone.
func (m *Metrics) IncPrefillSkipped(handoff, reason string) {
	m.prefillSkipped.WithLabelValues(handoff, reason).Inc()
}

// IncPDPair counts a PD pair formed, by distance and revision.
func (m *Metrics) IncPDPair(distance, revision string) {
	m.pairOf.get(nil, [2]string{distance, revision}, func() prometheus.Counter { return m.pdPairs.WithLabelValues(distance, revision) }).Inc()
}

// IncKVTransferFallback counts a decode sent without KV transfer parameters (it recomputes the prompt).
func (m *Metrics) IncKVTransferFallback(handoff string) { m.kvFallbacks.WithLabelValues(handoff).Inc() }

// IncRetry counts one retried attempt.
func (m *Metrics) IncRetry() { m.retries.Inc() }

// ObserveUpstream records a worker's response status; status 0 means a transport error. Statuses from
// 400 up are also counted as errors by class (transport errors: IncWorkerError).
func (m *Metrics) ObserveUpstream(worker string, status int) {
	if status == 200 {
		m.upstreamOKCounter(worker).Inc()
		return
	}
	s := "error"
	if status > 0 {
		s = m.status(status)
	}
	m.upstream.WithLabelValues(worker, s).Inc()
	if c := ErrorClass(status); c != "" {
		m.workerErrors.WithLabelValues(worker, c).Inc()
	}
}

func (m *Metrics) upstreamOKCounter(worker string) prometheus.Counter {
	return m.upstreamOK.get(&m.workerMu, worker, func() prometheus.Counter { return m.upstream.WithLabelValues(worker, "200") })
}

// IncWorkerError counts a failure of a leg on worker that has no HTTP status (class ClassTransport,
// ClassTimeout or ClassStream).
func (m *Metrics) IncWorkerError(worker, class string) {
	m.workerErrors.WithLabelValues(worker, class).Inc()
}

// SetWorkerHealth records whether a worker is healthy.
func (m *Metrics) SetWorkerHealth(worker string, healthy bool) {
	v := 0.0
	if healthy {
		v = 1
	}
	m.workerHealth.WithLabelValues(worker).Set(v)
}

// IncHealthTransition counts a worker's health change.
func (m *Metrics) IncHealthTransition(worker, from, to string) {
	m.healthTransitions.WithLabelValues(worker, from, to).Inc()
}

// IncBreakerTransition counts a worker's circuit breaker state change and its reason
// (worker.Reason*: consecutive_failures, half_open_failure, open_timeout, health_probe,
// half_open_successes).
func (m *Metrics) IncBreakerTransition(worker, from, to, reason string) {
	m.breakerTransitions.WithLabelValues(worker, from, to, reason).Inc()
}

// SetEngineLoad records the load a worker's engine reported.
func (m *Metrics) SetEngineLoad(worker string, running, waiting int, kvUsage float64) {
	m.engineRunning.WithLabelValues(worker).Set(float64(running))
	m.engineWaiting.WithLabelValues(worker).Set(float64(waiting))
	m.engineKVUsage.WithLabelValues(worker).Set(kvUsage)
}

// EngineLoadFailed counts a failed load poll and drops the worker's engine gauges, so a stale value
// never passes for a current one.
func (m *Metrics) EngineLoadFailed(worker string) {
	m.engineLoadErrors.WithLabelValues(worker).Inc()
	m.engineRunning.DeleteLabelValues(worker)
	m.engineWaiting.DeleteLabelValues(worker)
	m.engineKVUsage.DeleteLabelValues(worker)
}

// SetInflight sets the admission slots held on worker.
func (m *Metrics) SetInflight(worker string, n int) {
	m.inflightOf.get(&m.workerMu, worker, func() prometheus.Gauge { return m.admissionInflight.WithLabelValues(worker) }).Set(float64(n))
}

// AddQueued moves the number of requests waiting in queue by delta.
func (m *Metrics) AddQueued(queue string, delta int) {
	m.admissionQueued.WithLabelValues(queue).Add(float64(delta))
}

// ObserveWait records one admission wait in queue, ended by a grant on worker ("" when none).
func (m *Metrics) ObserveWait(queue, worker string, d time.Duration) {
	m.waitOf.get(&m.workerMu, [2]string{queue, worker}, func() prometheus.Observer {
		return m.admissionWait.WithLabelValues(queue, worker)
	}).Observe(d.Seconds())
}

// IncRejection counts one admission rejection in queue.
func (m *Metrics) IncRejection(queue, reason string) {
	m.admissionRejects.WithLabelValues(queue, reason).Inc()
}

// SetInflightTokens sets the estimated prompt tokens of the admission slots held on worker.
func (m *Metrics) SetInflightTokens(worker string, n int64) {
	m.tokensOf.get(&m.workerMu, worker, func() prometheus.Gauge { return m.admissionTokens.WithLabelValues(worker) }).Set(float64(n))
}

// SetSeats sets the decode seats held on decode worker (a URL or URL@rank key).
func (m *Metrics) SetSeats(worker string, n int) {
	m.decodeInflight.WithLabelValues(worker).Set(float64(n))
}

// SetSeatLimit sets decode worker's seat bound.
func (m *Metrics) SetSeatLimit(worker string, n int) {
	m.decodeLimit.WithLabelValues(worker).Set(float64(n))
}

// ObserveDecodeWait records one admission wait in queue that the decode side held back.
func (m *Metrics) ObserveDecodeWait(queue string, d time.Duration) {
	m.decodeWait.WithLabelValues(queue).Observe(d.Seconds())
}

// DeleteSeatWorker deletes a removed decode worker's seat series.
func (m *Metrics) DeleteSeatWorker(worker string) {
	m.decodeInflight.DeleteLabelValues(worker)
	m.decodeLimit.DeleteLabelValues(worker)
}

// SetBandQueued sets the requests waiting for admission in one priority band.
func (m *Metrics) SetBandQueued(band string, n int) {
	m.bandQueued.WithLabelValues(band).Set(float64(n))
}

// ObserveBandWait records one admission wait of a request of band.
func (m *Metrics) ObserveBandWait(band string, d time.Duration) {
	m.bandWait.WithLabelValues(band).Observe(d.Seconds())
}

// KeepBands deletes the per-band series of every priority band not in names: bands turned off (or
// renamed) through the admin API leave no stale gauge behind.
func (m *Metrics) KeepBands(names []string) {
	for _, band := range labelValues(m.bandQueued, "band") {
		if !slices.Contains(names, band) {
			m.bandQueued.DeleteLabelValues(band)
		}
	}
	for _, band := range labelValues(m.bandWait, "band") {
		if !slices.Contains(names, band) {
			m.bandWait.DeleteLabelValues(band)
		}
	}
}

// labelValues lists the values label takes in c's series (a vector keeps no list of its own).
func labelValues(c prometheus.Collector, label string) []string {
	ch := make(chan prometheus.Metric)
	go func() { c.Collect(ch); close(ch) }()
	var out []string
	for pm := range ch {
		var d dto.Metric
		if err := pm.Write(&d); err != nil {
			continue
		}
		for _, lp := range d.GetLabel() {
			if lp.GetName() == label && !slices.Contains(out, lp.GetValue()) {
				out = append(out, lp.GetValue())
			}
		}
	}
	return out
}

// DeleteWorker deletes every per-worker series of a removed worker.
func (m *Metrics) DeleteWorker(worker string) {
	m.workerMu.Lock()
	defer m.workerMu.Unlock()
	is := func(w string) bool { return w == worker }
	m.upstreamOK.drop(is)
	m.inflightOf.drop(is)
	m.tokensOf.drop(is)
	m.waitOf.drop(func(k [2]string) bool { return k[1] == worker })
	for _, g := range []*prometheus.GaugeVec{m.admissionInflight, m.admissionTokens, m.workerHealth,
		m.engineRunning, m.engineWaiting, m.engineKVUsage} {
		g.DeleteLabelValues(worker)
	}
	byWorker := prometheus.Labels{"worker": worker}
	for _, c := range []*prometheus.CounterVec{m.upstream, m.workerErrors, m.healthTransitions,
		m.breakerTransitions, m.engineLoadErrors} {
		c.DeletePartialMatch(byWorker)
	}
	for _, h := range []*prometheus.HistogramVec{m.workerTTFT, m.workerITL, m.admissionWait, m.predictedTTFT, m.predictionError} {
		h.DeletePartialMatch(byWorker)
	}
}
