package dispatch

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/backend/enginerpc"
	"github.com/sluicegw/sluice/internal/placement"
	"github.com/sluicegw/sluice/internal/tenant"
	"github.com/sluicegw/sluice/internal/tokenizer"
)

// How Do prepares a request, once, before any attempt: it reads the routing fields (parse), renders a
// typed request's JSON when the tokenizer or the decode KV reservation will read it, builds the
// placement inputs, checks the admission headers, names the tenant and the request id, and asks a
// stream for its usage. Every attempt then runs on the one prepared request.

// prepared is one client request as Do runs it, built once: a copy of the caller's Request (Do never
// writes into the caller's) with what Do learned of it, and what every attempt shares.
type prepared struct {
	Request                    // the caller's, copied; tenant, RequestID and typed filled in
	br      *body.Request      // the routing fields, with the JSON body once one is needed
	preq    *placement.Request // the placement inputs
	strip   bool               // Do asked the engine for the stream's usage (meter.strip)
	asked   string             // the alias the client asked for, when br.Model is its target (alias.go)
	prompt  *enginerpc.Prompt  // the prompt tokenized for engine-gRPC workers (ctxlen.go), for their transport

	res        *tenant.Reservation // the tenant budget's reservation (budget.go); nil without one
	rateHeader http.Header         // the budgeted tenant's x-ratelimit-* headers
	legs       legShared           // what its legs share: Request.shared points here (one allocation)
}

// model is the request's model, "" while its body is unread.
func (q *prepared) model() string {
	if q.br == nil {
		return ""
	}
	return q.br.Model
}

// prepare builds the request every attempt runs. On error the returned request holds what was learned
// before it (the model, the tenant), for the request's stats.
func (x *Dispatcher) prepare(ctx context.Context, r *Request) (*prepared, error) {
	q := &prepared{Request: *r}
	q.shared = &q.legs
	br, ts, err := parse(r)
	if err != nil {
		return q, classifyRequestError(err)
	}
	q.br, q.typed = br, ts
	if err := x.routing(q); err != nil {
		return q, err
	}
	if _, _, _, err := admissionHeaders(q.Header); err != nil {
		return q, err
	}
	if err := x.identify(ctx, q); err != nil {
		return q, err
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(requestAttributes(&q.Request, q.br)...)
	}
	x.askStreamUsage(q)
	if q.typed != nil && q.Typed.Call != nil {
		q.typed.call = q.Typed.Call.WithRequestID(q.RequestID)
		if q.strip {
			q.typed.call = q.typed.call.WithStreamUsage()
		}
	}
	return q, nil
}

// routing builds the placement inputs: the prompt's token ids when a policy reads them, rendering a
// typed request's JSON first when the tokenizer or the decode KV reservation reads it. A prompt for
// engine-gRPC workers is tokenized here too, and refused when it does not fit the context (ctxlen.go).
func (x *Dispatcher) routing(q *prepared) error {
	if err := x.resolveAlias(q); err != nil {
		return err
	}
	limit, etk := x.engineContext(q.br.Model)
	if q.typed != nil && (x.wantsTokens() || x.d.Admission.DecodeKVKnown() || etk != nil) {
		br, err := q.withJSON(q.br)
		if err != nil {
			return err
		}
		q.br = br
	}
	preq, err := placementRequest(q.br, q.Header, x.cfg.RoutingKeyHeaders)
	if err != nil {
		return err
	}
	preq.IgnoreRanks = x.cfg.IgnoreRanks
	if x.predicting {
		preq.Picks = &placement.Picks{} // the meter reports the picks' TTFT (meter.go)
	}
	var text string
	var tk *tokenizer.Tokenizer
	if x.wantsTokens() {
		if q.br.PromptTokenIDs == 0 && x.d.Tokenizer != nil {
			tk = x.d.Tokenizer(q.br.Model)
		}
		preq.TokenIDs, text = promptTokens(q.br, tk) // tokens.go
	}
	q.preq = preq
	if etk != nil {
		var ids []uint32
		if tk == etk || q.br.PromptTokenIDs > 0 {
			ids = preq.TokenIDs // drawn already, with the engines' tokenizer or from the body's ids
		}
		return x.checkContext(q, limit, etk, ids, text)
	}
	return nil
}

// identify names the request's tenant (Config.Tenants) and its id: the caller's, else the first
// request-id header present, else a new UUID.
func (x *Dispatcher) identify(ctx context.Context, q *prepared) error {
	if x.cfg.Tenants != nil {
		t, err := x.cfg.Tenants.Of(ctx, q.Header)
		if err != nil {
			return apierror.InvalidRequest(x.cfg.Tenants.Header(), err.Error())
		}
		q.tenant = t
	}
	if q.RequestID == "" {
		q.RequestID = firstHeader(q.Header, x.cfg.RequestIDHeaders)
		if q.RequestID == "" {
			q.RequestID = x.newRequestID()
		}
	}
	q.shared.idHeader = []string{q.RequestID}
	return nil
}

// askStreamUsage asks the engine for a stream's usage when the client did not: token metrics need it,
// and Response.Frames drops the usage chunk again before the client sees it.
func (x *Dispatcher) askStreamUsage(q *prepared) {
	br := q.br
	if !br.Stream || br.Route == body.RouteGenerate || br.IncludeUsage {
		return
	}
	if q.typed != nil && br.Body == nil {
		q.typed.usage, q.strip = true, true // the JSON, if rendered, and the call ask for it alike
		return
	}
	if b, ok := body.WithStreamUsage(br.Body); ok {
		br.Body, q.strip = b, true // q.br is the request's own (parse built it), not the caller's
	}
}
