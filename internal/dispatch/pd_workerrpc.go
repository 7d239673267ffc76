package dispatch

import (
	"context"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/worker"
)

// How a PD request runs on workers speaking sluice.worker.v1 (grpc:// URLs): like SGLang's handoff,
// both legs at once with bootstrap fields (exchange.go), but the protocol takes one room per
// sub-request (prompts x samples) and runs n > 1 itself, so nothing is split. workerrpc.GRPCTransport
// turns each leg into PrefillService.Prefill / DecodeService.Decode.
type workerRPCPD struct{ x *Dispatcher }

func (p workerRPCPD) run(ctx context.Context, a *pdAttempt) (*Response, error) {
	x := p.x
	dw, err := x.decodeOf(a, worker.HandoffWorkerRPC)
	if err != nil {
		a.slot.Release(admission.ReleaseFailed)
		return nil, err
	}
	count, asList := body.WorkerRPCRooms(a.br)
	withRooms, err := body.InjectBootstrap(a.br.Body, body.BootstrapHost(a.pw.URL()), a.pw.BootstrapPort(),
		body.NewRooms(x.uint64, count), asList)
	if err != nil {
		a.slot.Release(admission.ReleaseFailed)
		return nil, apierror.InvalidRequest("", "cannot add bootstrap fields to the request body: "+err.Error())
	}
	// The worker protocol answers a prefill with one JSON object (input logprobs included) even for
	// a streaming request, so only the unary merge applies.
	merge := logprobMode(a.br)
	if merge == mergeStream {
		merge = mergeNone
	}
	return x.exchange(ctx, a.r, a.br, a.pw, dw, sameBody(withRooms), a.slot, merge)
}
