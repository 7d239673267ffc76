package sim

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"
)

// phase is what a generation does with respect to disaggregation.
type phase int

const (
	phaseFull    phase = iota // prefill and decode here
	phasePrefill              // prefill here, produce KV for a remote decode (one output token)
	phaseDecode               // decode here from a remote prefill's KV (or recompute without a handshake)
)

// handshake is how the KV cache moves between the legs of one sample.
type handshake struct {
	bootstrap bool // SGLang style: host/port/room (port already resolved: null means the engine's own)
	host      string
	port      int
	room      uint64

	// prefillRank is SGLang's disagg_prefill_dp_rank: the prefill DP rank holding the KV (decode side).
	prefillRank *int

	kv *kvParams // vLLM style: produce (DoRemoteDecode) or consume (DoRemotePrefill)
}

// kvParams is vLLM's kv_transfer_params object.
type kvParams struct {
	DoRemoteDecode  bool     `json:"do_remote_decode"`
	DoRemotePrefill bool     `json:"do_remote_prefill"`
	RemoteEngineID  *string  `json:"remote_engine_id"`
	RemoteBlockIDs  []uint32 `json:"remote_block_ids"`
	RemoteHost      *string  `json:"remote_host"`
	RemotePort      *int     `json:"remote_port"`
	RemoteRequestID string   `json:"remote_request_id,omitempty"`
	TPSize          *int     `json:"tp_size,omitempty"`
	// Mooncake (examples/disaggregated/mooncake_connector/mooncake_connector_proxy.py): both legs carry
	// the same transfer_id; the decode also gets the prefill's bootstrap address.
	TransferID          string  `json:"transfer_id,omitempty"`
	RemoteBootstrapAddr *string `json:"remote_bootstrap_addr,omitempty"`
}

// prompt is a tokenized prompt.
type prompt struct {
	ids  []uint32
	hash uint64
}

func newPrompt(ids []uint32) *prompt { return &prompt{ids: ids, hash: hashTokens(ids)} }

// sampleSpec is one sample (one choice) of a generation.
type sampleSpec struct {
	prompt      *prompt
	maxTokens   int  // output tokens to generate at most
	naturalStop bool // max_tokens was absent: ending at maxTokens is an EOS ("stop")
	stop        []string
	stopIDs     []uint32 // stop_token_ids (the engines' gRPC protocols): the token ends the output and is part of it
	reqSeed     int64
	seeded      bool // the request gave a seed: equal seeds sample alike on any engine
	greedy      bool
	choice      int
	phase       phase
	hs          handshake
	rid         string // the engine's request id of this sample, for messages
	rank        int    // the DP rank the sample runs on
	// rankConflict: an SGLang prefill routed off its room's rank without disagg_prefill_dp_rank (assignRanks).
	rankConflict bool
	// collides: another sample on this rank holds the sample's bootstrap room, so its handshake
	// never completes (set by claimRooms).
	collides bool
	// preallocated is the KV an SGLang decode sample reserved in its pre-allocation (decode.go), given
	// back when the sample ends; 0 without one.
	preallocated int64
	// cached is the prompt's cached token count, set by runSample once the prompt is computed or its
	// KV received (the engines' gRPC chunks report it with every token).
	cached int
	// jsonObject: a JSON structured-output constraint makes the output one JSON object (grpc_structured.go).
	jsonObject bool
}

// nonce is what sets an unseeded sample's sampling apart from another's of the same prompt and choice
// index: its bootstrap room. SGLang PD serves n > 1 as n single-sample requests (each is choice 0 on
// the engine), and each engine request samples with its own random state, so their outputs differ; the
// room is unique per request and shared by its two legs, which must agree. 0 (nothing mixed in) for a
// seeded sample, whose seed fixes its output, and outside the bootstrap handoff.
func (sp *sampleSpec) nonce() uint64 {
	if sp.seeded || !sp.hs.bootstrap {
		return 0
	}
	return sp.hs.room
}

// sampleResult is what a finished sample reports.
type sampleResult struct {
	text             string
	completionTokens int
	promptTokens     int
	cachedTokens     int
	finish           string // "length" or "stop"
	matched          string // the stop string matched, if any
	matchedID        uint32 // the stop token id matched, if matchedToken
	matchedToken     bool
	kvOut            *kvParams
}

// emitFunc receives each output token's text (already cut at a stop string). It returning an error stops
// the sample with that error.
type emitFunc func(choice int, delta string) error

