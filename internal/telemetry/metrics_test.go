package telemetry_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicegw/sluice/internal/telemetry"
)

func familyNames(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	return names
}

func TestNewMetricsRegisters(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	telemetry.NewMetrics(reg)
	// Unlabelled instruments are exported at once, and the one KV handoff that can fall back;
	// other vectors appear with their first series.
	want := []string{
		"sluice_migration_prefill_tokens_total",
		"sluice_pd_kv_transfer_fallbacks_total",
		"sluice_pd_prefill_skipped_total",
		"sluice_retries_total",
	}
	if diff := cmp.Diff(want, familyNames(t, reg)); diff != "" {
		t.Errorf("families mismatch (-want +got):\n%s", diff)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil || len(problems) != 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

func TestNewMetricsTwiceOnOneRegistryPanics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	telemetry.NewMetrics(reg)
	defer func() {
		if recover() == nil {
			t.Error("second NewMetrics on the same registry did not panic")
		}
	}()
	telemetry.NewMetrics(reg)
}

func TestMetricsRecord(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := telemetry.NewMetrics(reg)
	var none trace.SpanContext
	m.ObserveRequest("chat", "m", 200, 30*time.Millisecond, none)
	m.ObserveRequest("chat", "m", 200, 40*time.Millisecond, none)
	m.ObserveRequest("chat", "m", 429, time.Millisecond, none)
	m.ObserveUpstream("http://a", 200)
	m.ObserveUpstream("http://a", 0)
	m.ObserveUpstream("http://a", 0)
	m.ObserveUpstream("http://a", 503)
	m.ObserveUpstream("http://a", 429)
	m.ObserveUpstream("http://a", 504)
	m.IncWorkerError("http://a", telemetry.ClassTransport)
	m.IncRetry()
	m.IncRejection("m", "queue_full")
	m.AddQueued("m", 1)
	m.AddQueued("m", 1)
	m.AddQueued("m", 1)
	m.AddQueued("n", 1)
	m.AddQueued("n", -1)
	m.AddTokens("chat", "m", 12, 0)
	m.AddTokens("chat", "m", 3, 5)

	const want = `
# HELP sluice_requests_total Client requests by route, model and HTTP status.
# TYPE sluice_requests_total counter
sluice_requests_total{model="m",route="chat",status="200"} 2
sluice_requests_total{model="m",route="chat",status="429"} 1
# HELP sluice_upstream_responses_total Responses from workers by worker and status ("error" for transport errors).
# TYPE sluice_upstream_responses_total counter
sluice_upstream_responses_total{status="200",worker="http://a"} 1
sluice_upstream_responses_total{status="429",worker="http://a"} 1
sluice_upstream_responses_total{status="503",worker="http://a"} 1
sluice_upstream_responses_total{status="504",worker="http://a"} 1
sluice_upstream_responses_total{status="error",worker="http://a"} 2
# HELP sluice_worker_errors_total Failed legs per worker by class: client_error, rate_limited, server_error, timeout, transport, stream.
# TYPE sluice_worker_errors_total counter
sluice_worker_errors_total{class="rate_limited",worker="http://a"} 1
sluice_worker_errors_total{class="server_error",worker="http://a"} 1
sluice_worker_errors_total{class="timeout",worker="http://a"} 1
sluice_worker_errors_total{class="transport",worker="http://a"} 1
# HELP sluice_tokens_total Tokens of answered requests by type (input = prompt, output = completion), from the engines' usage.
# TYPE sluice_tokens_total counter
sluice_tokens_total{model="m",route="chat",type="input"} 15
sluice_tokens_total{model="m",route="chat",type="output"} 5
# HELP sluice_retries_total Request attempts retried after a retryable failure.
# TYPE sluice_retries_total counter
sluice_retries_total 1
# HELP sluice_pd_prefill_admission_rejections_total Requests rejected by prefill admission, per queue (model) and reason.
# TYPE sluice_pd_prefill_admission_rejections_total counter
sluice_pd_prefill_admission_rejections_total{queue="m",reason="queue_full"} 1
# HELP sluice_pd_prefill_admission_queued Requests waiting for a prefill admission slot, per queue (model); sum them for the total bounded by the queue size.
# TYPE sluice_pd_prefill_admission_queued gauge
sluice_pd_prefill_admission_queued{queue="m"} 3
sluice_pd_prefill_admission_queued{queue="n"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"sluice_requests_total", "sluice_upstream_responses_total", "sluice_worker_errors_total", "sluice_tokens_total",
		"sluice_retries_total", "sluice_pd_prefill_admission_rejections_total", "sluice_pd_prefill_admission_queued"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg, "sluice_request_duration_seconds"); err != nil || n != 1 {
		t.Errorf("request duration series = %d (%v), want 1 (route chat, model m)", n, err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil || len(problems) != 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// workerSeries counts the series carrying worker="w", over every family.
func workerSeries(t *testing.T, reg *prometheus.Registry, w string) map[string]int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	out := map[string]int{}
	for _, mf := range mfs {
		for _, metric := range mf.GetMetric() {
			if slices.ContainsFunc(metric.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == "worker" && l.GetValue() == w }) {
				out[mf.GetName()]++
			}
		}
	}
	return out
}

func TestDeleteWorker(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := telemetry.NewMetrics(reg)
	var none trace.SpanContext
	for _, w := range []string{"http://a:8000", "http://b:8000"} {
		m.SetInflight(w, 2)
		m.SetWorkerHealth(w, true)
		m.ObserveUpstream(w, 200)
		m.ObserveUpstream(w, 503)
		m.ObserveUpstream(w, 0)
		m.IncWorkerError(w, telemetry.ClassTransport)
		m.IncHealthTransition(w, "pending", "ready")
		m.IncBreakerTransition(w, "closed", "open", "consecutive_failures")
		m.ObserveStream("chat", "m", w, time.Second, 10*time.Millisecond, none)
		m.SetEngineLoad(w, 1, 2, 0.5)
		m.EngineLoadFailed("x" + w) // another worker's failure
		m.ObserveWait("m", w, time.Second)
	}
	perWorker := map[string]int{
		"sluice_pd_prefill_admission_inflight":      1,
		"sluice_worker_healthy":                     1,
		"sluice_upstream_responses_total":           3,
		"sluice_worker_errors_total":                2, // server_error, transport
		"sluice_worker_health_transitions_total":    1,
		"sluice_worker_breaker_transitions_total":   1,
		"sluice_worker_time_to_first_token_seconds": 1,
		"sluice_worker_inter_token_latency_seconds": 1,
		"sluice_worker_engine_running_requests":     1,
		"sluice_worker_engine_waiting_requests":     1,
		"sluice_worker_engine_kv_cache_usage_ratio": 1,
		"sluice_pd_prefill_admission_wait_seconds":  1,
	}
	if diff := cmp.Diff(perWorker, workerSeries(t, reg, "http://a:8000")); diff != "" {
		t.Fatalf("series of a before delete (-want +got):\n%s", diff)
	}

	m.DeleteWorker("http://a:8000")

	if got := workerSeries(t, reg, "http://a:8000"); len(got) != 0 {
		t.Errorf("series of the deleted worker remain: %v", got)
	}
	if diff := cmp.Diff(perWorker, workerSeries(t, reg, "http://b:8000")); diff != "" {
		t.Errorf("series of the other worker changed (-want +got):\n%s", diff)
	}
	// Deleting an unknown worker (or twice) is harmless.
	m.DeleteWorker("http://a:8000")
	m.DeleteWorker("http://nobody")
	if diff := cmp.Diff(perWorker, workerSeries(t, reg, "http://b:8000")); diff != "" {
		t.Errorf("series of the other worker changed (-want +got):\n%s", diff)
	}
	// A worker added again under the same URL exports its series again, from zero: nothing written
	// after the delete goes to a child the registry no longer exports.
	m.SetInflight("http://a:8000", 1)
	m.SetInflightTokens("http://a:8000", 5)
	m.ObserveUpstream("http://a:8000", 200)
	m.ObserveWait("m", "http://a:8000", time.Second)
	want := map[string]int{
		"sluice_pd_prefill_admission_inflight":        1,
		"sluice_pd_prefill_admission_inflight_tokens": 1,
		"sluice_upstream_responses_total":             1,
		"sluice_pd_prefill_admission_wait_seconds":    1,
	}
	if diff := cmp.Diff(want, workerSeries(t, reg, "http://a:8000")); diff != "" {
		t.Errorf("series of the worker added again (-want +got):\n%s", diff)
	}
	// Its answers count from zero, not from the deleted series' count.
	if got := upstreamOK(t, reg, "http://a:8000"); got != 1 {
		t.Errorf("200 answers of the worker added again: %v, want 1", got)
	}
}

// upstreamOK is the gathered value of sluice_upstream_responses_total{worker,status="200"}.
func upstreamOK(t *testing.T, reg *prometheus.Registry, worker string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "sluice_upstream_responses_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["worker"] == worker && labels["status"] == "200" {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no 200 answers of %s", worker)
	return 0
}

// TestRegisterActiveCollector: the in-flight legs of each worker are read when scraped, so a
// removed worker has no series, whatever its last legs do after.
func TestRegisterActiveCollector(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	samples := []telemetry.ActiveSample{{Worker: "http://a", Load: 1}, {Worker: "http://b", Load: 3}}
	telemetry.RegisterActiveCollector(reg, func() []telemetry.ActiveSample { return samples })
	const both = `
# HELP sluice_worker_active_requests Backend requests in flight per worker.
# TYPE sluice_worker_active_requests gauge
sluice_worker_active_requests{worker="http://a"} 1
sluice_worker_active_requests{worker="http://b"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(both), "sluice_worker_active_requests"); err != nil {
		t.Error(err)
	}
	samples = samples[1:] // a removed
	const onlyB = `
# HELP sluice_worker_active_requests Backend requests in flight per worker.
# TYPE sluice_worker_active_requests gauge
sluice_worker_active_requests{worker="http://b"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(onlyB), "sluice_worker_active_requests"); err != nil {
		t.Error(err)
	}
}

func TestWorkerGauges(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := telemetry.NewMetrics(reg)
	m.SetWorkerHealth("http://a", true)
	m.SetWorkerHealth("http://a", false)
	m.SetWorkerHealth("http://b", true)
	m.SetInflight("http://a", 4)
	const want = `
# HELP sluice_worker_healthy 1 when the worker is healthy (routable health state), else 0.
# TYPE sluice_worker_healthy gauge
sluice_worker_healthy{worker="http://a"} 0
sluice_worker_healthy{worker="http://b"} 1
# HELP sluice_pd_prefill_admission_inflight Prefill admission slots held per prefill worker.
# TYPE sluice_pd_prefill_admission_inflight gauge
sluice_pd_prefill_admission_inflight{worker="http://a"} 4
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"sluice_worker_healthy", "sluice_pd_prefill_admission_inflight"); err != nil {
		t.Error(err)
	}
}

