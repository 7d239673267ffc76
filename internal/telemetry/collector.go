package telemetry

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

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

// RankSample is the load on one data-parallel rank of a worker.
type RankSample struct {
	Worker string
	Rank   int
	Load   int64
}

// RegisterRankCollector exports, at scrape time, the backend requests in flight on each data-parallel
// rank of the workers that have several (sluice_worker_rank_active_requests{worker,rank}). Ranks are
// few per engine (its dp_size), so the series stay bounded.
func RegisterRankCollector(reg prometheus.Registerer, sample func() []RankSample) {
	reg.MustRegister(&rankCollector{
		desc: prometheus.NewDesc("sluice_worker_rank_active_requests",
			"Backend requests in flight per data-parallel rank of a worker.", []string{"worker", "rank"}, nil),
		sample: sample,
	})
}

type rankCollector struct {
	desc   *prometheus.Desc
	sample func() []RankSample
}

func (c *rankCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *rankCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.sample() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(s.Load), s.Worker, strconv.Itoa(s.Rank))
	}
}
