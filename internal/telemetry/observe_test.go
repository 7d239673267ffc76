package telemetry_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicegw/sluice/internal/telemetry"
)

func TestModelLabel(t *testing.T) {
	t.Parallel()
	known := []string{"llama", "qwen"}
	for in, want := range map[string]string{"llama": "llama", "qwen": "qwen", "gpt-5": telemetry.OtherModel, "": ""} {
		if got := telemetry.ModelLabel(known, in); got != want {
			t.Errorf("ModelLabel(%q) = %q, want %q", in, got, want)
		}
	}
	if got := telemetry.ModelLabel(nil, "llama"); got != telemetry.OtherModel {
		t.Errorf("with no known models: %q, want %q", got, telemetry.OtherModel)
	}
}

func TestErrorClass(t *testing.T) {
	t.Parallel()
	for status, want := range map[int]string{
		200: "", 302: "", 400: telemetry.ClassClientError, 404: telemetry.ClassClientError, 408: telemetry.ClassTimeout,
		429: telemetry.ClassRateLimited, 500: telemetry.ClassServerError, 503: telemetry.ClassServerError, 504: telemetry.ClassTimeout,
	} {
		if got := telemetry.ErrorClass(status); got != want {
			t.Errorf("ErrorClass(%d) = %q, want %q", status, got, want)
		}
	}
}

// TestExemplarsInOpenMetrics: a latency observed under a sampled trace carries its trace id as an
// exemplar, which the handler exposes when the scraper asks for OpenMetrics (as Prometheus does), and
// leaves out of the classic text format.
func TestExemplarsInOpenMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := telemetry.NewMetrics(reg)
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	sampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	unsampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid})
	m.ObserveStream("/v1/chat/completions", "m", "http://w:1", 700*time.Millisecond, 20*time.Millisecond, sampled)
	m.ObserveRequest("/v1/completions", "m", 200, 3*time.Second, unsampled)

	srv := httptest.NewServer(telemetry.MetricsHandler(reg))
	defer srv.Close()
	scrape := func(accept string) string {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		req.Header.Set("Accept", accept)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	om := scrape("application/openmetrics-text;version=1.0.0;q=0.75,text/plain;version=0.0.4;q=0.5")
	exemplar := `# {trace_id="4bf92f3577b34da6a3ce929d0e0e4736"} 0.7`
	for _, want := range []string{
		`sluice_time_to_first_token_seconds_bucket{model="m",route="/v1/chat/completions",le="1.0"} 1 ` + exemplar,
		`sluice_worker_time_to_first_token_seconds_bucket{worker="http://w:1",le="1.0"} 1 ` + exemplar,
		`sluice_inter_token_latency_seconds_bucket{model="m",route="/v1/chat/completions",le="0.02"} 1 # {trace_id="4bf92f3577b34da6a3ce929d0e0e4736"} 0.02`,
		"# EOF",
	} {
		if !strings.Contains(om, want) {
			t.Errorf("OpenMetrics exposition lacks %q", want)
		}
	}
	if strings.Contains(om, `sluice_request_duration_seconds_bucket{model="m",route="/v1/completions",le="5.0"} 1 #`) {
		t.Error("an unsampled trace left an exemplar")
	}
	if text := scrape("text/plain"); strings.Contains(text, "trace_id") {
		t.Error("the classic text format carries exemplars")
	}
}

