package dispatch

import (
	"context"
	"time"

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
// IncPrefillSkipped(vllm_nixl, local_prefill) and on the request span (sluice.prefill_skipped). Only
// NIXL: it is the connector whose kv_both behaviour is cited. Config refuses it together with decode
// seats (a local request would hold no seat), so admission is not involved.

// localPrefill returns the decode worker to send the request to alone, or nil for PD.
func (x *Dispatcher) localPrefill(ctx context.Context, preq *placement.Request, allowed worker.HandoffSet, ar admission.Request) *worker.Worker {
	limit := x.cfg.LocalPrefillMaxTokens
	if limit <= 0 || !allowed.Has(worker.HandoffNIXL) || (ar.Tokens >= limit && ar.CachedTokens == nil) {
		return nil
	}
	var best *worker.Worker
	var bestCached int64
	now := time.Now()
	for _, w := range x.d.Registry.Snapshot().Candidates(worker.RoleDecode, preq.Model) {
		if w.Handoff() != worker.HandoffNIXL || w.KVRole() != worker.KVRoleBoth || !w.Routable(now) {
			continue
		}
		var cached int64
		if ar.CachedTokens != nil {
			cached = min(ar.CachedTokens(w.URL()), ar.Tokens)
		}
		if best == nil || cached > bestCached || (cached == bestCached && w.Load() < best.Load()) {
			best, bestCached = w, cached
		}
	}
	if best == nil || ar.Tokens-bestCached >= limit {
		return nil
	}
	x.d.Metrics.IncPrefillSkipped(worker.HandoffNIXL.String(), ReasonLocalPrefill)
	trace.SpanFromContext(ctx).SetAttributes(attribute.String("sluice.prefill_skipped", ReasonLocalPrefill),
		attribute.Int64("sluice.local_prefill.uncached_tokens", ar.Tokens-bestCached))
	return best
}
