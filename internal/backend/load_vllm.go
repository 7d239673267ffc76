package backend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// vLLM serves its load only as Prometheus gauges on /metrics (vllm/v1/metrics/loggers.py), one series
// per model (label model_name) and engine. KV usage was vllm:gpu_cache_usage_perc in V0 and is
// vllm:kv_cache_usage_perc in V1; both are read.
const (
	vllmRunning   = "vllm:num_requests_running"
	vllmWaiting   = "vllm:num_requests_waiting"
	vllmKVUsage   = "vllm:kv_cache_usage_perc"
	vllmKVUsageV0 = "vllm:gpu_cache_usage_perc"
)

// maxMetricsBody bounds an engine's /metrics exposition.
const maxMetricsBody = 16 << 20

// fetchVLLMLoad reads GET /metrics with the Prometheus text parser: running and waiting are summed
// over series, KV usage averaged. A body without the running or waiting gauge is an error, so an
// engine of unknown load never looks idle.
func (u *Upstream) fetchVLLMLoad(ctx context.Context, base string) (Load, error) {
	resp, err := u.Do(ctx, http.MethodGet, base+"/metrics", nil, http.Header{"Accept": {"text/plain"}})
	if err != nil {
		return Load{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return Load{}, &StatusError{Method: http.MethodGet, URL: base + "/metrics", Code: resp.StatusCode, Body: snippet(b)}
	}
	return ParseVLLMMetrics(io.LimitReader(resp.Body, maxMetricsBody))
}

// ParseVLLMMetrics reads vLLM's load from a Prometheus text exposition.
func ParseVLLMMetrics(r io.Reader) (Load, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return Load{}, fmt.Errorf("vllm metrics: %w", err)
	}
	running, okR := sumGauge(fams[vllmRunning])
	waiting, okW := sumGauge(fams[vllmWaiting])
	if !okR || !okW {
		return Load{}, errors.New("vllm metrics: no " + vllmRunning + " or " + vllmWaiting + " gauge")
	}
	l := Load{Running: int(running), Waiting: int(waiting)}
	for _, name := range []string{vllmKVUsage, vllmKVUsageV0} {
		if sum, n := gaugeSumCount(fams[name]); n > 0 {
			l.KVUsage = sum / float64(n)
			break
		}
	}
	return l, nil
}

func sumGauge(f *dto.MetricFamily) (float64, bool) {
	sum, n := gaugeSumCount(f)
	return sum, n > 0
}

func gaugeSumCount(f *dto.MetricFamily) (float64, int) {
	if f == nil {
		return 0, 0
	}
	var sum float64
	n := 0
	for _, m := range f.GetMetric() {
		switch {
		case m.GetGauge() != nil:
			sum += m.GetGauge().GetValue()
		case m.GetUntyped() != nil:
			sum += m.GetUntyped().GetValue()
		default:
			continue
		}
		n++
	}
	return sum, n
}
