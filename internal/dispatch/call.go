package dispatch

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicegw/sluice/internal/backend"
	"github.com/sluicegw/sluice/internal/backend/workerrpc"
	"github.com/sluicegw/sluice/internal/worker"
)

// A leg is one HTTP exchange with one worker. call is the only place that talks to workers: it
// forwards the allow-listed client headers, the worker's API key, the request id and the trace
// context, feeds the worker's circuit breaker and the upstream metrics, and turns failures into
// *UpstreamError and *TransportError.

// maxUpstreamErrorBody bounds the error body read from a worker.
const maxUpstreamErrorBody = 64 << 10

// maxMergedBody bounds the responses held in memory to merge them (input logprobs, n > 1 samples,
// vLLM's prefill answer).
const maxMergedBody = 64 << 20

// call sends one leg and returns its response head. Statuses >= 400 come back as *UpstreamError (body
// read and closed); transport failures as *TransportError. extra headers (nil for none) are set on
// the leg. The leg's client span ends when the returned body is closed.
func (x *Dispatcher) call(ctx context.Context, w *worker.Worker, leg, path string, body []byte, r *Request, extra http.Header) (*http.Response, error) {
	return x.callWith(ctx, w, leg, path, jsonLeg(body), r, extra)
}

// A legSender is what one leg sends to its worker. The HTTP adapters send the leg's JSON body
// (jsonLeg); the worker-RPC adapter hands sluice's worker-protocol transport the typed call it built
// once for both legs (rpcLeg), so that path makes no JSON -> proto conversion per leg. Both answer
// with the *http.Response an engine would give, so everything after the send is shared.
type legSender interface {
	// body is the request body to build the leg's request with (nil when the call travels otherwise).
	body() []byte
	send(x *Dispatcher, req *http.Request, w *worker.Worker) (*http.Response, error)
}

// jsonLeg sends a JSON body over the gateway's HTTP client (http://, https://, grpc:// alike).
type jsonLeg []byte

func (b jsonLeg) body() []byte { return b }

func (jsonLeg) send(x *Dispatcher, req *http.Request, _ *worker.Worker) (*http.Response, error) {
	return backend.RoundTrip(x.d.HTTP, req)
}

// rpcLeg sends a typed worker-protocol call; the request built for it carries only the context (and
// the headers the span and metrics describe).
type rpcLeg struct {
	t    *workerrpc.GRPCTransport
	call *workerrpc.Call
}

func (rpcLeg) body() []byte { return nil }

func (l rpcLeg) send(_ *Dispatcher, req *http.Request, w *worker.Worker) (*http.Response, error) {
	resp, err := l.t.Send(req.Context(), w.URL(), string(w.Role()), l.call)
	if err != nil {
		// As backend.RoundTrip wraps a transport's error, so both paths fail alike.
		return nil, &url.Error{Op: "Post", URL: req.URL.Redacted(), Err: err}
	}
	return resp, nil
}