// runSample runs one sample through the model: handshake, admission, prefill, decode.
func (e *Engine) runSample(ctx context.Context, rf *requestFaults, sp *sampleSpec, emit emitFunc) (sampleResult, error) {
	res := sampleResult{promptTokens: len(sp.prompt.ids)}
	r := e.ranks[sp.rank]
	r.requests.Add(1)
	if sp.rankConflict {
		e.stats.rankConflicts.Add(1)
		return res, e.rankConflictError(sp)
	}
	if sp.hs.bootstrap {
		if sp.collides {
			return res, e.collide(ctx, sp)
		}
		if sp.phase == phasePrefill {
			// The prefill waits in its bootstrap queue until the decode has connected for the room.
			if err := e.awaitDecode(ctx, sp); err != nil {
				return res, err
			}
		}
	}
	transferred := false
	switch sp.phase {
	case phaseDecode:
		rec, ok, err := e.receiveKV(ctx, sp)
		if sp.preallocated > 0 {
			defer r.sched.releasePrealloc(sp.preallocated)
		}
		if err != nil {
			return res, err
		}
		if ok {
			transferred = true
			res.cachedTokens = rec.CachedTokens
		} else {
			e.stats.recomputed.Add(1)
			e.metrics.recomputed.Inc()
		}
	case phasePrefill:
		if sp.hs.bootstrap {
			// SGLang's prefill engine runs one output token whatever was asked
			// (disaggregation/prefill.py PrefillBootstrapQueue._process_req: max_new_tokens = 1). A vLLM
			// prefill runs as asked: the proxy sends max_tokens=1.
			sp.maxTokens = min(sp.maxTokens, 1)
		}
	}

	maxTokens := sp.maxTokens
	if e.cfg.Mode == ModeInstant {
		maxTokens = min(maxTokens, e.cfg.InstantOutputTokens)
	} else {
		need := int64(len(sp.prompt.ids) + maxTokens)
		if sp.preallocated > 0 {
			need = 0 // the pre-allocation holds the KV; the running batch bounds the requests
		}
		if err := r.sched.admit(ctx, need); err != nil {
			if errors.Is(err, errTooLong) {
				// SGLang: PrefillBootstrapQueue._check_if_req_exceed_kv_capacity (400), against the rank's
				// pool; vLLM would refuse at startup a context longer than its KV cache.
				return res, requestError("", "Request %s exceeds the maximum number of tokens: %d > %d",
					sp.rid, len(sp.prompt.ids)+maxTokens, r.sched.kvCap)
			}
			return res, err
		}
		defer r.sched.release(need)
		if !transferred {
			cached, err := e.prefill(ctx, rf, r, sp.prompt)
			if err != nil {
				return res, err
			}
			res.cachedTokens = cached
		}
	}
	e.stats.promptTokens.Add(int64(len(sp.prompt.ids)))
	e.stats.cachedTokens.Add(int64(res.cachedTokens))
	r.promptTokens.Add(int64(len(sp.prompt.ids)))
	r.cachedTokens.Add(int64(res.cachedTokens))
	e.metrics.cachedTokens.Add(float64(res.cachedTokens))
	e.metrics.promptTokens.Add(float64(len(sp.prompt.ids)))

	if sp.phase == phasePrefill && sp.hs.bootstrap {
		e.publishRoom(sp, res.cachedTokens)
	}
	sp.cached = res.cachedTokens

	if err := e.decode(ctx, rf, sp, maxTokens, emit, &res); err != nil {
		return res, err
	}
	if !(sp.phase == phasePrefill && sp.hs.bootstrap) && sp.naturalStop && res.finish == "length" {
		res.finish = "stop" // the EOS
	}
	if sp.phase == phasePrefill && sp.hs.kv != nil && sp.hs.kv.DoRemoteDecode {
		if e.cfg.mooncake() {
			e.keepMooncake(sp, &res, rf)
		} else {
			res.kvOut = e.offerKV(sp, &res, rf)
		}
	}
	return res, nil
}

// betweenTokens is what comes before output token i > 0: a stall (Faults.StallAfterTokens, counted
// in Stats.Stalled) until it is cleared, then, in realistic mode, the inter-token latency.
func (e *Engine) betweenTokens(ctx context.Context, rf *requestFaults, i int, realistic bool) error {
	if i == rf.stallAfter && rf.stalled != nil {
		e.stats.stalled.Add(1)
		select {
		case <-rf.stalled:
			e.stats.stalled.Add(-1)
		case <-ctx.Done():
			e.stats.stalled.Add(-1)
			return ctx.Err()
		}
	}
	if !realistic {
		return nil
	}
	// DP-attention ranks run each decode step together: the whole engine's batch sets the pace.
	itl := e.cfg.ITLBase + time.Duration(e.decoding.Load())*e.cfg.ITLPerSeq
	return sleepCtx(ctx, scale(itl, rf.slowness))
}

