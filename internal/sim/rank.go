package sim

import (
	"net/http"
	"strconv"
	"sync/atomic"
)

// Data-parallel ranks. An engine with Config.DPSize N runs N ranks, as SGLang's data-parallel
// controller runs one scheduler per DP rank (python/sglang/srt/managers/data_parallel_controller.py)
// and vLLM one engine core per DP rank (vllm/v1/engine/core_client.py DPLBAsyncMPClient). Each rank has
// its own scheduler (running batch, waiting queue), prefill executor, prefix cache and KV pool; the
// decode batch is engine-wide because DP-attention ranks step their forward passes together.

// dpRank is one data-parallel rank of an engine.
type dpRank struct {
	index int
	// engineID is the rank's KV connector engine id: vLLM suffixes the engine id with "_dp<rank>" when
	// dp_size > 1 (vllm/v1/engine/utils.py _apply_dp_identity_suffix). Set at Start.
	engineID    string
	sched       *scheduler
	cache       *prefixCache
	prefillRate float64        // uncached prompt tokens per second on this rank's prefill executor
	rooms       *rendezvous    // SGLang prefill: this rank's bootstrap rooms (its KV manager's)
	claims      roomClaims     // SGLang: rooms held by this rank's in-flight samples
	xfers       *transferStore // vLLM Mooncake prefill: KV kept for decodes, by transfer_id

	requests     atomic.Int64 // samples run on this rank
	promptTokens atomic.Int64
	cachedTokens atomic.Int64
	// transferring counts SGLang decode samples that hold their pre-allocation and wait for the KV:
	// SGLang's transfer queue (disaggregation/decode.py DecodeTransferQueue).
	transferring atomic.Int64
	// bootstrapping counts SGLang prefill samples waiting for their decode to connect: SGLang's
	// bootstrap queue (disaggregation/prefill.py PrefillBootstrapQueue).
	bootstrapping atomic.Int64
}

// newRanks splits the engine's capacities evenly over its DP ranks. SGLang divides
// --max-running-requests by dp_size (model_runner.py: max_running_requests // dp_size per DP worker);
// each rank's KV pool and prefix cache live on its own attention-TP group's GPUs, tp_size/dp_size of the
// engine's, and so hold 1/dp_size of the engine's KV memory; and each rank prefills on those GPUs, so
// at 1/dp_size of the engine's prefill rate. An engine's totals therefore do not change with --dp-size:
// only how they are partitioned does.
func newRanks(cfg *Config) []*dpRank {
	n := cfg.DPSize
	ranks := make([]*dpRank, n)
	maxRunning := max(1, cfg.MaxRunningRequests/n)
	kv := max(1, cfg.KVCapacityTokens/int64(n))
	cacheTokens := cfg.PrefixCacheTokens / int64(n)
	for i := range ranks {
		r := &dpRank{
			index:       i,
			sched:       newScheduler(maxRunning, kv),
			cache:       newPrefixCache(cfg.BlockSize, cacheTokens),
			prefillRate: cfg.PrefillTokensPerSec / float64(n),
		}
		if cfg.preallocates() {
			r.sched.preSlots = preAllocSlots(maxRunning)
		}
		switch {
		case cfg.Role == RolePrefill && cfg.Protocol == ProtocolSGLang:
			r.rooms = newRendezvous(cfg.RoomTTL, cfg.MaxRooms)
		case cfg.Role == RolePrefill && cfg.mooncake():
			r.xfers = newTransferStore(cfg.RoomTTL, cfg.MaxRooms)
		}
		ranks[i] = r
	}
	return ranks
}

// setRankEngineIDs names the ranks once the engine id is known.
func (e *Engine) setRankEngineIDs() {
	for _, r := range e.ranks {
		r.engineID = e.id
		if len(e.ranks) > 1 {
			r.engineID = e.id + "_dp" + strconv.Itoa(r.index)
		}
	}
}

// rankHint is how a request asks for a DP rank.
type rankHint struct {
	rank *int // the rank to run on; nil: the engine chooses
	// prefillRank is SGLang's disagg_prefill_dp_rank: on a decode, the prefill rank that holds the KV;
	// on a prefill, its presence waives the follow_bootstrap_room check.
	prefillRank *int
}

// The headers that carry a rank: vLLM reads X-data-parallel-rank (vllm/entrypoints/openai/engine/
// serving.py _get_data_parallel_rank); SGLang's OpenAI routes read X-Data-Parallel-Rank, overriding the
// body's routed_dp_rank (entrypoints/openai/serving_base.py extract_routed_dp_rank_from_header).
// HTTP header names are case-insensitive.
const dpRankHeader = "X-Data-Parallel-Rank"

