package telemetry

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// KVEventsMetrics implements kvevents.Metrics (without linking it: internal/app checks the fit) on a Prometheus registry: the size of each worker's
// block index, the events applied, the stores not indexed, the sequence gaps (repaired or not), the
// index clears, the undecodable frames and the lag from the engine's timestamp to application.
// Workers are labelled by URL as everywhere; every other label has a small closed set of values.
// Registered by the gateway (internal/app/kvevents.go); listed in docs/metrics.md.
type KVEventsMetrics struct {
	blocks    *prometheus.GaugeVec
	events    *prometheus.CounterVec
	dropped   *prometheus.CounterVec
	gaps      *prometheus.CounterVec
	clears    *prometheus.CounterVec
	malformed *prometheus.CounterVec
	lag       *prometheus.HistogramVec
}

// kvLagBuckets span 100 µs to 10 s: events are published once per engine step, so lag beyond a few
// steps means a slow subscriber or skewed clocks.
var kvLagBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10}

// NewKVEventsMetrics registers the KV-event instruments on reg.
func NewKVEventsMetrics(reg prometheus.Registerer) *KVEventsMetrics {
	m := &KVEventsMetrics{
		blocks: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_kv_index_blocks",
			Help: "KV-cache blocks indexed for a worker's data-parallel rank, from the engine's KV events."}, []string{"worker", "rank"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_kv_events_total",
			Help: "KV-cache events applied to the index, by kind (BlockStored, BlockRemoved, AllBlocksCleared)."}, []string{"worker", "kind"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_kv_index_dropped_blocks_total",
			Help: "Stored blocks not indexed, by reason (full, orphan, block_size, lora)."}, []string{"worker", "reason"}),
		gaps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_kv_events_gaps_total",
			Help: "Sequence gaps in a worker's KV event stream, repaired through the replay socket or not."}, []string{"worker", "repaired"}),
		clears: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_kv_index_clears_total",
			Help: "Times the gateway cleared a worker's block index, by reason (gap: unrepaired; restart: new engine process)."}, []string{"worker", "reason"}),
		malformed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_kv_events_malformed_total",
			Help: "KV event frames dropped as undecodable."}, []string{"worker"}),
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_kv_events_lag_seconds",
			Help: "Time from the engine's batch timestamp to the batch's application to the index (engine clock).", Buckets: kvLagBuckets}, []string{"worker"}),
	}
	reg.MustRegister(m.blocks, m.events, m.dropped, m.gaps, m.clears, m.malformed, m.lag)
	return m
}

// SetBlocks implements kvevents.Metrics.
func (m *KVEventsMetrics) SetBlocks(worker string, rank int, n int) {
	m.blocks.WithLabelValues(worker, strconv.Itoa(rank)).Set(float64(n))
}

// AddEvents implements kvevents.Metrics.
func (m *KVEventsMetrics) AddEvents(worker string, kind string, n int) {
	if n > 0 {
		m.events.WithLabelValues(worker, kind).Add(float64(n))
	}
}

// AddDropped implements kvevents.Metrics.
func (m *KVEventsMetrics) AddDropped(worker string, reason string, n int) {
	m.dropped.WithLabelValues(worker, reason).Add(float64(n))
}

// IncGap implements kvevents.Metrics.
func (m *KVEventsMetrics) IncGap(worker string, repaired bool) {
	m.gaps.WithLabelValues(worker, strconv.FormatBool(repaired)).Inc()
}

// IncCleared implements kvevents.Metrics.
func (m *KVEventsMetrics) IncCleared(worker string, reason string) {
	m.clears.WithLabelValues(worker, reason).Inc()
}

// IncMalformed implements kvevents.Metrics.
func (m *KVEventsMetrics) IncMalformed(worker string) { m.malformed.WithLabelValues(worker).Inc() }

// ObserveLag implements kvevents.Metrics.
func (m *KVEventsMetrics) ObserveLag(worker string, d time.Duration) {
	m.lag.WithLabelValues(worker).Observe(d.Seconds())
}

// DeleteWorker implements kvevents.Metrics.
func (m *KVEventsMetrics) DeleteWorker(worker string) {
	l := prometheus.Labels{"worker": worker}
	m.blocks.DeletePartialMatch(l)
	m.events.DeletePartialMatch(l)
	m.dropped.DeletePartialMatch(l)
	m.gaps.DeletePartialMatch(l)
	m.clears.DeletePartialMatch(l)
	m.malformed.DeletePartialMatch(l)
	m.lag.DeletePartialMatch(l)
}