// decode runs a sample's output loop: up to maxTokens tokens, each emitted, cut at a stop string or
// stop token id, and a JSON-constrained sample ended by its EOS once its object is closed.
func (e *Engine) decode(ctx context.Context, rf *requestFaults, sp *sampleSpec, maxTokens int, emit emitFunc, res *sampleResult) error {
	next := e.picker(sp)
	var obj *jsonObject
	if sp.jsonObject {
		obj = &jsonObject{next: next}
		next = obj.pick
	}
	var text strings.Builder
	realistic := e.cfg.Mode == ModeRealistic
	if realistic && maxTokens > 1 {
		e.decoding.Add(1)
		defer e.decoding.Add(-1)
	}
	res.finish = "length"
	for i := 0; i < maxTokens; i++ {
		if i > 0 {
			if err := e.betweenTokens(ctx, rf, i, realistic); err != nil {
				return err
			}
		}
		w, id := next()
		prev := text.Len()
		text.WriteString(w)
		delta := w
		res.completionTokens++
		cut := false
		if len(sp.stop) > 0 {
			if idx, s := findStop(text.String(), prev, sp.stop); idx >= 0 {
				full := text.String()
				delta = ""
				if idx > prev {
					delta = full[prev:idx]
				}
				text.Reset()
				text.WriteString(full[:idx])
				res.finish, res.matched, cut = "stop", s, true
			}
		}
		if !cut && len(sp.stopIDs) > 0 && slices.Contains(sp.stopIDs, id) {
			res.finish, res.matchedID, res.matchedToken, cut = "stop", id, true, true
		}
		e.metrics.generatedTokens.Inc()
		if err := emit(sp.choice, delta); err != nil {
			return err
		}
		if cut {
			break
		}
		if obj != nil && obj.closed() {
			res.finish = "stop" // the grammar allows only the EOS after the object
			break
		}
	}
	res.text = text.String()
	return nil
}

// picker returns the sample's next-token function. Sampled: a PRNG seeded from the engine, the
// request's seed, the prompt and the choice. Greedy: each token is a function of the whole context,
// prompt and generated tokens alike, as a greedy model's argmax is, so a generation continued from
// its prompt plus the first k tokens it produced (a stream migrated to another engine) produces
// exactly the rest of the original output. The context is folded in the ids the client sees: the
// gRPC byte-token mode's output bytes, or the simulator's own word tokens (which its tokenizer
// gives back for the output text, so a prompt continued as text folds alike).
func (e *Engine) picker(sp *sampleSpec) func() (string, uint32) {
	if !sp.greedy {
		out := rng{s: outputSeed(e.cfg.Seed, sp.reqSeed, sp.prompt.hash, sp.choice, sp.nonce())}
		return out.word
	}
	h := mix64(greedySeed, uint64(e.cfg.Seed))
	for _, id := range sp.prompt.ids {
		h = mix64(h, uint64(id))
	}
	bytes := e.cfg.ByteTokenIDs
	return func() (string, uint32) {
		i := h % uint64(len(vocabText))
		w, id := vocabText[i], vocabIDs[i]
		if bytes {
			for j := range len(w) {
				h = mix64(h, uint64(w[j]))
			}
		} else {
			h = mix64(h, uint64(id))
		}
		return w, id
	}
}

// greedySeed starts the greedy context hash (apart from hashSeed, so that it is not a prompt hash).
const greedySeed uint64 = 0x2545f4914f6cdd1d

// findStop finds the earliest stop string that ends in the text added after prev.
func findStop(text string, prev int, stops []string) (int, string) {
	best, which := -1, ""
	for _, s := range stops {
		if s == "" {
			continue
		}
		from := max(0, prev-len(s)+1)
		if i := strings.Index(text[from:], s); i >= 0 && (best < 0 || from+i < best) {
			best, which = from+i, s
		}
	}
	return best, which
}

// prefill runs the prompt through its rank's single prefill executor and returns the cached token count.
func (e *Engine) prefill(ctx context.Context, rf *requestFaults, r *dpRank, p *prompt) (int, error) {
	keys := r.cache.blockKeys(make([]uint64, 0, len(p.ids)/e.cfg.BlockSize+1), p.ids)
	if err := r.sched.acquirePrefill(ctx); err != nil {
		return 0, err
	}
	defer r.sched.releasePrefill()
	cached := r.cache.match(keys)
	if cached >= len(p.ids) {
		cached = len(p.ids) - 1 // at least one token is always computed
	}
	cached = max(cached, 0)
	uncached := len(p.ids) - cached
	d := time.Duration(float64(uncached) / r.prefillRate * float64(time.Second))
	if err := sleepCtx(ctx, scale(d, rf.slowness)); err != nil {
		return 0, err
	}
	r.cache.insert(keys, p.ids)
	return cached, nil
}

func scale(d time.Duration, factor float64) time.Duration {
	if factor == 1 {
		return d
	}
	return time.Duration(float64(d) * factor)
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
