package dispatch

import (
	"context"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/backend"
	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/backend/workerrpc"
	"github.com/sluicegw/sluice/internal/worker"
)

// How a PD request runs on workers speaking sluice.worker.v1 (grpc:// URLs): like SGLang's handoff,
// both legs at once with bootstrap fields (exchange.go), but the protocol takes one room per
// sub-request (prompts x samples) and runs n > 1 itself, so nothing is split. workerrpc.GRPCTransport
// turns each leg into PrefillService.Prefill / DecodeService.Decode, taking the typed call built here
// once for both legs (workerrpc.GRPCTransport.Send) rather than a JSON body per leg.
type workerRPCPD struct{ x *Dispatcher }

func (p workerRPCPD) run(ctx context.Context, a *pdAttempt) (*Response, error) {
	x := p.x
	dw, err := x.decodeOf(a, worker.HandoffWorkerRPC)
	if err != nil {
		a.slot.Release(admission.ReleaseFailed)
		return nil, err
	}
	count, asList := body.WorkerRPCRooms(a.br)
	rooms := body.NewRooms(x.uint64, count)
	host, port := body.BootstrapHost(a.pw.URL()), a.pw.BootstrapPort()
	// The worker protocol answers a prefill with one JSON object (input logprobs included) even for
	// a streaming request, so only the unary merge applies.
	merge := logprobMode(a.br)
	if merge == mergeStream {
		merge = mergeNone
	}
	if typed := p.typed(a, dw, host, port, rooms, asList); typed != nil {
		return x.exchange(ctx, a.r, a.br, a.pw, dw, legBodies{typed: typed}, a.slot, merge)
	}
	br, err := a.r.withJSON(a.br)
	if err != nil {
		a.slot.Release(admission.ReleaseFailed)
		return nil, err
	}
	withRooms, err := br.InjectBootstrap(br.Body, host, port, rooms, asList)
	if err != nil {
		a.slot.Release(admission.ReleaseFailed)
		return nil, apierror.InvalidRequest("", "cannot add bootstrap fields to the request body: "+err.Error())
	}
	return x.exchange(ctx, a.r, a.br, a.pw, dw, sameBody(withRooms), a.slot, merge)
}

// typed builds the typed leg both workers are sent, with the handshake set on the messages: a typed
// client's call as its surface built it, else one converted once from the client's body. nil sends
// the JSON body instead: when the gateway's client has no worker-protocol transport of its own (an
// injected client), or when the conversion refuses the body, so that the transport answers it exactly
// as before (the same 400, the same metrics).
func (p workerRPCPD) typed(a *pdAttempt, dw *worker.Worker, host string, port int, rooms []uint64, asList bool) legSender {
	t := backend.WorkerRPC(p.x.d.HTTP)
	if t == nil || a.pw.Protocol() != worker.ProtocolGRPC || dw.Protocol() != worker.ProtocolGRPC {
		return nil
	}
	call := a.r.typedCall()
	if call == nil && a.br.Body != nil {
		c, err := workerrpc.BuildCall(a.br.Route, a.br.Body, a.r.RequestID)
		if err != nil {
			return nil
		}
		call = c
	}
	if call == nil {
		return nil
	}
	call, err := call.WithBootstrap(host, port, rooms, asList)
	if err != nil {
		return nil
	}
	return rpcLeg{t: t, call: call}
}
