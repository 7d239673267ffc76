package sim

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape parses an engine's /metrics with the Prometheus text parser.
func scrape(t *testing.T, c *http.Client, e *Engine) map[string]*dto.MetricFamily {
	t.Helper()
	status, body := get(t, c, e.URL()+"/metrics")
	if status != 200 {
		t.Fatalf("metrics: %d", status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse metrics: %v\n%s", err, body)
	}
	return families
}

// gaugeValue returns the value of a gauge family's only sample and its labels.
func gaugeValue(t *testing.T, families map[string]*dto.MetricFamily, name string) (float64, map[string]string) {
	t.Helper()
	f, ok := families[name]
	if !ok || f.GetType() != dto.MetricType_GAUGE || len(f.GetMetric()) != 1 {
		t.Fatalf("%s: want one gauge sample, got %v", name, f)
	}
	m := f.GetMetric()[0]
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	return m.GetGauge().GetValue(), labels
}

func TestVLLMRoutes(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Mode: ModeInstant, Protocol: ProtocolVLLM, Models: []string{"m1"}})
	c := testClient(t)

	// SGLang-only routes do not exist on vLLM.
	for _, path := range []string{"/get_server_info", "/server_info", "/get_model_info", "/model_info", "/v1/loads", "/get_load", "/flush_cache", "/health_generate"} {
		if status, body := get(t, c, e.URL()+path); status != 404 || string(body) != `{"detail":"Not Found"}` {
			t.Errorf("GET %s: %d %s, want 404", path, status, body)
		}
	}
	if status, _ := post(t, c, e.URL()+"/flush_cache", ""); status != 404 {
		t.Errorf("POST /flush_cache: %d, want 404", status)
	}
	status, body := get(t, c, e.URL()+"/version")
	if v := decodeJSON[map[string]string](t, body); status != 200 || v["version"] == "" || len(v) != 1 {
		t.Errorf("version: %d %s", status, body)
	}
	status, body = get(t, c, e.URL()+"/v1/models")
	models := decodeJSON[struct {
		Data []map[string]any `json:"data"`
	}](t, body)
	if status != 200 || len(models.Data) != 1 || models.Data[0]["owned_by"] != "vllm" || models.Data[0]["id"] != "m1" ||
		models.Data[0]["max_model_len"] != float64(DefaultContextLength) || models.Data[0]["permission"] == nil {
		t.Errorf("models: %d %s", status, body)
	}
	if status, _ := get(t, c, e.URL()+"/health"); status != 200 {
		t.Errorf("health: %d", status)
	}
	// A regular vLLM response carries "kv_transfer_params": null.
	if status, body := post(t, c, e.URL()+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`); status != 200 ||
		!bytes.Contains(body, []byte(`"kv_transfer_params":null`)) {
		t.Errorf("chat: %d %s", status, body)
	}
}

// TestVLLMMetrics: load is in /metrics as vLLM's gauges, labelled as vLLM labels them.
func TestVLLMMetrics(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Protocol: ProtocolVLLM, Models: []string{"m1"}, MaxRunningRequests: 1})
	c := testClient(t)
	for name, want := range map[string]float64{"vllm:num_requests_running": 0, "vllm:num_requests_waiting": 0, "vllm:kv_cache_usage_perc": 0} {
		v, labels := gaugeValue(t, scrape(t, c, e), name)
		if v != want || labels["model_name"] != "m1" || labels["engine"] != "0" || len(labels) != 2 {
			t.Errorf("%s = %g %v, want %g {engine=0, model_name=m1}", name, v, labels, want)
		}
	}
	// Two long generations with room for one: one runs, one waits.
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{}, 2)
	for range 2 {
		go func() {
			defer func() { done <- struct{}{} }()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.URL()+"/v1/completions", strings.NewReader(`{"prompt":"long","max_tokens":30000}`))
			req.Header.Set("Content-Type", "application/json")
			if resp, err := c.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	waitFor(t, "one running and one waiting request", func() bool { st := e.Stats(); return st.Running == 1 && st.Queued == 1 })
	families := scrape(t, c, e)
	running, _ := gaugeValue(t, families, "vllm:num_requests_running")
	waiting, _ := gaugeValue(t, families, "vllm:num_requests_waiting")
	usage, _ := gaugeValue(t, families, "vllm:kv_cache_usage_perc")
	if running != 1 || waiting != 1 || usage <= 0 || usage > 1 {
		t.Errorf("running %g, waiting %g, kv usage %g; want 1, 1, (0,1]", running, waiting, usage)
	}
	if _, ok := families["sglang:num_running_reqs"]; ok {
		t.Error("a vLLM engine exports SGLang's gauges")
	}
	cancel()
	<-done
	<-done
}
