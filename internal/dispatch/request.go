package dispatch

import (
	"context"
	"io"
	"net/http"
	"sync"

	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/backend/workerrpc"
)

// Route is an inference endpoint.
type Route = body.Route

// The inference routes.
const (
	RouteChat        = body.RouteChat
	RouteCompletions = body.RouteCompletions
	RouteGenerate    = body.RouteGenerate
)

// Request is one client request as the surfaces hand it to dispatch.
type Request struct {
	Route Route
	// Body is the client's JSON, unknown fields preserved; dispatch rewrites copies of it per leg.
	Body []byte
	// Header carries the client's headers, keys canonical as net/http builds them; only an
	// allow-list goes upstream.
	Header http.Header
	// RequestID names the request in logs, spans and upstream (X-Request-Id); when empty, the client's
	// X-Request-Id header, else a generated UUID.
	RequestID string
	// Typed, when set, is the request as a typed surface holds it; Body is then ignored.
	Typed *Typed

	tenant string      // set by Do from Config.Tenants
	typed  *typedState // set by Do for a typed request
	shared *legShared  // set by prepare: what its legs share (call.go)
}

// requestIDHeader is the X-Request-Id value of r's legs and answer. They share one slice, as header
// values are shared read-only (Header.Add appends to a copy: the capacity is one); a copy of r
// renamed for a sample (pd_sglang.go) gets its own.
func (r *Request) requestIDHeader() []string {
	if s := r.shared; s != nil && len(s.idHeader) == 1 && s.idHeader[0] == r.RequestID {
		return s.idHeader
	}
	return []string{r.RequestID}
}

// Typed is a request that a typed surface (services/openai) holds as messages: it reaches a worker
// speaking sluice's worker protocol as Call, with no JSON in between, and is rendered as JSON only for
// a leg that needs it (an HTTP engine, a body rewrite, the tokenizer).
type Typed struct {
	// Parsed holds the routing fields, validated as body.ParseRequest would have (its Body is nil).
	Parsed *body.Request
	// Call is the request in the worker protocol's terms (workerrpc.NewCall), without request id.
	Call *workerrpc.Call
	// JSON renders the client's body; called at most once per request.
	JSON func() ([]byte, error)
}

// typedState is a typed request's per-request part: its call named with the request id, and its JSON
// rendered once, for every attempt and leg that needs it.
type typedState struct {
	call  *workerrpc.Call // nil: the surface could not build one, every leg takes JSON
	once  sync.Once
	fn    func() ([]byte, error)
	usage bool // Do asks the engine for the stream's usage (body.WithStreamUsage)
	b     []byte
	err   error
}

func (t *typedState) json() ([]byte, error) {
	t.once.Do(func() {
		t.b, t.err = t.fn()
		if t.err == nil && t.usage {
			if b, ok := body.WithStreamUsage(t.b); ok {
				t.b = b
			}
		}
	})
	return t.b, t.err
}

// withJSON returns br with a JSON body: br itself unless r is typed and br has none yet, else a copy
// with the typed request rendered. Every flow that reads or rewrites the body calls it first.
func (r *Request) withJSON(br *body.Request) (*body.Request, error) {
	if br.Body != nil || r.typed == nil {
		return br, nil
	}
	b, err := r.typed.json()
	if err != nil {
		return nil, apierror.InvalidRequest("", "cannot encode request: "+err.Error())
	}
	bc := *br
	bc.Body = b
	return &bc, nil
}

// typedCall returns the worker-protocol call of a typed request, nil for a JSON one.
func (r *Request) typedCall() *workerrpc.Call {
	if r.typed == nil {
		return nil
	}
	return r.typed.call
}

// Response is the decode (or regular) worker's response, ready to relay. The caller must Close it:
// Close ends the request — it cancels whatever still runs, releases every guard and ends the spans.
type Response struct {
	// Status is the upstream status (2xx; failures come back as errors).
	Status int
	// Header holds the headers to relay (content type and sluice's worker headers).
	Header http.Header
	// Body streams the response. For SSE responses, Stream is true.
	Body io.ReadCloser
	// Stream reports an SSE response.
	Stream bool
	// Model is the request's model.
	Model string
	// Worker and PrefillWorker are the URLs of the workers that served.
	Worker, PrefillWorker string
	// RequestID is the request's X-Request-Id: the client's, or one sluice generated. Both legs
	// carried it, and Header holds it for the client.
	RequestID string

	answer *workerrpc.Answer // the worker's answer as messages, when the call asked for it
	chunks *workerrpc.Stream // likewise, a streamed one
	legCtx context.Context   // the PD legs' context, for the reason a typed stream broke off
	pd     *pdTiming         // the PD legs' timing, when the answer had a prefill leg
	meter  *meter            // observes the answer (set by Do)
	length int64             // the worker's Content-Length, -1 when it sent none
}

// Answer returns a whole answer as the worker protocol gave it, when the request's typed call asked
// for one (workerrpc.Call.WithTypedAnswer) and a worker-protocol worker answered; nil otherwise. The
// body then renders the same answer as JSON if read; either way the caller must Close it.
func (r *Response) Answer() *workerrpc.Answer { return r.answer }
