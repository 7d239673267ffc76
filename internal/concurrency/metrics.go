package concurrency

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// PrometheusMetrics are the limiter's instruments.
type PrometheusMetrics struct {
	inflight, queued prometheus.Gauge
	wait             prometheus.Histogram
	rejections       *prometheus.CounterVec
}

// NewPrometheusMetrics registers the limiter's instruments on reg:
// sluice_gateway_inflight_requests, sluice_gateway_queued_requests,
// sluice_gateway_queue_wait_seconds and sluice_gateway_rejections_total{reason}.
func NewPrometheusMetrics(reg prometheus.Registerer) *PrometheusMetrics {
	m := &PrometheusMetrics{
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_gateway_inflight_requests", Help: "Requests holding a gateway concurrency token (--max-concurrent-requests).",
		}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_gateway_queued_requests", Help: "Requests waiting for a gateway concurrency token.",
		}),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_gateway_queue_wait_seconds", Help: "Time requests waited for a gateway concurrency token before getting one.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_gateway_rejections_total", Help: "Requests refused by the gateway concurrency limit, by reason (queue_full: 429, queue_timeout: 408).",
		}, []string{"reason"}),
	}
	reg.MustRegister(m.inflight, m.queued, m.wait, m.rejections)
	for _, r := range []string{"queue_full", "queue_timeout"} {
		m.rejections.WithLabelValues(r)
	}
	return m
}

// SetInflight implements Metrics.
func (m *PrometheusMetrics) SetInflight(n int) { m.inflight.Set(float64(n)) }

// SetQueued implements Metrics.
func (m *PrometheusMetrics) SetQueued(n int) { m.queued.Set(float64(n)) }

// ObserveWait implements Metrics.
func (m *PrometheusMetrics) ObserveWait(d time.Duration) { m.wait.Observe(d.Seconds()) }

// IncRejection implements Metrics.
func (m *PrometheusMetrics) IncRejection(reason string) { m.rejections.WithLabelValues(reason).Inc() }
