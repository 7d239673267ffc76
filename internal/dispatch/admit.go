package dispatch

import (
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/placement"
	"github.com/sluicegw/sluice/internal/worker"
)

// What admission learns about a request beyond its model and placement: its estimated prompt
// tokens, its priority and its client's deadline.
//
// The token estimate is the token ids given as prompts (counted exactly) plus the prompt text's length
// divided by Config.CharsPerToken (4 by default, about right for BPE tokenizers on English), over every
// prompt of a batch; the chat template's few tokens are not counted, and n > 1 counts the prompt once
// (the engine's prefix cache serves the other samples). When the prefill policy is cache_aware, the
// charge on a worker is reduced by the prefix its radix tree expects that worker to hold
// (CacheAware.CachedPrefixLen, in characters, divided the same way): admission asks for it per worker
// while it checks capacity, under its lock, like the policy itself. Under kv_aware with the prompt's
// exact tokens (tokens.go), the estimate is their count and the reduction the prefix the worker's
// engine holds by its KV-cache events (KVAware.CachedTokens).
//
// The priority is the X-Sluice-Priority header, else the body's "priority" (SGLang's field, higher
// first; vLLM orders its own field the other way, so vLLM clients should use the header), else 0. The
// deadline is X-Sluice-Deadline-Ms: the milliseconds the client will wait for admission, which early
// rejection compares with the predicted wait (under predicted_latency, plus the predicted TTFT).
const (
	HeaderPriority   = "X-Sluice-Priority"
	HeaderDeadlineMS = "X-Sluice-Deadline-Ms"
	// DefaultCharsPerToken is the token estimate's default characters per token.
	DefaultCharsPerToken = 4.0
)

// admissionHeaders validates and reads the admission headers.
func admissionHeaders(h http.Header) (priority int, hasPriority bool, maxWait time.Duration, err error) {
	if v := h.Get(HeaderPriority); v != "" {
		p, perr := strconv.ParseInt(v, 10, 32)
		if perr != nil {
			return 0, false, 0, apierror.InvalidRequest(HeaderPriority, HeaderPriority+" must be an integer, got "+strconv.Quote(v))
		}
		priority, hasPriority = int(p), true
	}
	if v := h.Get(HeaderDeadlineMS); v != "" {
		ms, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil || ms <= 0 || ms > math.MaxInt64/int64(time.Millisecond) {
			return 0, false, 0, apierror.InvalidRequest(HeaderDeadlineMS, HeaderDeadlineMS+" must be a positive number of milliseconds, got "+strconv.Quote(v))
		}
		maxWait = time.Duration(ms) * time.Millisecond
	}
	return priority, hasPriority, maxWait, nil
}

// admissionRequest fills the admission inputs of a request (admitPrefill adds the queue and the
// selection). Its headers were validated by Do.
func (x *Dispatcher) admissionRequest(r *Request, br *body.Request, preq *placement.Request) admission.Request {
	prio, hasPrio, maxWait, _ := admissionHeaders(r.Header)
	if !hasPrio && br.HasPriority {
		prio = br.Priority
	}
	cpt := x.charsPerToken()
	ar := admission.Request{
		Tokens:   int64(br.PromptTokenIDs) + int64(math.Ceil(float64(br.PromptChars)/cpt)),
		Priority: prio,
		MaxWait:  maxWait,
		Tenant:   r.tenant,
	}
	ar.PredictedTTFT = x.predictedTTFT(preq, maxWait)
	if len(preq.TokenIDs) > 0 {
		ar.Tokens = int64(len(preq.TokenIDs)) // exact (tokens.go): the chat template's tokens included
	}
	if adm := x.d.Admission; adm != nil && adm.DecodeKVKnown() {
		ar.DecodeTokens = ar.Tokens*int64(max(br.N, 1)) + maxOutputTokens(br)*int64(max(br.N, 1)*br.Prompts())
	}
	if kv, ok := x.d.Policies.Prefill.(*placement.KVAware); ok && len(preq.TokenIDs) > 0 {
		// Exact tokens: the charge is the prompt's tokens minus the prefix the engine's own events say
		// it holds.
		snap, ids := x.d.Registry.Snapshot(), preq.TokenIDs
		ar.CachedTokens = func(url string) int64 {
			w, _ := snap.ByURL(url)
			return int64(kv.CachedTokens(w, ids))
		}
	} else if ca, ok := x.d.Policies.Prefill.(interface {
		CachedPrefixLen(model, text, workerURL string) int
	}); ok && preq.Text != "" {
		model, text := preq.Model, preq.Text
		ar.CachedTokens = func(url string) int64 { return int64(float64(ca.CachedPrefixLen(model, text, url)) / cpt) }
	}
	return ar
}

// predictedTTFT is the lowest TTFT the prefill policy predicts for preq among the model's prefill
// workers, when that policy is predicted_latency and early rejection has a client deadline to compare
// it with (admission adds it to the predicted wait); 0 otherwise, or while a model is cold.
func (x *Dispatcher) predictedTTFT(preq *placement.Request, maxWait time.Duration) time.Duration {
	pl, ok := x.d.Policies.Prefill.(*placement.PredictedLatency)
	if !ok || maxWait <= 0 || !x.d.Admission.Settings().EarlyRejection {
		return 0
	}
	snap := x.d.Registry.Snapshot()
	cands := snap.RankCandidates(worker.RolePrefill, preq.Model)
	if preq.IgnoreRanks {
		cands = snap.Candidates(worker.RolePrefill, preq.Model)
	}
	d, _ := pl.Lowest(cands, preq, x.now())
	return d
}

// maxOutputTokens is the request's output bound per sample, for the decode KV reservation
// (body.MaxOutputTokens: chat's max_completion_tokens, else max_tokens, or /generate's
// sampling_params.max_new_tokens; 0 when absent or unreadable, the reservation is then the prompt
// alone). It reads the body once more, so it runs only when some decode worker's KV capacity is known
// (Config.DecodeKVReservation).
func maxOutputTokens(br *body.Request) int64 { return body.MaxOutputTokens(br.Body) }

func (x *Dispatcher) charsPerToken() float64 {
	if x.cfg.CharsPerToken > 0 {
		return x.cfg.CharsPerToken
	}
	return DefaultCharsPerToken
}

// overloaded reports whether a prefill worker's engine reports more waiting requests than allowed.
func (x *Dispatcher) overloaded(w *worker.Worker) bool {
	return x.cfg.CheckOverload && w.Overloaded(x.cfg.OverloadWaitingRequests)
}
