package workerrpc

import (
	"context"
	"fmt"
	"net/http"

	workerv1 "github.com/sluicegw/sluice/gen/sluice/worker/v1"
	"github.com/sluicegw/sluice/internal/backend/body"
)

// The typed leg. A caller holding a request as a Call hands it to Send instead of posting a JSON body
// to RoundTrip: a PD request is converted from JSON once (BuildCall) for both legs, and its bootstrap
// rooms are set on the messages (WithBootstrap) rather than spliced into the JSON and parsed back.
// The answer is the same *http.Response RoundTrip gives, so the caller relays both paths alike.

// Call is one generation request in the worker protocol's terms. It is read-only once built, so both
// legs of a PD request may run it at once.
type Call struct {
	route body.Route
	c     *grpcCall
}

// BuildCall converts a client body for route into a Call; requestID names its RPCs (empty: Send
// generates one, as RoundTrip does without X-Request-Id). Errors are *body.RequestError, the ones
// RoundTrip answers with a 400.
func BuildCall(route body.Route, raw []byte, requestID string) (*Call, error) {
	c, err := buildCall(route, raw, requestID)
	if err != nil {
		return nil, err
	}
	return &Call{route: route, c: c}, nil
}

// WithBootstrap returns a copy of c whose sub-requests carry an SGLang-style handshake with one
// prefill worker: rooms[i] for sub-request i when asList, else the single room of a single
// sub-request. It accepts what RoundTrip accepts from body.InjectBootstrap's fields and refuses the
// rest with the same *body.RequestError.
func (c *Call) WithBootstrap(host string, port int, rooms []uint64, asList bool) (*Call, error) {
	subs := c.c.subs()
	if port < 0 || port > 1<<32-1 {
		return nil, body.Invalid("bootstrap_port", "bootstrap_port: %d out of range", port)
	}
	var bs []*workerv1.Bootstrap
	switch {
	case !asList && len(rooms) == 1:
		if subs > 1 {
			return nil, body.Invalid("bootstrap_room", "one bootstrap_room for %d sub-requests: each needs its own", subs)
		}
		bs = []*workerv1.Bootstrap{{Host: host, Port: uint32(port), Room: rooms[0]}}
	case asList:
		if len(rooms) < subs {
			return nil, body.Invalid("bootstrap_room", "bootstrap_room has %d entries for %d sub-requests", len(rooms), subs)
		}
		bs = make([]*workerv1.Bootstrap, subs)
		for i := range subs {
			bs[i] = &workerv1.Bootstrap{Host: host, Port: uint32(port), Room: rooms[i]}
		}
	default:
		return nil, fmt.Errorf("workerrpc: WithBootstrap: %d rooms without a list", len(rooms))
	}
	cc := *c.c
	cc.bootstrap = bs
	return &Call{route: c.route, c: &cc}, nil
}

// Send runs c on the worker at workerURL (grpc:// or grpcs://) in role (prefill, decode or regular;
// the transport's own role wins when it has one) and answers as RoundTrip would for the same body.
func (t *GRPCTransport) Send(ctx context.Context, workerURL, role string, c *Call) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, workerURL+c.route.Path(), nil)
	if err != nil {
		return nil, err
	}
	base, err := baseURL(req)
	if err != nil {
		return nil, err
	}
	if t.role != "" {
		role = t.role
	}
	if role != RolePrefill && role != RoleDecode && role != RoleRegular {
		return nil, fmt.Errorf("backend: grpc transport: worker role %q (want prefill, decode or regular)", role)
	}
	return t.run(req, base, role, c.route, c.c)
}

// CallSpec is a generation request a typed surface already holds as messages (services/openai's
// sluice.openai.v1 requests): the fields BuildCall would read from the JSON body, given directly, so
// that such a request reaches a worker with no JSON in between.
type CallSpec struct {
	Route body.Route // RouteChat or RouteCompletions
	Model string
	// Prompts are the prompts in order (chat: one, RenderChatPrompt's text); Batched says the client
	// sent a list of them.
	Prompts []*workerv1.Prompt
	Batched bool
	// N is the number of samples per prompt, 1 to body.MaxN.
	N            int
	Stream       bool
	IncludeUsage bool
	// Sampling is shared by every sub-request and must not be modified afterwards.
	Sampling *workerv1.SamplingParams
}

// NewCall builds a Call from spec, refusing what BuildCall would refuse of the same request.
func NewCall(spec CallSpec) (*Call, error) {
	if spec.Route != body.RouteChat && spec.Route != body.RouteCompletions {
		return nil, fmt.Errorf("workerrpc: NewCall: route %s is not typed", spec.Route)
	}
	if len(spec.Prompts) == 0 {
		return nil, body.Invalid("", "a request needs a prompt")
	}
	if spec.N < 1 || spec.N > body.MaxN {
		return nil, body.Invalid("n", "n must be between 1 and %d", body.MaxN)
	}
	sp := spec.Sampling
	if sp == nil {
		sp = &workerv1.SamplingParams{}
	}
	return &Call{route: spec.Route, c: &grpcCall{route: spec.Route, model: spec.Model, prompts: spec.Prompts,
		batched: spec.Batched, n: spec.N, stream: spec.Stream, includeUsage: spec.IncludeUsage, sampling: sp}}, nil
}

// WithRequestID returns a copy of c whose RPCs are named id (sub-requests id-0, id-1, ...), as
// BuildCall's requestID does.
func (c *Call) WithRequestID(id string) *Call {
	cc := *c.c
	cc.requestID = id
	return &Call{route: c.route, c: &cc}
}

// WithStreamUsage returns a copy of c that ends a streamed answer with the usage chunk, as
// body.WithStreamUsage asks of a JSON body (dispatch meters every stream's usage).
func (c *Call) WithStreamUsage() *Call {
	cc := *c.c
	cc.includeUsage = true
	return &Call{route: c.route, c: &cc}
}

// DecodeRequests returns the sub-requests as a decode worker receives them, in order (for tests
// comparing two ways of building a Call).
func (c *Call) DecodeRequests() []*workerv1.DecodeRequest {
	out := make([]*workerv1.DecodeRequest, c.c.subs())
	for i := range out {
		out[i] = c.c.decodeRequest(i, true)
	}
	return out
}

// Shape reports what the answer's form depends on beyond the messages: streamed, with a usage
// chunk, the prompts given as a list.
func (c *Call) Shape() (stream, includeUsage, batched bool) {
	return c.c.stream, c.c.includeUsage, c.c.batched
}
