package dispatch

import (
	"context"
	"io"
	"net/http"
	"strings"

	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/backend"
	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/backend/workerrpc"
	"github.com/sluicegw/sluice/internal/placement"
	"github.com/sluicegw/sluice/internal/worker"
)

// How a regular (not disaggregated) request runs: one worker picked by the regular policy, the
// client's body sent as is, the worker's answer relayed. Its load guard is held until the response
// body is closed.
func (x *Dispatcher) regular(ctx context.Context, r *Request, br *body.Request, preq *placement.Request) (*Response, error) {
	return x.regularOn(ctx, r, br, preq, nil)
}

// regularOn is regular on a worker that ok accepts (nil: any); a migration's continuation excludes
// the engines that failed it.
func (x *Dispatcher) regularOn(ctx context.Context, r *Request, br *body.Request, preq *placement.Request, ok func(*worker.Worker) bool) (*Response, error) {
	w, err := placement.SelectRegular(x.d.Registry.Snapshot(), preq, x.d.Policies.Regular, ok, x.now())
	if err != nil {
		return nil, err
	}
	if w.Rank() >= 0 && w.Protocol() == worker.ProtocolSGLang {
		// A data-parallel engine: placement chose the rank (io_struct.py routed_dp_rank).
		jbr, err := r.withJSON(br)
		if err != nil {
			return nil, err
		}
		body, err := body.RoutedRank(jbr.Body, w.Rank())
		if err != nil {
			return nil, apierror.InvalidRequest("", "cannot add the data-parallel rank hint: "+err.Error())
		}
		ranked := *jbr
		ranked.Body = body
		br = &ranked
	}
	return x.single(ctx, r, br, w, "regular")
}

// single sends the client's body to one worker and relays its answer (regular mode, and PD requests
// that need no prefill leg). A typed request goes to a worker-protocol worker as its call (a regular
// worker gets Decode without a handshake, as from a JSON body).
func (x *Dispatcher) single(ctx context.Context, r *Request, br *body.Request, w *worker.Worker, leg string) (*Response, error) {
	s, err := x.singleSender(r, br, w)
	if err != nil {
		return nil, err
	}
	load := w.AcquireLoad()
	resp, err := x.callWith(ctx, w, leg, br.Route.EnginePath(string(w.Protocol())), s, r, nil) //nolint:bodyclose // closed through Response.Close
	if err != nil {
		load.Release()
		return nil, err
	}
	out := x.response(resp, br, w, nil)
	// A migration gives the load back as the stream leaves this worker (migrate.go).
	out.Body = &onClose{ReadCloser: resp.Body, fn: holdDecode(ctx, out.Stream, load.Release)}
	return out, nil
}

// singleSender is what single sends: the typed call when the worker speaks the worker protocol over
// the gateway's own transport, else the JSON body.
func (x *Dispatcher) singleSender(r *Request, br *body.Request, w *worker.Worker) (legSender, error) {
	if c := r.typedCall(); c != nil && w.Protocol() == worker.ProtocolGRPC {
		if t := backend.WorkerRPC(x.d.HTTP); t != nil {
			return rpcLeg{t: t, call: c}, nil
		}
	}
	br, err := r.withJSON(br)
	if err != nil {
		return nil, err
	}
	return jsonLeg(br.Body), nil
}

// response builds the client response around a worker's answer head.
func (x *Dispatcher) response(resp *http.Response, br *body.Request, decode, prefill *worker.Worker) *Response {
	// Sized for what Do puts in (these, the request id, a budget's rate headers) so it never grows;
	// the keys are canonical constants, set without Header.Set's canonicalization.
	h := make(http.Header, 8)
	if ct := resp.Header["Content-Type"]; len(ct) > 0 && ct[0] != "" {
		h["Content-Type"] = ct[:1:1]
	}
	out := &Response{Status: resp.StatusCode, Header: h, Model: br.Model, Worker: decode.URL(), length: resp.ContentLength,
		answer: answerOf(resp), chunks: chunksOf(resp)}
	if prefill == nil {
		h[HeaderWorker] = []string{decode.URL()}
	} else {
		urls := []string{decode.URL(), prefill.URL()} // one allocation for both values
		h[HeaderWorker], h[HeaderPrefillWorker] = urls[:1:1], urls[1:2:2]
		out.PrefillWorker = prefill.URL()
	}
	out.Stream = br.Stream || isEventStream(h.Get("Content-Type"))
	return out
}

func isEventStream(ct string) bool {
	return strings.HasPrefix(ct, "text/event-stream")
}

// answerOf is the typed answer of a leg's response (callWith wraps its body to end the leg's span).
func answerOf(resp *http.Response) *workerrpc.Answer {
	var b io.Reader = resp.Body
	if oc, ok := b.(*onClose); ok {
		b = oc.ReadCloser
	}
	return workerrpc.AnswerOf(b)
}

// chunksOf is the typed stream of a leg's response, like answerOf.
func chunksOf(resp *http.Response) *workerrpc.Stream {
	var b io.Reader = resp.Body
	if oc, ok := b.(*onClose); ok {
		b = oc.ReadCloser
	}
	return workerrpc.StreamOf(b)
}
