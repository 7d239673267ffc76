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
// short prompt costs less there than a prefill leg plus a KV transfer. The decode policy picks the
// decode worker as for any PD request; if that worker is kv_both and the request's estimated uncached
// prompt on it (admission's token estimate less cache_aware's expected prefix on that worker, when the
// policy is cache_aware) is below Config.LocalPrefillMaxTokens, the request goes there alone, takes no
// prefill slot, and is counted as IncPrefillSkipped(vllm_nixl, local_prefill) and on the span
// (sluice.prefill_skipped). Otherwise it runs PD as usual. Only NIXL: it is the connector whose
// kv_both behaviour is cited. Config refuses it together with decode seats (a local request would hold
// no seat), so admission is not involved.

// localPrefill returns the decode worker to send the request to alone, or nil for PD.
func (x *Dispatcher) localPrefill(ctx context.Context, preq *placement.Request, allowed worker.HandoffSet, ar admission.Request) *worker.Worker {
	limit := x.cfg.LocalPrefillMaxTokens
	if limit <= 0 || !allowed.Has(worker.HandoffNIXL) || (ar.Tokens >= limit && ar.CachedTokens == nil) {
		return nil
	}
	dw, err := x.selectDecode(preq, worker.HandoffNIXL)
	if err != nil || dw.Spec().KVRole != worker.KVRoleBoth {
		return nil // the PD path reports a missing decode worker
	}
	uncached := ar.Tokens
	if ar.CachedTokens != nil {
		uncached -= min(ar.CachedTokens(dw.URL()), uncached)
	}
	if uncached >= limit {
		return nil
	}
	x.d.Metrics.IncPrefillSkipped(worker.HandoffNIXL.String(), ReasonLocalPrefill)
	trace.SpanFromContext(ctx).SetAttributes(attribute.String("sluice.prefill_skipped", ReasonLocalPrefill),
		attribute.Int64("sluice.local_prefill.uncached_tokens", uncached))
	return dw
}
