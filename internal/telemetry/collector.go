package telemetry

import "github.com/prometheus/client_golang/prometheus"

// BreakerSample is one worker's circuit breaker state at scrape time.
type BreakerSample struct {
	Worker string
	// State is 0 closed, 1 open, 2 half-open.
	State int
}

// breakerCollector reads breaker states when scraped: breakers turn half-open lazily, without an event,
// so a gauge set on transitions would show "open" long after the breaker let traffic through again.
type breakerCollector struct {
	desc   *prometheus.Desc
	sample func() []BreakerSample
}

// RegisterBreakerCollector exports sluice_worker_circuit_breaker_state from sample, read at scrape time.
func RegisterBreakerCollector(reg prometheus.Registerer, sample func() []BreakerSample) {
	reg.MustRegister(&breakerCollector{
		desc: prometheus.NewDesc("sluice_worker_circuit_breaker_state",
			"Circuit breaker state per worker: 0 closed, 1 open, 2 half-open.", []string{"worker"}, nil),
		sample: sample,
	})
}

func (c *breakerCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *breakerCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.sample() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(s.State), s.Worker)
	}
}