// resolveRankHint reads a request's rank hint as its engine does and checks it against the DP size.
func (e *Engine) resolveRankHint(api apiKind, req *apiRequest, hdr http.Header) (rankHint, error) {
	n := e.cfg.DPSize
	if e.cfg.Protocol == ProtocolVLLM {
		// The header only; a value that is not an integer is ignored (_get_data_parallel_rank).
		v, err := strconv.Atoi(hdr.Get(dpRankHeader))
		if err != nil {
			return rankHint{}, nil
		}
		// vllm/v1/engine/input_processor.py process_inputs.
		if v < 0 || v >= n {
			return rankHint{}, requestError("", "data_parallel_rank %d is out of range [0, %d).", v, n)
		}
		return rankHint{rank: &v}, nil
	}
	// io_struct.py normalize_batch_and_arguments and protocol.py _migrate_deprecated_dp_rank: the
	// deprecated data_parallel_rank fills routed_dp_rank when that is absent.
	h := rankHint{rank: req.RoutedDPRank, prefillRank: req.DisaggPrefillDPRank}
	if h.rank == nil {
		h.rank = req.DataParallelRank
	}
	if raw, ok := hdr[http.CanonicalHeaderKey(dpRankHeader)]; ok && api != apiGenerate && len(raw) > 0 {
		v, err := strconv.Atoi(raw[0])
		if err != nil {
			return rankHint{}, &engineError{kind: errBadRequest, status: http.StatusBadRequest, httpException: true,
				msg: "Invalid X-Data-Parallel-Rank header: must be an integer, got '" + raw[0] + "'"}
		}
		h.rank = &v
	}
	// tokenizer_manager.py generate_request: rank 0 on an engine without DP is ignored.
	if r := h.rank; r != nil {
		switch {
		case n <= 1 && *r == 0:
			h.rank = nil
		case *r < 0 || *r >= n:
			return rankHint{}, requestError("", "routed_dp_rank=%d out of range [0, %d)", *r, n)
		}
	}
	return h, nil
}

// assignRanks gives each sample of a job its DP rank: the hint when there is one, else the engine's
// own choice (chooseRank). An SGLang prefill routed away from its room's rank without a
// disagg_prefill_dp_rank is marked to fail (see rankConflictError).
func (e *Engine) assignRanks(samples []sampleSpec, h rankHint) {
	vllmPick := -1
	for i := range samples {
		sp := &samples[i]
		sp.hs.prefillRank = h.prefillRank
		switch {
		case h.rank != nil:
			sp.rank = *h.rank
		case e.cfg.Protocol == ProtocolVLLM:
			// One request goes to one engine core, whatever n.
			if vllmPick < 0 {
				vllmPick = e.chooseRank(sp)
			}
			sp.rank = vllmPick
		default:
			sp.rank = e.chooseRank(sp)
		}
		sp.rankConflict = e.cfg.Protocol == ProtocolSGLang && e.cfg.Role == RolePrefill && sp.hs.bootstrap &&
			len(e.ranks) > 1 && h.prefillRank == nil && uint64(sp.rank) != sp.hs.room%uint64(len(e.ranks))
	}
}

// chooseRank is the engine's choice of rank for a request without a hint.
//
//   - SGLang: the controller's load_balance_method, whose default "auto" is follow_bootstrap_room on a
//     PD prefill (rank = bootstrap_room % dp_size) and round_robin otherwise (server_args.py
//     _handle_load_balance_method; data_parallel_controller.py).
//   - vLLM: the least loaded engine core by waiting*4 + running, the lowest index on ties
//     (core_client.py DPLBAsyncMPClient.get_core_engine_for_request).
func (e *Engine) chooseRank(sp *sampleSpec) int {
	n := len(e.ranks)
	if n == 1 {
		return 0
	}
	switch {
	case e.cfg.Protocol == ProtocolVLLM:
		best, bestScore := 0, -1
		for i, r := range e.ranks {
			s := r.sched.snapshot()
			if score := s.waiting*4 + s.running; bestScore < 0 || score < bestScore {
				best, bestScore = i, score
			}
		}
		return best
	case e.cfg.Role == RolePrefill && sp.hs.bootstrap:
		return int(sp.hs.room % uint64(n))
	default:
		return int((e.roundRobin.Add(1) - 1) % uint64(n))
	}
}

// rankConflictError is the abort of an SGLang prefill dispatched (by routed_dp_rank) to a rank other
// than bootstrap_room % dp_size while its request carries no disagg_prefill_dp_rank: under
// follow_bootstrap_room its decode would look for the KV on the room's rank
// (disaggregation/common/conn.py CommonKVSender.__init__, without
// SGLANG_DISAGGREGATION_FORCE_QUERY_PREFILL_DP_RANK).
func (e *Engine) rankConflictError(sp *sampleSpec) error {
	n := uint64(len(e.ranks))
	return e.prefillBootstrapFailed(sp, "follow_bootstrap_room conflict: dispatched to dp_rank "+strconv.Itoa(sp.rank)+
		" but bootstrap_room "+strconv.FormatUint(sp.hs.room, 10)+" implies dp_rank "+strconv.FormatUint(sp.hs.room%n, 10)+
		". Set SGLANG_DISAGGREGATION_FORCE_QUERY_PREFILL_DP_RANK=1 to allow mixed routing.")
}

// rankByEngineID finds the rank a KV connector engine id names.
func (e *Engine) rankByEngineID(id string) (*dpRank, bool) {
	for _, r := range e.ranks {
		if r.engineID == id {
			return r, true
		}
	}
	return nil, false
}
