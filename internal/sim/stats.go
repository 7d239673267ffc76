package sim

import (
	"maps"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// counters are the engine's live counters behind Stats.
type counters struct {
	seen                atomic.Int64
	inFlight            atomic.Int64
	completed           atomic.Int64
	failed              atomic.Int64
	grpcAborts          atomic.Int64
	grpcAbortable       atomic.Int64
	stalled             atomic.Int64
	bootstrapWaits      atomic.Int64
	bootstrapWaiting    atomic.Int64
	bootstrapTimeouts   atomic.Int64
	bootstrapMismatches atomic.Int64
	remoteTransfers     atomic.Int64
	promptTokens        atomic.Int64
	cachedTokens        atomic.Int64
	recomputed          atomic.Int64
	roomCollisions      atomic.Int64
	handshakeWaits      atomic.Int64
	handshakeWaiting    atomic.Int64
	handshakeTimeouts   atomic.Int64
	kvParamsOmitted     atomic.Int64
	prefillInFlight     atomic.Int64
	prefillPeak         atomic.Int64
	rankConflicts       atomic.Int64
	prefillRankMisses   atomic.Int64
	preallocWaits       atomic.Int64
	preallocTimeouts    atomic.Int64
	// vLLM Mooncake, decode side.
	mooncakePulls     atomic.Int64
	mooncakePulling   atomic.Int64
	mooncakeTransfers atomic.Int64
	mooncakeTimeouts  atomic.Int64
	mooncakeFailures  atomic.Int64
	// vLLM Mooncake, prefill side.
	mooncakeKept         atomic.Int64
	mooncakeNotKept      atomic.Int64
	mooncakeWaits        atomic.Int64
	mooncakeSent         atomic.Int64
	mooncakePullTimeouts atomic.Int64
	constrained          atomic.Int64

	mu              sync.Mutex
	perPath         map[string]int64
	lastTraceparent string
	lastConstraint  *Constraint
}

// Stats is a snapshot of what an engine has seen (GET /sim/stats).
type Stats struct {
	RequestsSeen         int64 `json:"requests_seen"`           // generation requests (HTTP and RPC)
	InFlight             int64 `json:"in_flight"`               // generation requests being served
	Running              int   `json:"running"`                 // admitted: holding a slot and KV (all ranks)
	Queued               int   `json:"queued"`                  // in the engine's waiting queues (all ranks)
	Decoding             int   `json:"decoding"`                // the decode batch size (engine-wide)
	PrefillQueue         int   `json:"prefill_queue"`           // prefilling or waiting for a prefill executor
	Completed            int64 `json:"completed"`               // generation requests answered successfully
	Failed               int64 `json:"failed"`                  // generation requests ended with an error or a fault
	GRPCAborts           int64 `json:"grpc_aborts"`             // engine gRPC: Generate calls ended by an Abort RPC
	GRPCAbortable        int64 `json:"grpc_abortable"`          // engine gRPC: Generate calls an Abort would find now (parsed, their id known)
	Stalled              int64 `json:"stalled"`                 // streams waiting for Faults.StallAfterTokens to be cleared
	BootstrapWaits       int64 `json:"bootstrap_waits"`         // decode: rendezvous started (connected to a bootstrap server)
	BootstrapWaiting     int64 `json:"bootstrap_waiting"`       // decode: rendezvous in progress
	BootstrapTimeouts    int64 `json:"bootstrap_timeouts"`      // decode: rooms whose KV never arrived
	BootstrapMismatches  int64 `json:"bootstrap_mismatches"`    // KV of a different prompt (both styles)
	RemoteTransfers      int64 `json:"remote_transfers"`        // decode: KV transfers from a prefill elsewhere that paid a transfer delay
	HandshakeWaits       int64 `json:"handshake_waits"`         // SGLang prefill: waits for the decode to connect
	HandshakeWaiting     int64 `json:"handshake_waiting"`       // SGLang prefill: waits in progress
	HandshakeTimeouts    int64 `json:"handshake_timeouts"`      // SGLang prefill: decodes that never connected
	RoomCollisions       int64 `json:"room_collisions"`         // SGLang: samples on a room already in use (n > 1 shares rooms)
	RankConflicts        int64 `json:"rank_conflicts"`          // SGLang prefill: routed off bootstrap_room % dp_size without disagg_prefill_dp_rank
	PrefillRankMisses    int64 `json:"prefill_rank_misses"`     // SGLang decode: prefill rank not on the prefill's bootstrap server
	PreallocWaits        int64 `json:"prealloc_waits"`          // SGLang decode: requests that went through pre-allocation
	PreallocTimeouts     int64 `json:"prealloc_timeouts"`       // SGLang decode: waiting timeouts while waiting for pre-allocation
	PreallocQueue        int   `json:"prealloc_queue"`          // SGLang decode: requests waiting for pre-allocation (all ranks)
	Preallocated         int   `json:"preallocated"`            // SGLang decode: requests holding a pre-allocation (all ranks)
	KVParamsOmitted      int64 `json:"kv_params_omitted"`       // vLLM NIXL prefill: responses without kv_transfer_params
	MooncakePulls        int64 `json:"mooncake_pulls"`          // vLLM Mooncake decode: KV loads started
	MooncakePulling      int64 `json:"mooncake_pulling"`        // vLLM Mooncake decode: KV loads in progress
	MooncakeTransfers    int64 `json:"mooncake_transfers"`      // vLLM Mooncake decode: KV received
	MooncakeTimeouts     int64 `json:"mooncake_timeouts"`       // vLLM Mooncake decode: the prefill's KV never became ready
	MooncakeFailures     int64 `json:"mooncake_failures"`       // vLLM Mooncake decode: unknown engine id, bootstrap server unreachable
	MooncakeKept         int64 `json:"mooncake_kept"`           // vLLM Mooncake prefill: KV kept for a decode
	MooncakeNotKept      int64 `json:"mooncake_not_kept"`       // vLLM Mooncake prefill: finished without the length cap (or no transfer_id)
	MooncakeWaits        int64 `json:"mooncake_waits"`          // vLLM Mooncake prefill: pulls that came before the KV was ready
	MooncakeSent         int64 `json:"mooncake_sent"`           // vLLM Mooncake prefill: KV handed to a decode
	MooncakePullTimeouts int64 `json:"mooncake_pull_timeouts"`  // vLLM Mooncake prefill: pulls answered "Timeout waiting for P side ready."
	PrefillInFlight      int64 `json:"prefill_in_flight"`       // requests before their first token (decode legs excluded)
	PrefillPeak          int64 `json:"prefill_peak_concurrent"` // largest PrefillInFlight since start/reset
	PrefixCacheHitTokens int64 `json:"prefix_cache_hit_tokens"` // prompt tokens served from the prefix cache (decode: as reported by the prefill)
	PromptTokens         int64 `json:"prompt_tokens"`           // prompt tokens seen
	RecomputedPrompts    int64 `json:"recomputed_prompts"`      // decodes without KV transfer
	MaxQueueDepth        int   `json:"max_queue_depth"`         // largest waiting queue of any rank since start/reset
	KVUsedTokens         int64 `json:"kv_used_tokens"`
	KVCapacityTokens     int64 `json:"kv_capacity_tokens"`
	PrefixCacheUsed      int64 `json:"prefix_cache_used_tokens"` // tokens held by the prefix caches
	PublishedRooms       int   `json:"published_rooms"`          // KV records published and not yet claimed
	// Ranks breaks the load and cache counters down by DP rank (one entry when dp_size is 1).
	Ranks           []RankStats      `json:"ranks"`
	LastTraceparent string           `json:"last_traceparent"` // of the last request that carried one
	PerPath         map[string]int64 `json:"per_path"`         // every request by route or RPC procedure
	// Constrained counts the engine-gRPC Generate calls with a structured-output constraint;
	// LastConstraint is the last one's, as the proto named it (grpc_structured.go).
	Constrained    int64       `json:"constrained"`
	LastConstraint *Constraint `json:"last_constraint"`
}

// RankStats is one DP rank's share of Stats. PrefixCacheHitTokens / PromptTokens is the rank's prefix
// cache hit rate since start/reset.
type RankStats struct {
	DPRank               int    `json:"dp_rank"`
	EngineID             string `json:"engine_id"` // the rank's KV connector engine id
	Requests             int64  `json:"requests"`  // samples run on this rank
	Running              int    `json:"running"`
	Queued               int    `json:"queued"`
	PrefillQueue         int    `json:"prefill_queue"`
	MaxQueueDepth        int    `json:"max_queue_depth"`
	PrefixCacheHitTokens int64  `json:"prefix_cache_hit_tokens"`
	PromptTokens         int64  `json:"prompt_tokens"`
	KVUsedTokens         int64  `json:"kv_used_tokens"`
	KVCapacityTokens     int64  `json:"kv_capacity_tokens"`
	PrefixCacheUsed      int64  `json:"prefix_cache_used_tokens"`
}

// totalSnapshot sums the ranks' scheduler state (maxWaiting is the largest rank's).
func (e *Engine) totalSnapshot() schedSnapshot {
	var t schedSnapshot
	for _, r := range e.ranks {
		s := r.sched.snapshot()
		t.running += s.running
		t.waiting += s.waiting
		t.prefillQueue += s.prefillQueue
		t.prefillWaiting += s.prefillWaiting
		t.preWaiting += s.preWaiting
		t.preHeld += s.preHeld
		t.kvUsed += s.kvUsed
		t.kvCap += s.kvCap
		t.maxWaiting = max(t.maxWaiting, s.maxWaiting)
	}
	return t
}

// Stats returns a snapshot of the engine's counters and model state.
func (e *Engine) Stats() Stats {
	st := Stats{
		RequestsSeen:         e.stats.seen.Load(),
		InFlight:             e.stats.inFlight.Load(),
		Decoding:             int(e.decoding.Load()),
		Completed:            e.stats.completed.Load(),
		Failed:               e.stats.failed.Load(),
		GRPCAborts:           e.stats.grpcAborts.Load(),
		GRPCAbortable:        e.stats.grpcAbortable.Load(),
		Stalled:              e.stats.stalled.Load(),
		BootstrapWaits:       e.stats.bootstrapWaits.Load(),
		BootstrapWaiting:     e.stats.bootstrapWaiting.Load(),
		BootstrapTimeouts:    e.stats.bootstrapTimeouts.Load(),
		BootstrapMismatches:  e.stats.bootstrapMismatches.Load(),
		RemoteTransfers:      e.stats.remoteTransfers.Load(),
		HandshakeWaits:       e.stats.handshakeWaits.Load(),
		HandshakeWaiting:     e.stats.handshakeWaiting.Load(),
		HandshakeTimeouts:    e.stats.handshakeTimeouts.Load(),
		RoomCollisions:       e.stats.roomCollisions.Load(),
		RankConflicts:        e.stats.rankConflicts.Load(),
		PrefillRankMisses:    e.stats.prefillRankMisses.Load(),
		PreallocWaits:        e.stats.preallocWaits.Load(),
		PreallocTimeouts:     e.stats.preallocTimeouts.Load(),
		KVParamsOmitted:      e.stats.kvParamsOmitted.Load(),
		MooncakePulls:        e.stats.mooncakePulls.Load(),
		MooncakePulling:      e.stats.mooncakePulling.Load(),
		MooncakeTransfers:    e.stats.mooncakeTransfers.Load(),
		MooncakeTimeouts:     e.stats.mooncakeTimeouts.Load(),
		MooncakeFailures:     e.stats.mooncakeFailures.Load(),
		MooncakeKept:         e.stats.mooncakeKept.Load(),
		MooncakeNotKept:      e.stats.mooncakeNotKept.Load(),
		MooncakeWaits:        e.stats.mooncakeWaits.Load(),
		MooncakeSent:         e.stats.mooncakeSent.Load(),
		MooncakePullTimeouts: e.stats.mooncakePullTimeouts.Load(),
		PrefillInFlight:      e.stats.prefillInFlight.Load(),
		PrefillPeak:          e.stats.prefillPeak.Load(),
		PrefixCacheHitTokens: e.stats.cachedTokens.Load(),
		PromptTokens:         e.stats.promptTokens.Load(),
		RecomputedPrompts:    e.stats.recomputed.Load(),
		PublishedRooms:       e.kvStore.size(),
		Constrained:          e.stats.constrained.Load(),
		Ranks:                make([]RankStats, len(e.ranks)),
	}
	for i, r := range e.ranks {
		s := r.sched.snapshot()
		used := r.cache.usedTokens()
		st.Ranks[i] = RankStats{
			DPRank: r.index, EngineID: r.engineID, Requests: r.requests.Load(),
			Running: s.running, Queued: s.waiting, PrefillQueue: s.prefillQueue, MaxQueueDepth: s.maxWaiting,
			PrefixCacheHitTokens: r.cachedTokens.Load(), PromptTokens: r.promptTokens.Load(),
			KVUsedTokens: s.kvUsed, KVCapacityTokens: s.kvCap, PrefixCacheUsed: used,
		}
		st.Running += s.running
		st.Queued += s.waiting
		st.PreallocQueue += s.preWaiting
		st.Preallocated += s.preHeld
		st.PrefillQueue += s.prefillQueue
		st.MaxQueueDepth = max(st.MaxQueueDepth, s.maxWaiting)
		st.KVUsedTokens += s.kvUsed
		st.KVCapacityTokens += s.kvCap
		st.PrefixCacheUsed += used
		if r.rooms != nil {
			st.PublishedRooms += r.rooms.size()
		}
		if r.xfers != nil {
			st.PublishedRooms += r.xfers.size()
		}
	}
	e.stats.mu.Lock()
	st.LastTraceparent = e.stats.lastTraceparent
	st.LastConstraint = e.stats.lastConstraint
	st.PerPath = maps.Clone(e.stats.perPath)
	e.stats.mu.Unlock()
	return st
}

// ResetStats zeroes the counters (not the model state: running and queued requests stay).
func (e *Engine) ResetStats() {
	for _, c := range []*atomic.Int64{&e.stats.seen, &e.stats.completed, &e.stats.failed, &e.stats.grpcAborts, &e.stats.bootstrapWaits,
		&e.stats.bootstrapTimeouts, &e.stats.bootstrapMismatches, &e.stats.remoteTransfers, &e.stats.promptTokens, &e.stats.cachedTokens,
		&e.stats.recomputed, &e.stats.roomCollisions, &e.stats.handshakeWaits, &e.stats.handshakeTimeouts,
		&e.stats.kvParamsOmitted, &e.stats.rankConflicts, &e.stats.prefillRankMisses,
		&e.stats.preallocWaits, &e.stats.preallocTimeouts,
		&e.stats.mooncakePulls, &e.stats.mooncakeTransfers, &e.stats.mooncakeTimeouts, &e.stats.mooncakeFailures,
		&e.stats.mooncakeKept, &e.stats.mooncakeNotKept, &e.stats.mooncakeWaits, &e.stats.mooncakeSent,
		&e.stats.mooncakePullTimeouts, &e.stats.constrained} {
		c.Store(0)
	}
	e.stats.prefillPeak.Store(e.stats.prefillInFlight.Load())
	for _, r := range e.ranks {
		r.sched.resetMaxWaiting()
		r.requests.Store(0)
		r.promptTokens.Store(0)
		r.cachedTokens.Store(0)
	}
	e.stats.mu.Lock()
	clear(e.stats.perPath)
	e.stats.lastTraceparent = ""
	e.stats.lastConstraint = nil
	e.stats.mu.Unlock()
}

// enterPrefill counts a request in its prefill stage and returns the function that ends it (at its
// first token or its end, whichever comes first; safe to call more than once).
func (c *counters) enterPrefill() (leave func()) {
	n := c.prefillInFlight.Add(1)
	for p := c.prefillPeak.Load(); n > p && !c.prefillPeak.CompareAndSwap(p, n); p = c.prefillPeak.Load() {
	}
	var once sync.Once
	return func() { once.Do(func() { c.prefillInFlight.Add(-1) }) }
}

// trackPrefill counts a job's prefill stage unless it is a decode leg (a decode given KV computes no
// prompt). It returns emit wrapped to end the stage at the first token, and the stage's end.
func (e *Engine) trackPrefill(samples []sampleSpec, emit emitFunc) (emitFunc, func()) {
	if len(samples) > 0 && samples[0].phase == phaseDecode && (samples[0].hs.bootstrap || samples[0].hs.kv != nil) {
		return emit, func() {}
	}
	leave := e.stats.enterPrefill()
	return func(i int, d string) error {
		leave()
		return emit(i, d)
	}, leave
}

// engineMetrics is the engine's Prometheus registry (its own, never the global one).
type engineMetrics struct {
	reg               *prometheus.Registry
	requests          *prometheus.CounterVec
	failed            prometheus.Counter
	promptTokens      prometheus.Counter
	cachedTokens      prometheus.Counter
	generatedTokens   prometheus.Counter
	bootstrapTimeouts prometheus.Counter
	recomputed        prometheus.Counter
}

func newEngineMetrics(e *Engine) *engineMetrics {
	reg := prometheus.NewRegistry()
	model := prometheus.Labels{"model_name": e.cfg.Models[0]}
	m := &engineMetrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_sim_requests_total", Help: "Requests received, by route.", ConstLabels: model,
		}, []string{"path"}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_sim_requests_failed_total", Help: "Generation requests that ended in an error.", ConstLabels: model,
		}),
		promptTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_sim_prompt_tokens_total", Help: "Prompt tokens processed.", ConstLabels: model,
		}),
		cachedTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_sim_cache_hit_tokens_total", Help: "Prompt tokens served from the prefix cache (or received from a prefill).", ConstLabels: model,
		}),
		generatedTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_sim_generation_tokens_total", Help: "Output tokens generated.", ConstLabels: model,
		}),
		bootstrapTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_sim_bootstrap_timeouts_total", Help: "Decode requests whose KV never arrived.", ConstLabels: model,
		}),
		recomputed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_sim_recomputed_prompts_total", Help: "Decode requests without KV transfer that recomputed their prompt.", ConstLabels: model,
		}),
	}
	reg.MustRegister(m.requests, m.failed, m.promptTokens, m.cachedTokens, m.generatedTokens, m.bootstrapTimeouts, m.recomputed)

	gaugeWith := func(labels prometheus.Labels, name, help string, snap func() schedSnapshot, f func(s schedSnapshot) float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return f(snap()) }))
	}
	gauge := func(name, help string, f func(s schedSnapshot) float64) {
		gaugeWith(model, name, help, e.totalSnapshot, f)
	}
	running := func(s schedSnapshot) float64 { return float64(s.reportedRunning()) }
	waiting := func(s schedSnapshot) float64 { return float64(s.reportedWaiting()) }
	usage := func(s schedSnapshot) float64 { return float64(s.kvUsed) / float64(max(s.kvCap, 1)) }
	// Engine-native names, so a gateway scraping /metrics sees what it would see on the real engine: one
	// series per DP rank.
	for _, r := range e.ranks {
		snap := r.sched.snapshot
		if e.cfg.Protocol == ProtocolVLLM {
			// vllm/v1/metrics/loggers.py PrometheusStatLogger: labelnames model_name and engine (the engine
			// core index: the DP rank).
			vl := prometheus.Labels{"model_name": e.cfg.Models[0], "engine": strconv.Itoa(r.index)}
			gaugeWith(vl, "vllm:num_requests_running", "Number of requests in model execution batches.", snap, running)
			gaugeWith(vl, "vllm:num_requests_waiting", "Number of requests waiting to be processed.", snap, waiting)
			gaugeWith(vl, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", snap, usage)
			continue
		}
		// SGLang's scheduler metrics carry a dp_rank label when the engine runs DP ranks
		// (scheduler_metrics_mixin.py init_metrics: labels["dp_rank"] = dp_rank).
		sl := model
		if len(e.ranks) > 1 {
			sl = prometheus.Labels{"model_name": e.cfg.Models[0], "dp_rank": strconv.Itoa(r.index)}
		}
		gaugeWith(sl, "sglang:num_running_reqs", "The number of running requests.", snap, running)
		gaugeWith(sl, "sglang:num_queue_reqs", "The number of requests in the waiting queue.", snap, waiting)
		gaugeWith(sl, "sglang:token_usage", "The token usage.", snap, usage)
		gaugeWith(sl, "sglang:num_used_tokens", "The number of used tokens.", snap, func(s schedSnapshot) float64 { return float64(s.kvUsed) })
	}
	gauge("sluice_sim_running_requests", "Requests admitted (holding KV).", func(s schedSnapshot) float64 { return float64(s.running) })
	gauge("sluice_sim_waiting_requests", "Requests in the engine's waiting queue.", func(s schedSnapshot) float64 { return float64(s.waiting) })
	gauge("sluice_sim_kv_usage", "Fraction of the KV budget reserved by running requests.", usage)
	return m
}
