package dispatch

import (
	"context"
	"io"
	"net/http"
	"time"

	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/placement"
	"github.com/sluicegw/sluice/internal/worker"
)

// How the routes engines serve besides generation run (body.AuxRoutes: embeddings, rerank, score,
// classify, tokenize, detokenize, responses, messages): one worker, picked by the policy among the
// HTTP engines serving the model, gets the client's body as is on its engine's path for the route;
// its answer is relayed. Retries, metrics and tracing are the ones of every attempt (Do).
//
// Regular mode: a regular worker. PD mode, decided per route:
//
//   - tokenize, detokenize: a decode worker. Both engines tokenize in their API server without the
//     scheduler (SGLang serving_tokenize.py, vLLM serve/tokenize/serving.py), so a PD engine answers
//     like any other.
//   - responses, messages: a decode worker alone, when every decode worker of the fleet is vLLM: a
//     vLLM decode engine given no kv_transfer_params computes the prompt itself, as for the requests
//     vLLM's connectors cannot split (pd.go). An SGLang decode engine only runs requests whose prefill
//     comes through the bootstrap handshake, and SGLang's Responses and Messages requests carry no
//     bootstrap fields: 501.
//   - embeddings, rerank, score, classify: 501. Engines serve these pooling APIs from models run
//     without disaggregation (SGLang's and SMG's PD routers answer embeddings and classify with 501
//     too); serve such a model from a regular-mode sluice.
//
// grpc:// workers (sluice.worker.v1) carry generation only: a route that only such workers could
// serve gets 501.
func (x *Dispatcher) aux(ctx context.Context, r *Request, br *body.Request, preq *placement.Request) (*Response, error) {
	p := *preq
	p.IgnoreRanks = true // the engine places the request on a rank itself; no hint is sent
	snap := x.d.Registry.Snapshot()
	if !x.cfg.PD {
		w, err := selectHTTP(snap, worker.RoleRegular, br, &p, x.d.Policies.Regular, x.now())
		if err != nil {
			return nil, err
		}
		return x.single(ctx, r, br, w, "regular")
	}
	switch br.Route {
	case body.RouteTokenize, body.RouteDetokenize:
	case body.RouteResponses, body.RouteMessages:
		if dh := snap.Handoffs(worker.RoleDecode); dh != 0 && dh&^vllmHandoffs != 0 {
			return nil, notInPD(br.Route, "SGLang decode engines serve only requests whose prefill arrives through the bootstrap handshake, "+
				"and "+br.Route.Path()+" carries no bootstrap fields; use /v1/chat/completions, or serve this route from a regular-mode sluice")
		}
	default:
		return nil, notInPD(br.Route, "engines serve pooling models without prefill/decode disaggregation; "+
			"serve the model from a regular-mode sluice (--worker-urls)")
	}
	w, err := selectHTTP(snap, worker.RoleDecode, br, &p, x.d.Policies.Decode, x.now())
	if err != nil {
		return nil, err
	}
	return x.single(ctx, r, br, w, "decode")
}

func notInPD(route body.Route, why string) error {
	return apierror.New(http.StatusNotImplemented, apierror.CodeUnimplemented, route.Path()+" is not served in PD mode: "+why, nil)
}

// selectHTTP picks a worker of role for an aux route among the engines speaking HTTP.
func selectHTTP(snap *worker.Snapshot, role worker.Role, br *body.Request, p *placement.Request, pol placement.Policy, now time.Time) (*worker.Worker, error) {
	cands := snap.Candidates(role, p.Model)
	onlyGRPC := len(cands) > 0
	for _, w := range cands {
		if w.Protocol() != worker.ProtocolGRPC {
			onlyGRPC = false
			break
		}
	}
	if onlyGRPC {
		return nil, apierror.New(http.StatusNotImplemented, apierror.CodeUnimplemented,
			br.Route.Path()+" is not served by worker-protocol (grpc://) workers, which carry chat, completions and generate only", nil)
	}
	return placement.Select(snap, role, p, pol, func(w *worker.Worker) bool { return w.Protocol() != worker.ProtocolGRPC }, now)
}

// Raw returns the body of a streamed answer to relay byte for byte (the named events of Responses
// and Messages streams, which Frames does not parse): the request's metrics see its first byte as
// the time to first token, and its end.
func (r *Response) Raw() io.Reader {
	if r.meter == nil || !r.Stream {
		return r.Body
	}
	return &rawBody{rd: r.Body, m: r.meter}
}

type rawBody struct {
	rd io.Reader
	m  *meter
}

func (b *rawBody) Read(p []byte) (int, error) {
	n, err := b.rd.Read(p)
	if n > 0 && b.m.first.IsZero() {
		b.m.first = b.m.now()
	}
	if err != nil {
		b.m.streamEnded(err)
	}
	return n, err
}