func TestEngineLoadGauges(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := telemetry.NewMetrics(reg)
	m.SetEngineLoad("http://a", 3, 7, 0.25)
	const want = `
# HELP sluice_worker_engine_waiting_requests Requests the engine reports waiting in its own queue, polled every --engine-load-interval-secs.
# TYPE sluice_worker_engine_waiting_requests gauge
sluice_worker_engine_waiting_requests{worker="http://a"} 7
# HELP sluice_worker_engine_kv_cache_usage_ratio Fraction of the engine's KV cache in use (0..1) as it reports it, polled every --engine-load-interval-secs.
# TYPE sluice_worker_engine_kv_cache_usage_ratio gauge
sluice_worker_engine_kv_cache_usage_ratio{worker="http://a"} 0.25
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"sluice_worker_engine_waiting_requests", "sluice_worker_engine_kv_cache_usage_ratio"); err != nil {
		t.Error(err)
	}
	// A failed poll drops the readings (a stale value must not pass for a current one) and counts.
	m.EngineLoadFailed("http://a")
	for _, f := range []string{"sluice_worker_engine_running_requests", "sluice_worker_engine_waiting_requests", "sluice_worker_engine_kv_cache_usage_ratio"} {
		if n, _ := testutil.GatherAndCount(reg, f); n != 0 {
			t.Errorf("%s: %d series after a failed poll, want 0", f, n)
		}
	}
	if n, _ := testutil.GatherAndCount(reg, "sluice_worker_engine_load_errors_total"); n != 1 {
		t.Errorf("load errors series = %d, want 1", n)
	}
}

func TestStateCollector(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	state := telemetry.State{
		Roles: []string{"prefill", "decode"},
		Workers: []telemetry.WorkerSample{
			{Worker: "http://p0", ID: "w1", Role: "prefill", Protocol: "sglang", Health: "ready"},
			{Worker: "http://p1", ID: "w2", Role: "prefill", Protocol: "sglang", Health: "not_ready"},
			{Worker: "http://d0", ID: "w3", Role: "decode", Protocol: "sglang", Health: "ready"},
		},
		// p0's limit adapted to 7; p1 has not been seen by admission: the starting limit.
		Admission: telemetry.AdmissionSample{Enabled: true, Limit: 4, Limits: map[string]int{"http://p0": 7},
			QueueSize: 100, QueueTimeout: 60},
	}
	telemetry.RegisterStateCollector(reg, "1.2.3", "pd", func() telemetry.State { return state })
	const want = `
# HELP sluice_gateway_info Always 1: the gateway's version and routing mode (pd or regular).
# TYPE sluice_gateway_info gauge
sluice_gateway_info{mode="pd",version="1.2.3"} 1
# HELP sluice_pd_prefill_admission_limit Prefill admission slot limit per prefill worker, adaptive or fixed (only while admission is on).
# TYPE sluice_pd_prefill_admission_limit gauge
sluice_pd_prefill_admission_limit{worker="http://p0"} 7
sluice_pd_prefill_admission_limit{worker="http://p1"} 4
# HELP sluice_pd_prefill_admission_queue_limit Bound on requests waiting for a prefill slot, all queues together (only while admission is on).
# TYPE sluice_pd_prefill_admission_queue_limit gauge
sluice_pd_prefill_admission_queue_limit 100
# HELP sluice_workers Registered workers per role and health state.
# TYPE sluice_workers gauge
sluice_workers{health="draining",role="decode"} 0
sluice_workers{health="draining",role="prefill"} 0
sluice_workers{health="not_ready",role="decode"} 0
sluice_workers{health="not_ready",role="prefill"} 1
sluice_workers{health="pending",role="decode"} 0
sluice_workers{health="pending",role="prefill"} 0
sluice_workers{health="ready",role="decode"} 1
sluice_workers{health="ready",role="prefill"} 1
`
	names := []string{"sluice_gateway_info", "sluice_pd_prefill_admission_limit", "sluice_pd_prefill_admission_queue_limit", "sluice_workers"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	if n, _ := testutil.GatherAndCount(reg, "sluice_worker_info"); n != 3 {
		t.Errorf("worker info series = %d, want 3", n)
	}
	// A token budget alone: admission is on but no request limit applies.
	state.Admission = telemetry.AdmissionSample{Enabled: true, QueueSize: 100, QueueTimeout: 60}
	if n, _ := testutil.GatherAndCount(reg, "sluice_pd_prefill_admission_limit"); n != 0 {
		t.Errorf("%d limit series without a request limit, want 0", n)
	}
	// Admission off: no limits; no prefill worker ready: an explicit 0.
	state.Admission = telemetry.AdmissionSample{}
	state.Workers = state.Workers[1:]
	if n, _ := testutil.GatherAndCount(reg, "sluice_pd_prefill_admission_limit", "sluice_pd_prefill_admission_queue_limit",
		"sluice_pd_prefill_admission_queue_timeout_seconds"); n != 0 {
		t.Errorf("%d admission series with admission off, want 0", n)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP sluice_workers Registered workers per role and health state.
# TYPE sluice_workers gauge
sluice_workers{health="draining",role="decode"} 0
sluice_workers{health="draining",role="prefill"} 0
sluice_workers{health="not_ready",role="decode"} 0
sluice_workers{health="not_ready",role="prefill"} 1
sluice_workers{health="pending",role="decode"} 0
sluice_workers{health="pending",role="prefill"} 0
sluice_workers{health="ready",role="decode"} 1
sluice_workers{health="ready",role="prefill"} 0
`), "sluice_workers"); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) != 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}