// callWith is call with the leg's sender.
func (x *Dispatcher) callWith(ctx context.Context, w *worker.Worker, leg, path string, s legSender, r *Request, extra http.Header) (*http.Response, error) {
	ctx, span := x.d.Tracer.Start(ctx, legSpanName(leg), clientSpan)
	if span.IsRecording() {
		span.SetAttributes(legAttributes(w, leg, path, r)...)
	}
	req, clientAuth, err := x.legRequest(ctx, span.SpanContext(), w, path, s, r, extra)
	if err != nil {
		span.End()
		return nil, err
	}
	resp, err := s.send(x, req, w)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "transport error")
		span.End()
		if ctx.Err() == nil { // our own cancellation is not the worker's fault
			w.Breaker().RecordFailure()
			x.d.Metrics.ObserveUpstream(w.URL(), 0)
			class := ClassTransport
			if isTimeout(err) {
				class = ClassTimeout
			}
			x.d.Metrics.IncWorkerError(w.URL(), class)
		}
		return nil, &TransportError{Worker: w.URL(), Err: err}
	}
	x.d.Metrics.ObserveUpstream(w.URL(), resp.StatusCode)
	if span.IsRecording() { // the attribute is an allocation, for the 99% of spans not sampled too
		span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	}
	w.Breaker().RecordStatus(resp.StatusCode)
	if resp.StatusCode >= 400 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, maxUpstreamErrorBody))
		resp.Body.Close()
		span.SetStatus(codes.Error, "upstream status "+strconv.Itoa(resp.StatusCode))
		span.End()
		return nil, &UpstreamError{Worker: w.URL(), Status: resp.StatusCode, Body: msg, RetryAfter: resp.Header.Get("Retry-After"),
			ClientAuth: clientAuth}
	}
	if span.IsRecording() { // End does nothing on a span that records nothing: no wrapper for it
		resp.Body = &onClose{ReadCloser: resp.Body, span: span}
	}
	return resp, nil
}

// legRequest builds a leg's request: the allow-listed client headers, the worker's API key, the
// request id, the trace context and the extra headers. clientAuth reports that the client's own
// Authorization went to the worker (no key of the gateway's replaced it), so its 401 is the client's.
func (x *Dispatcher) legRequest(ctx context.Context, sc trace.SpanContext, w *worker.Worker, path string, s legSender, r *Request, extra http.Header) (req *http.Request, clientAuth bool, err error) {
	req, err = backend.NewPostRequest(ctx, w.URL(), path, s.body())
	if err != nil {
		return nil, false, err
	}
	backend.ForwardHeaders(req.Header, r.Header, HeaderRoutingKey, HeaderSMGRoutingKey)
	if x.cfg.DropClientAuthorization {
		req.Header.Del("Authorization")
	}
	// Without a worker key of the gateway's, the engine judges the client's own credentials.
	clientAuth = !x.cfg.DropClientAuthorization
	if k := w.APIKey(); k != "" {
		req.Header.Set("Authorization", "Bearer "+k)
		clientAuth = false
	}
	req.Header["Content-Type"] = jsonContentType
	if r.RequestID != "" {
		req.Header[HeaderRequestID] = r.requestIDHeader()
	}
	if w.Protocol() == worker.ProtocolGRPC {
		req.Header.Set(workerrpc.RoleHeader, string(w.Role())) // which RPC the worker-protocol transport calls
	}
	for k, v := range extra {
		req.Header[k] = v
	}
	x.injectTrace(ctx, sc, r, req.Header)
	return req, clientAuth, nil
}

// legShared is what the legs of one request share, made once for them all: the X-Request-Id value
// (set by identify, before any leg), and the trace context the legs of a request whose span is not
// sampled carry: telemetry's shortcut starts no leg span under an unsampled parent, so every such
// leg would inject the same headers. The first leg makes them; the legs run concurrently, hence the
// Once.
type legShared struct {
	idHeader []string // read-only: requestIDHeader
	once     sync.Once
	sc       trace.SpanContext
	header   http.Header // read-only once made: its values are shared by the legs' headers
}

// injectTrace puts the trace context of the leg's span (sc, the span of ctx) into h: from r's
// legShared when the span is that of an unsampled request, else from the propagator.
func (x *Dispatcher) injectTrace(ctx context.Context, sc trace.SpanContext, r *Request, h http.Header) {
	t := r.shared
	if t == nil || !sc.IsValid() || sc.IsSampled() {
		x.d.Propagator.Inject(ctx, propagation.HeaderCarrier(h))
		return
	}
	t.once.Do(func() {
		t.sc, t.header = sc, make(http.Header, 2)
		x.d.Propagator.Inject(ctx, propagation.HeaderCarrier(t.header))
	})
	if !t.sc.Equal(sc) { // a leg span of its own (a tracer without the shortcut)
		x.d.Propagator.Inject(ctx, propagation.HeaderCarrier(h))
		return
	}
	for k, v := range t.header {
		h[k] = v
	}
}

