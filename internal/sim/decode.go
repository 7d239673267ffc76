package sim

import (
	"context"
	"errors"
	"time"
)

// SGLang decode's pre-allocation queue. An SGLang decode server takes a PD request through four
// queues (python/sglang/srt/disaggregation/decode.py, module doc): the pre-allocation queue
// (DecodePreallocQueue: handshake with the prefill's bootstrap server, then reserve a request slot and
// the prompt's KV), the transfer queue (the KV arrives), the waiting queue and the running batch. Only
// once it has pre-allocated does the decode send the prefill its destination (send_metadata), and only
// then does the prefill's sender leave KVPoll.Bootstrapping for KVPoll.WaitingForInput (the bootstrap
// threads of mooncake/conn.py and nixl/conn.py: update_status(room, WaitingForInput) once every
// required_dst_info_num TransferInfo has come). So a prefill whose decode cannot pre-allocate waits in
// its bootstrap queue, and fails after its bootstrap timeout ("... in KVPoll.Bootstrapping"); the
// decode's own waiting timeout (common/conn.py _check_waiting_timeout: "... in KVPoll.WaitingForInput")
// runs from the receiver's init_time, which as we read it is set at the handshake, so here it covers the
// pre-allocation wait and the KV's arrival together.
//
// Request slots: DecodeReqToTokenPool holds max_running_requests + pre_alloc_size rows, pre_alloc_size
// being 2 x max_running_requests when that is at most 32, else 0 (model_executor/model_runner.py
// init_memory_pool); a request keeps its row from pre-allocation until it finishes, so
// #pre-allocated + #transferring + #waiting + #running <= that sum, and the running batch alone is
// bounded by max_running_requests (get_new_prebuilt_batch: min(req_to_token_pool.size,
// max_running_requests)). KV: pop_preallocated pre-allocates only while the request's tokens fit the
// allocatable KV; here the request reserves prompt + max_tokens, as every request in the simulator does.
// Pre-allocation is FIFO: pop_preallocated stops at the first request that does not fit. The engine
// reports the requests waiting for pre-allocation as waiting (scheduler.py get_load adds
// len(disagg_decode_prealloc_queue.queue) on a decode server), as it does its waiting queue.
//
// Simplified: the handshake itself (KVPoll.Bootstrapping on the decode) is instant once the prefill's
// server info is known; SGLang's num_reserved_decode_tokens, retraction and the decode radix cache are
// not modelled.

// preAllocSlots is the rows of an SGLang decode rank's DecodeReqToTokenPool for a running window of
// maxRunning requests.
func preAllocSlots(maxRunning int) int {
	if maxRunning <= 32 {
		return 3 * maxRunning // size + pre_alloc_size (2 x size)
	}
	return maxRunning
}

// preallocates reports whether the engine's decode legs go through SGLang's pre-allocation queue.
func (c *Config) preallocates() bool {
	return c.Role == RoleDecode && c.Protocol == ProtocolSGLang && c.Mode == ModeRealistic
}

// preallocate blocks until the request holds a request slot and need tokens of KV, FIFO behind earlier
// requests. On success the caller must call releasePrealloc(need) exactly once.
func (s *scheduler) preallocate(ctx context.Context, need int64) error {
	s.mu.Lock()
	if need > s.kvCap {
		s.mu.Unlock()
		return errTooLong
	}
	if s.preWaiting.Len() == 0 && s.preFits(need) {
		s.preHeld++
		s.kvUsed += need
		s.mu.Unlock()
		return nil
	}
	w := s.preWaiting.Push(need)
	s.maxWaiting = max(s.maxWaiting, s.waiting.Len()+s.preWaiting.Len())
	s.mu.Unlock()
	return s.wait(ctx, &s.preWaiting, w, func() {
		s.preHeld--
		s.kvUsed -= need
	})
}

// releasePrealloc gives back a pre-allocated request's slot and KV.
func (s *scheduler) releasePrealloc(need int64) {
	s.mu.Lock()
	s.preHeld--
	s.kvUsed -= need
	s.grantPreLocked()
	s.grantLocked()
	s.mu.Unlock()
}

func (s *scheduler) preFits(need int64) bool {
	return s.preHeld < s.preSlots && s.kvUsed+need <= s.kvCap
}

// grantPreLocked pre-allocates waiters from the front while they fit (pop_preallocated breaks at the
// first that does not).
func (s *scheduler) grantPreLocked() {
	s.preWaiting.GrantWhile(func(need int64) bool {
		if !s.preFits(need) {
			return false
		}
		s.preHeld++
		s.kvUsed += need
		return true
	})
}

// preallocateDecode is an SGLang decode sample's pre-allocation, bounded by what is left of its
// waiting timeout (deadline). On success sp.preallocated holds the reserved tokens, which runSample
// gives back when the sample ends.
func (e *Engine) preallocateDecode(ctx context.Context, sp *sampleSpec, deadline time.Time, timedOut func() error) error {
	r := e.ranks[sp.rank]
	need := int64(len(sp.prompt.ids) + sp.maxTokens)
	e.stats.preallocWaits.Add(1)
	pctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	err := r.sched.preallocate(pctx, need)
	switch {
	case err == nil:
		sp.preallocated = need
		return nil
	case errors.Is(err, errTooLong):
		// decode.py DecodePreallocQueue._check_if_req_exceed_kv_capacity (400).
		return requestError("", "Request %s exceeds the maximum number of tokens: %d > %d", sp.rid, need, r.sched.kvCap)
	case ctx.Err() != nil:
		return ctx.Err()
	default:
		e.stats.preallocTimeouts.Add(1)
		return timedOut()
	}
}