func TestRegisterBreakerCollector(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	samples := []telemetry.BreakerSample{{Worker: "http://a", State: 0}, {Worker: "http://b", State: 1}, {Worker: "http://c", State: 2}}
	scrapes := 0
	telemetry.RegisterBreakerCollector(reg, func() []telemetry.BreakerSample {
		scrapes++
		return samples
	})
	const head = `
# HELP sluice_worker_circuit_breaker_state Circuit breaker state per worker: 0 closed, 1 open, 2 half-open.
# TYPE sluice_worker_circuit_breaker_state gauge
`
	tests := []struct {
		name    string
		samples []telemetry.BreakerSample
		want    string
	}{
		{
			name:    "every state",
			samples: samples,
			want: head + `sluice_worker_circuit_breaker_state{worker="http://a"} 0
sluice_worker_circuit_breaker_state{worker="http://b"} 1
sluice_worker_circuit_breaker_state{worker="http://c"} 2
`,
		},
		{
			name:    "read again at the next scrape",
			samples: []telemetry.BreakerSample{{Worker: "http://b", State: 2}},
			want:    head + `sluice_worker_circuit_breaker_state{worker="http://b"} 2` + "\n",
		},
		{
			name:    "no workers",
			samples: nil,
			want:    "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			samples = tt.samples
			before := scrapes
			if err := testutil.GatherAndCompare(reg, strings.NewReader(tt.want), "sluice_worker_circuit_breaker_state"); err != nil {
				t.Error(err)
			}
			if scrapes != before+1 {
				t.Errorf("sample ran %d times for one scrape, want 1", scrapes-before)
			}
		})
	}
}

// BenchmarkPDRequestMetrics: the instruments one PD request writes (both legs' workers), from every
// P at once.
func BenchmarkPDRequestMetrics(b *testing.B) {
	m := telemetry.NewMetrics(prometheus.NewRegistry())
	const pw, dw = "http://10.0.0.1:30001", "http://10.0.0.2:30002"
	var none trace.SpanContext
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.SetInflight(pw, 1)
			m.SetInflightTokens(pw, 64)
			m.ObserveWait("m", pw, 0)
			m.IncPDPair("same_rack", "r1")
			m.ObserveUpstream(pw, 200)
			m.ObservePrefill("bootstrap", time.Millisecond, none)
			m.SetInflight(pw, 0)
			m.SetInflightTokens(pw, 0)
			m.ObserveUpstream(dw, 200)
			m.AddTokens("/v1/chat/completions", "m", 64, 8)
			m.ObserveRequest("/v1/chat/completions", "m", 200, 2*time.Millisecond, none)
		}
	})
}