// clientSpan starts a leg's span; built once, as an option is an allocation per call.
var clientSpan = trace.WithSpanKind(trace.SpanKindClient)

// jsonContentType is every leg's Content-Type; header values are only read downstream, so one slice
// serves all.
var jsonContentType = []string{"application/json"}

// legSpanName names a leg's client span without building the string per request.
func legSpanName(leg string) string {
	switch leg {
	case "prefill":
		return "sluice.leg.prefill"
	case "decode":
		return "sluice.leg.decode"
	case "regular":
		return "sluice.leg.regular"
	}
	return "sluice.leg." + leg
}

// legAttributes describes a leg with OpenTelemetry's HTTP client conventions (the worker's address
// as server.*), plus which worker and leg it is.
func legAttributes(w *worker.Worker, leg, path string, r *Request) []attribute.KeyValue {
	attrs := []attribute.KeyValue{
		attribute.String("sluice.worker", w.URL()), attribute.String("sluice.leg", leg),
		attribute.String("sluice.request_id", r.RequestID), attribute.String("http.request.method", http.MethodPost),
		attribute.String("url.path", path), attribute.String("sluice.worker.protocol", string(w.Protocol())),
	}
	if rk := w.Rank(); rk >= 0 {
		attrs = append(attrs, attribute.Int("sluice.dp_rank", rk))
	}
	if u, err := url.Parse(w.URL()); err == nil {
		attrs = append(attrs, attribute.String("server.address", u.Hostname()))
		if p, err := strconv.Atoi(u.Port()); err == nil {
			attrs = append(attrs, attribute.Int("server.port", p))
		}
	}
	return attrs
}

// readLeg calls a leg and reads its whole body (at most maxMergedBody).
func (x *Dispatcher) readLeg(ctx context.Context, w *worker.Worker, leg, path string, body []byte, r *Request, extra http.Header) ([]byte, error) {
	return x.readLegWith(ctx, w, leg, path, jsonLeg(body), r, extra)
}

// readLegWith is readLeg with the leg's sender.
func (x *Dispatcher) readLegWith(ctx context.Context, w *worker.Worker, leg, path string, s legSender, r *Request, extra http.Header) ([]byte, error) {
	resp, err := x.callWith(ctx, w, leg, path, s, r, extra)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, maxMergedBody))
	if err != nil {
		return nil, &TransportError{Worker: w.URL(), Err: err}
	}
	return out, nil
}

// onClose runs fn (when set) once, after closing the body, then ends span (when set): a leg's body
// ends its span without a closure per leg.
type onClose struct {
	io.ReadCloser
	fn   func()
	span trace.Span
	once sync.Once
}

func (o *onClose) Close() error {
	err := o.ReadCloser.Close()
	o.once.Do(o.done)
	return err
}

func (o *onClose) done() {
	if o.fn != nil {
		o.fn()
	}
	if o.span != nil {
		o.span.End()
	}
}

// legBody turns a read error caused by the legs' cancellation (the prefill failed mid-request) into a
// clear error for the relay, and runs end (when not nil) once after its first Close, as onClose
// does: the exchange's answer is one wrapper, not two.
type legBody struct {
	io.ReadCloser
	ctx  context.Context
	end  interface{ end() } // the exchange (pdExchange); nil: nothing to end
	once sync.Once
}

func (l *legBody) Close() error {
	err := l.ReadCloser.Close()
	if l.end != nil {
		l.once.Do(l.end.end)
	}
	return err
}

func (l *legBody) Read(p []byte) (int, error) {
	n, err := l.ReadCloser.Read(p)
	if err != nil && err != io.EOF && l.ctx.Err() != nil {
		return n, fmt.Errorf("request aborted: %w", context.Cause(l.ctx))
	}
	return n, err
}
