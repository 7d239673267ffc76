package dispatch

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/placement"
	"github.com/sluicegw/sluice/internal/worker"
)

// Local prefill (conditional disaggregation): a vLLM decode engine whose NIXL connector role is
// kv_both computes a request without kv_transfer_params itself (worker.KVRoleBoth cites vLLM), so a
// short prompt costs less there than a prefill leg plus a KV transfer. A request whose estimated
// uncached prompt on a routable kv_both NIXL decode worker (admission's token estimate less, when the
// prefill policy is cache_aware, the prefix its tree expects that worker to hold) is below
// Config.LocalPrefillMaxTokens goes to such a worker alone: the one with the most cached prefix, then
// the least load. The decode policy is not consulted for that choice, so a request that then runs PD
// consults it once, as without local prefill. The request takes no prefill slot, and is counted as
// IncPrefillSkipped(vllm_nixl, reason) and on the request span (sluice.prefill_skipped). Only NIXL: it
// is the connector whose kv_both behaviour is cited.
//
// With decode seats on, the choice is made inside admission's pair selection, under its lock: the
// local request takes a seat on its decode worker and no prefill slot (admission's seat-only grant),
// waits in the one FIFO queue like any PD request, and its seat is released when the decode leg ends
// (holdSeat). Only workers with a seat that their engine's load does not veto are candidates. Seats
// add the second trigger: a request that would wait for a prefill slot (none is free) while a kv_both
// decode worker has a seat goes to that worker alone, whatever its length (ReasonLocalPrefillWait):
// the decode engine then prefills it instead of the request queueing for prefill.

// localPrefill returns the decode worker to send the request to alone (seats off), or nil for PD.
func (x *Dispatcher) localPrefill(ctx context.Context, preq *placement.Request, allowed worker.HandoffSet, ar admission.Request) *worker.Worker {
	limit := x.cfg.LocalPrefillMaxTokens
	if limit <= 0 || !allowed.Has(worker.HandoffNIXL) || (ar.Tokens >= limit && ar.CachedTokens == nil) {
		return nil
	}
	best, uncached := x.localCandidate(preq, ar, false, func(*worker.Worker) bool { return true })
	if best == nil || uncached >= limit {
		return nil
	}
	x.noteLocal(ctx, ReasonLocalPrefill, uncached)
	return best
}

// localChoice is what a pair selection chose for local prefill (seats on): the decode worker and why.
type localChoice struct {
	dw       *worker.Worker
	reason   string
	uncached int64
}

// localSeated picks, under admission's lock, a kv_both decode worker with a seat for the request
// alone: for a short uncached prompt (ReasonLocalPrefill), or, when prefillFull, for any prompt
// (ReasonLocalPrefillWait). ok is false when local prefill does not apply.
func (x *Dispatcher) localSeated(preq *placement.Request, allowed worker.HandoffSet, ar admission.Request, prefillFull bool, hasSeat func(string) bool) (localChoice, bool) {
	limit := x.cfg.LocalPrefillMaxTokens
	if limit <= 0 || !allowed.Has(worker.HandoffNIXL) || (!prefillFull && ar.Tokens >= limit && ar.CachedTokens == nil) {
		return localChoice{}, false
	}
	seatOK := func(w *worker.Worker) bool { return hasSeat(w.Key()) && !x.decodeVetoed(w) }
	best, uncached := x.localCandidate(preq, ar, true, seatOK)
	switch {
	case best == nil:
		return localChoice{}, false
	case uncached < limit:
		return localChoice{dw: best, reason: ReasonLocalPrefill, uncached: uncached}, true
	case prefillFull:
		return localChoice{dw: best, reason: ReasonLocalPrefillWait, uncached: uncached}, true
	}
	return localChoice{}, false
}

// localCandidate is the routable kv_both NIXL decode worker among those ok accepts with the most
// cached prefix, then the least load, and the request's uncached prompt there. With ranks, each rank
// view of an engine is a candidate of its own (a seat is per rank), unless the request ignores ranks.
func (x *Dispatcher) localCandidate(preq *placement.Request, ar admission.Request, ranks bool, ok func(*worker.Worker) bool) (*worker.Worker, int64) {
	var best *worker.Worker
	var bestCached int64
	now := x.now()
	for _, e := range x.d.Registry.Snapshot().Candidates(worker.RoleDecode, preq.Model) {
		if e.Handoff() != worker.HandoffNIXL || e.KVRole() != worker.KVRoleBoth || !e.Routable(now) {
			continue
		}
		var cached int64
		if ar.CachedTokens != nil {
			cached = min(ar.CachedTokens(e.URL()), ar.Tokens)
		}
		views := []*worker.Worker{e}
		if r := e.Ranks(); ranks && len(r) > 0 && !preq.IgnoreRanks {
			views = r
		}
		for _, w := range views {
			if !ok(w) {
				continue
			}
			if best == nil || cached > bestCached || (cached == bestCached && w.Load() < best.Load()) {
				best, bestCached = w, cached
			}
		}
	}
	return best, ar.Tokens - bestCached
}

// noteLocal counts a request sent to its decode worker alone and marks its span.
func (x *Dispatcher) noteLocal(ctx context.Context, reason string, uncached int64) {
	x.d.Metrics.IncPrefillSkipped(worker.HandoffNIXL.String(), reason)
	trace.SpanFromContext(ctx).SetAttributes(attribute.String("sluice.prefill_skipped", reason),
		attribute.Int64("sluice.local_prefill.uncached_tokens", uncached))
}
