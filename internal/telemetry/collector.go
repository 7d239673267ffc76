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

// RegisterBreakerCollector exports sluice_worker_circuit_breaker_state from sample, read at scrape
// time: breakers turn half-open lazily, without an event, so a gauge set on transitions would show
// "open" long after the breaker let traffic through again.
func RegisterBreakerCollector(reg prometheus.Registerer, sample func() []BreakerSample) {
	reg.MustRegister(&sampledGauge[BreakerSample]{
		desc: prometheus.NewDesc("sluice_worker_circuit_breaker_state",
			"Circuit breaker state per worker: 0 closed, 1 open, 2 half-open.", []string{"worker"}, nil),
		sample: sample,
		series: func(s BreakerSample) (float64, []string) { return float64(s.State), []string{s.Worker} },
	})
}

// ActiveSample is the backend requests in flight on one worker (all its ranks).
type ActiveSample struct {
	Worker string
	Load   int64
}

// RegisterActiveCollector exports sluice_worker_active_requests{worker} from sample, read at scrape
// time: the workers count their own legs in flight (atomics), so the request path writes no gauge,
// and a removed worker's series goes with it instead of coming back when its last leg ends.
func RegisterActiveCollector(reg prometheus.Registerer, sample func() []ActiveSample) {
	reg.MustRegister(&sampledGauge[ActiveSample]{
		desc:   prometheus.NewDesc("sluice_worker_active_requests", "Backend requests in flight per worker.", []string{"worker"}, nil),
		sample: sample,
		series: func(s ActiveSample) (float64, []string) { return float64(s.Load), []string{s.Worker} },
	})
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
	reg.MustRegister(&sampledGauge[RankSample]{
		desc: prometheus.NewDesc("sluice_worker_rank_active_requests",
			"Backend requests in flight per data-parallel rank of a worker.", []string{"worker", "rank"}, nil),
		sample: sample,
		series: func(s RankSample) (float64, []string) {
			return float64(s.Load), []string{s.Worker, strconv.Itoa(s.Rank)}
		},
	})
}

// sampledGauge is one gauge family read at scrape time: a series per sample, its value and label
// values given by series.
type sampledGauge[S any] struct {
	desc   *prometheus.Desc
	sample func() []S
	series func(S) (float64, []string)
}

func (c *sampledGauge[S]) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *sampledGauge[S]) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.sample() {
		v, labels := c.series(s)
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, labels...)
	}
}

// WorkerSample is one registered worker at scrape time.
type WorkerSample struct {
	Worker   string // URL, the worker label everywhere
	ID       string
	Role     string // regular, prefill or decode
	Protocol string
	Health   string // pending, ready, not_ready or draining
}

// AdmissionSample is prefill admission's configuration at scrape time.
type AdmissionSample struct {
	Enabled bool
	// Limit is the slot limit of a prefill worker admission has not seen yet; Limits holds the current
	// limit of each worker it has (adaptive limits and cluster shares differ per worker).
	Limit        int
	Limits       map[string]int
	QueueSize    int
	QueueTimeout float64 // seconds
}

// State is what the state collector reads at scrape time.
type State struct {
	// Roles are the worker roles of the gateway's mode (prefill and decode, or regular): sluice_workers
	// exports every role x health pair of them, zeros included, so "no ready prefill worker" is a
	// value (0), not a missing series.
	Roles     []string
	Workers   []WorkerSample
	Admission AdmissionSample
}

// healthStates is the closed set of worker health label values.
var healthStates = []string{"pending", "ready", "not_ready", "draining"}

type stateCollector struct {
	info, workers, limit, queueSize, queueTimeout, gateway *prometheus.Desc
	version, mode                                          string
	sample                                                 func() State
}

// RegisterStateCollector exports, from sample read at scrape time: sluice_gateway_info{version,mode},
// sluice_worker_info{worker,id,role,protocol}, sluice_workers{role,health}, and with admission on
// sluice_pd_prefill_admission_limit{worker} (per prefill worker), sluice_pd_prefill_admission_queue_limit
// and sluice_pd_prefill_admission_queue_timeout_seconds. Read at scrape time, they can never disagree
// with the registry or the live admission settings.
func RegisterStateCollector(reg prometheus.Registerer, version, mode string, sample func() State) {
	reg.MustRegister(&stateCollector{
		gateway: prometheus.NewDesc("sluice_gateway_info", "Always 1: the gateway's version and routing mode (pd or regular).",
			[]string{"version", "mode"}, nil),
		info: prometheus.NewDesc("sluice_worker_info", "Always 1 per registered worker: its id, role and protocol (join on worker).",
			[]string{"worker", "id", "role", "protocol"}, nil),
		workers: prometheus.NewDesc("sluice_workers", "Registered workers per role and health state.",
			[]string{"role", "health"}, nil),
		limit: prometheus.NewDesc("sluice_pd_prefill_admission_limit",
			"Prefill admission slot limit per prefill worker, adaptive or fixed (only while admission is on).", []string{"worker"}, nil),
		queueSize: prometheus.NewDesc("sluice_pd_prefill_admission_queue_limit",
			"Bound on requests waiting for a prefill slot, all queues together (only while admission is on).", nil, nil),
		queueTimeout: prometheus.NewDesc("sluice_pd_prefill_admission_queue_timeout_seconds",
			"Longest wait for a prefill slot (only while admission is on).", nil, nil),
		version: version, mode: mode, sample: sample,
	})
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.gateway, c.info, c.workers, c.limit, c.queueSize, c.queueTimeout} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.sample()
	ch <- prometheus.MustNewConstMetric(c.gateway, prometheus.GaugeValue, 1, c.version, c.mode)
	counts := map[[2]string]int{}
	for _, w := range s.Workers {
		ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1, w.Worker, w.ID, w.Role, w.Protocol)
		counts[[2]string{w.Role, w.Health}]++
		if s.Admission.Enabled && w.Role == "prefill" {
			limit, ok := s.Admission.Limits[w.Worker]
			if !ok {
				limit = s.Admission.Limit
			}
			if limit > 0 { // a token budget alone: no request limit to show
				ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(limit), w.Worker)
			}
		}
	}
	for _, role := range s.Roles {
		for _, h := range healthStates {
			ch <- prometheus.MustNewConstMetric(c.workers, prometheus.GaugeValue, float64(counts[[2]string{role, h}]), role, h)
		}
	}
	if s.Admission.Enabled {
		ch <- prometheus.MustNewConstMetric(c.queueSize, prometheus.GaugeValue, float64(s.Admission.QueueSize))
		ch <- prometheus.MustNewConstMetric(c.queueTimeout, prometheus.GaugeValue, s.Admission.QueueTimeout)
	}
}
