package dispatch

import (
	"context"
	"errors"
	"net/http"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/worker"
)

// How a vLLM PD request runs with the NIXL connector (vLLM's
// tests/v1/kv_connector/nixl_integration/toy_proxy_server.py, and the Rust gateway's vLLM PD path):
//
//  1. The prefill leg: the client body rewritten by body.VLLMPrefillBody (one-token cap, no stream,
//     kv_transfer_params asking for a remote decode), read to the end. The admission slot is released
//     as soon as it is read, failed or cancelled.
//  2. The decode leg: the client body with the kv_transfer_params the prefill returned, on a decode
//     worker with the same handoff. When the prefill returned none (its one token was EOS or a stop
//     string, or the connector returns none) the decode goes without them and recomputes the prompt,
//     as the reference proxy does; it is counted in sluice_pd_kv_transfer_fallbacks_total.
//
// Both legs carry the request's one X-Request-Id (vLLM before 0.13 correlates the two legs by it).
// n > 1 never gets here: pd.go sends it to a decode worker alone.
type vllmNIXL struct{ x *Dispatcher }

func (v vllmNIXL) run(ctx context.Context, a *pdAttempt) (*Response, error) {
	x := v.x
	pbody, err := body.VLLMPrefillBody(a.br.Body)
	if err != nil {
		a.slot.Release(admission.ReleaseFailed)
		return nil, apierror.InvalidRequest("", "cannot build the prefill request: "+err.Error())
	}
	pload := a.pw.AcquireLoad()
	timing := &pdTiming{handoff: worker.HandoffNIXL.String(), start: x.now()}
	pout, err := x.readLeg(ctx, a.pw, "prefill", a.br.Route.Path(), pbody, a.r, nil)
	pload.Release()
	if err != nil {
		reason := admission.ReleaseFailed
		if ctx.Err() != nil {
			reason = admission.ReleaseCancelled
		}
		a.slot.Release(reason)
		return nil, err
	}
	a.slot.Release(admission.ReleaseCompleted)
	timing.prefill = x.now().Sub(timing.start)
	x.d.Metrics.ObservePrefill(timing.handoff, timing.prefill, trace.SpanContextFromContext(ctx))

	params, err := body.ExtractKVTransferParams(pout)
	switch {
	case errors.Is(err, body.ErrNoKVTransferParams):
		x.d.Metrics.IncKVTransferFallback(worker.HandoffNIXL.String())
		x.d.Logger.Debug("prefill returned no kv_transfer_params; decode recomputes the prompt",
			"request_id", a.r.RequestID, "prefill", a.pw.URL(), "reason", err)
	case err != nil:
		return nil, &UpstreamError{Worker: a.pw.URL(), Status: http.StatusBadGateway,
			Message: "the prefill worker's answer is not a JSON object"}
	}
	dbody, err := body.VLLMDecodeBody(a.br.Body, params)
	if err != nil {
		return nil, apierror.InvalidRequest("", "cannot build the decode request: "+err.Error())
	}
	dw, err := x.decodeOf(a, worker.HandoffNIXL)
	if err != nil {
		return nil, err
	}
	dload := dw.AcquireLoad()
	resp, err := x.call(ctx, dw, "decode", a.br.Route.Path(), dbody, a.r, nil) //nolint:bodyclose // closed through Response.Close
	if err != nil {
		dload.Release()
		return nil, err
	}
	out := x.response(resp, a.br, dw, a.pw)
	out.pd = timing
	out.Body = &onClose{ReadCloser: resp.Body, fn: holdDecode(ctx, out.Stream, dload.Release)}
	return out, nil
}
