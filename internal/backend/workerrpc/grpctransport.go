package workerrpc

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"

	workerv1 "github.com/sluicegw/sluice/gen/sluice/worker/v1"
	"github.com/sluicegw/sluice/gen/sluice/worker/v1/workerv1connect"
	"github.com/sluicegw/sluice/internal/backend/body"
)

// Worker roles of the worker protocol.
const (
	RolePrefill = "prefill"
	RoleDecode  = "decode"
	RoleRegular = "regular"
)

// RoleHeader names the role of a grpc:// request when the transport was built without one (as the
// one NewHTTPClient installs is). It is consumed by the transport, never sent to an engine, and is
// not in ForwardHeaders' allow-list, so a client cannot set it.
const RoleHeader = "X-Sluice-Grpc-Role"

// GRPCTransport is an http.RoundTripper that serves the gateway's generation requests from workers
// speaking the sluice.worker.v1 protocol, so that dispatch treats grpc:// workers exactly like HTTP
// engines. A request "POST grpc://host:port/v1/chat/completions" (or /v1/completions, /generate)
// carries the JSON body dispatch built (with bootstrap_* fields or kv_transfer_params); the transport
// converts it (see below), calls PrefillService.Prefill or DecodeService.Decode over gRPC (h2c to
// http://host:port; grpcs:// uses https), and answers with the HTTP response the engine would have
// given:
//
//   - prefill: 200 {"prompt_tokens","cached_tokens"[,"kv_transfer_params"{vLLM snake_case}]
//     [,"meta_info":{"input_token_logprobs":[[lp,null,null],...]}]}, an array of such objects when
//     the request has several sub-requests;
//   - decode and regular: the OpenAI chat.completion / text_completion or SGLang /generate JSON
//     with usage, or, with "stream":true, an SSE body (chat.completion.chunk with the role on a
//     choice's first chunk and finish_reason on its last, a usage chunk with
//     stream_options.include_usage, then data: [DONE]). A regular worker gets Decode without a
//     handshake.
//
// Conversion: chat messages become RenderChatPrompt text; a completions prompt string, list of
// strings, token ids or list of token lists and /generate text or input_ids become Prompts. A request
// has prompts x n sub-requests (i = prompt*n + sample, the OpenAI choice index), each one RPC, called
// concurrently and merged; bootstrap arrays give sub-request i room i (a scalar room is refused for
// several sub-requests). Sampling: max_completion_tokens (chat) or max_tokens, temperature, top_p,
// top_k, stop, seed, min_tokens, ignore_eos (for /generate the same from sampling_params:
// max_new_tokens, min_new_tokens, sampling_seed); every other field goes to SamplingParams.extra.
//
// Errors: an RPC error the worker sent maps to an HTTP status (Unavailable 503, ResourceExhausted
// 429, DeadlineExceeded 504, InvalidArgument 400, NotFound 404, otherwise 500) with an OpenAI error
// body; a body the conversion rejects is a 400; a failure to reach the worker (dial, reset) or the
// end of the request's context is returned as an error, like any transport. After the head of a
// stream, a worker error becomes a data: {"error":...} event followed by data: [DONE], and a transport
// failure makes the body's Read fail. Closing the body cancels the RPCs and returns once every
// goroutine of the call has ended.
//
// Any other path (gRPC or Connect calls such as LoadService.GetLoad made by a connect client
// through an *http.Client using this transport) is passed through to the h2c client unchanged, with
// the scheme rewritten.
type GRPCTransport struct {
	role   string
	client connect.HTTPClient
	now    func() time.Time
	newID  func() string

	mu      sync.Mutex
	clients map[string]*workerClients
}

type workerClients struct {
	prefill workerv1connect.PrefillServiceClient
	decode  workerv1connect.DecodeServiceClient
}

// GRPCOption configures a GRPCTransport.
type GRPCOption func(*GRPCTransport)

// WithClock sets the clock for the "created" field of synthesized responses.
func WithClock(now func() time.Time) GRPCOption { return func(t *GRPCTransport) { t.now = now } }

// WithIDSource sets the generator of response ids when the request has no X-Request-Id.
func WithIDSource(newID func() string) GRPCOption { return func(t *GRPCTransport) { t.newID = newID } }

// NewGRPCTransport returns a transport for workers of the given role ("prefill", "decode",
// "regular"; "" takes each request's role from RoleHeader) that makes its calls with client, which
// must speak HTTP/2 (NewH2CClient).
func NewGRPCTransport(role string, client connect.HTTPClient, opts ...GRPCOption) *GRPCTransport {
	t := &GRPCTransport{role: role, client: client, now: time.Now, newID: randomID, clients: map[string]*workerClients{}}
	for _, o := range opts {
		o(t)
	}
	return t
}

// CloseIdleConnections closes the idle connections of the underlying client, when it has any.
func (t *GRPCTransport) CloseIdleConnections() {
	if c, ok := t.client.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// The SSE framing of sse.go's writers, for the streams rendered here.
var (
	sseData = []byte("data: ")
	sseEnd  = []byte("\n\n")
	sseDone = []byte("data: [DONE]\n\n")
)

func randomID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// baseURL maps grpc://host:port to http://host:port (grpcs to https).
func baseURL(req *http.Request) (string, error) {
	switch req.URL.Scheme {
	case "grpc":
		return "http://" + req.URL.Host, nil
	case "grpcs":
		return "https://" + req.URL.Host, nil
	}
	return "", fmt.Errorf("backend: grpc transport: unsupported scheme %q", req.URL.Scheme)
}

func (t *GRPCTransport) clientsFor(base string) *workerClients {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.clients[base]
	if !ok {
		c = &workerClients{
			prefill: workerv1connect.NewPrefillServiceClient(t.client, base, connect.WithGRPC()),
			decode:  workerv1connect.NewDecodeServiceClient(t.client, base, connect.WithGRPC()),
		}
		t.clients[base] = c
	}
	return c
}

// RoundTrip implements http.RoundTripper.
func (t *GRPCTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	base, err := baseURL(req)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	route, ok := body.RouteFromPath(req.URL.Path)
	if !ok {
		return t.passThrough(req, base)
	}
	role := t.role
	if role == "" {
		role = req.Header.Get(RoleHeader)
	}
	if role != RolePrefill && role != RoleDecode && role != RoleRegular {
		closeBody(req)
		return nil, fmt.Errorf("backend: grpc transport: worker role %q (want prefill, decode or regular; set %s)", role, RoleHeader)
	}
	var raw []byte
	if req.Body != nil {
		raw, err = io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
	}
	reqID := req.Header.Get("X-Request-Id")
	call, err := buildCall(route, raw, reqID)
	if err != nil {
		var re *body.RequestError
		if errors.As(err, &re) {
			return errorResponse(req, http.StatusBadRequest, re.Message, "invalid_request_error", "invalid_argument"), nil
		}
		return nil, err
	}
	return t.run(req, base, role, route, call)
}

// run makes the RPCs of call in role and answers as an HTTP engine would; req carries the context
// and is the answer's Request. call is not modified (the typed leg shares one between both legs).
func (t *GRPCTransport) run(req *http.Request, base, role string, route body.Route, call *grpcCall) (*http.Response, error) {
	if call.requestID == "" {
		c := *call
		c.requestID = t.newID()
		call = &c
	}
	wc := t.clientsFor(base)
	if role == RolePrefill {
		return t.prefill(req, wc, call)
	}
	meta := &responseMeta{created: t.now().Unix(), model: call.model, id: call.requestID}
	switch route {
	case body.RouteChat:
		meta.id = "chatcmpl-" + call.requestID
	case body.RouteCompletions:
		meta.id = "cmpl-" + call.requestID
	}
	withHandshake := role == RoleDecode
	if call.stream {
		return t.decodeStream(req, wc, call, meta, withHandshake)
	}
	return t.decodeUnary(req, wc, call, meta, withHandshake)
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

func (t *GRPCTransport) passThrough(req *http.Request, base string) (*http.Response, error) {
	out := req.Clone(req.Context())
	u, err := url.Parse(base + req.URL.RequestURI())
	if err != nil {
		closeBody(req)
		return nil, err
	}
	out.URL = u
	out.Host = ""
	out.Header.Del(RoleHeader)
	return t.client.Do(out)
}

// forEach runs fn for every sub-request, concurrently when there are several, cancelling the others
// at the first error, and returns that first error after all of them have returned.
func forEach(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	if n == 1 {
		return fn(ctx, 0)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for i := range n {
		wg.Go(func() {
			if err := fn(ctx, i); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		})
	}
	wg.Wait()
	return first
}

func (t *GRPCTransport) prefill(req *http.Request, wc *workerClients, call *grpcCall) (*http.Response, error) {
	results := make([]*workerv1.PrefillResponse, call.subs())
	err := forEach(req.Context(), call.subs(), func(ctx context.Context, i int) error {
		r, err := wc.prefill.Prefill(ctx, call.prefillRequest(i))
		results[i] = r
		return err
	})
	if err != nil {
		return rpcErrorResponse(req, err)
	}
	return jsonResponse(req, http.StatusOK, renderPrefill(call, results)), nil
}

func (t *GRPCTransport) decodeUnary(req *http.Request, wc *workerClients, call *grpcCall, meta *responseMeta, withHandshake bool) (*http.Response, error) {
	samples := make([]sample, call.subs())
	err := forEach(req.Context(), call.subs(), func(ctx context.Context, i int) error {
		stream, err := wc.decode.Decode(ctx, call.decodeRequest(i, withHandshake))
		if err != nil {
			return err
		}
		defer stream.Close()
		for stream.Receive() {
			samples[i].add(stream.Msg())
		}
		return stream.Err()
	})
	if err != nil {
		return rpcErrorResponse(req, err)
	}
	if call.typedAnswer && call.route != body.RouteGenerate {
		return answerResponse(req, call, meta, samples), nil
	}
	return jsonResponse(req, http.StatusOK, renderFinal(call, meta, samples)), nil
}

// streamEvent is one message (or the end) of one sub-request's Decode stream.
type streamEvent struct {
	sub int
	msg *workerv1.DecodeResponse // nil at the end
	err error                    // set at an abnormal end
}

// decodeStream starts one Decode stream per sub-request and answers once each has produced its first
// message (or ended): an RPC that fails before that is answered with an error status, as an HTTP
// engine would. The SSE body is then written by one goroutine (the writer), fed by one pump goroutine
// per stream.
func (t *GRPCTransport) decodeStream(req *http.Request, wc *workerClients, call *grpcCall, meta *responseMeta, withHandshake bool) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	subs := call.subs()
	events := make(chan streamEvent)
	var pumps sync.WaitGroup
	for i := range subs {
		pumps.Go(func() { pump(ctx, wc.decode, call.decodeRequest(i, withHandshake), i, events) })
	}
	// stop cancels the pumps and waits for them; it is only called on paths that own the pumps.
	stop := func() {
		cancel()
		pumps.Wait()
	}

	var pending []streamEvent
	heard := make([]bool, subs)
	for remaining := subs; remaining > 0; {
		var ev streamEvent
		select {
		case ev = <-events:
		case <-ctx.Done():
			// A pump may give up sending once ctx is done, so do not wait for its event.
			stop()
			return nil, fmt.Errorf("backend: grpc worker: %w", req.Context().Err())
		}
		if ev.err != nil {
			stop()
			return rpcErrorResponse(req, ev.err)
		}
		pending = append(pending, ev)
		if !heard[ev.sub] {
			heard[ev.sub] = true
			remaining--
		}
	}

	if call.typedAnswer && call.route != body.RouteGenerate {
		var once sync.Once
		st := &Stream{ID: meta.id, Created: meta.created, Model: meta.model, ctx: ctx, call: call, meta: meta,
			samples: make([]sample, subs), pending: pending, events: events, live: subs}
		st.stop = func() { once.Do(stop) }
		return streamResponse(req, st), nil
	}
	pr, pw := io.Pipe()
	done := make(chan struct{})
	w := &sseWriter{call: call, meta: meta, samples: make([]sample, subs), pw: pw}
	go func() {
		defer close(done)
		err := w.run(ctx, pending, events, subs)
		stop() // every path: cancel what is still running, then join the pumps
		if errors.Is(err, errStreamDone) {
			err = nil
		}
		pw.CloseWithError(err) // nil: the reader sees io.EOF
	}()
	return streamResponse(req, &streamBody{pr: pr, cancel: cancel, done: done}), nil
}

// streamResponse is the head of a streamed answer.
func streamResponse(req *http.Request, b io.ReadCloser) *http.Response {
	return &http.Response{
		Status:        "200 OK",
		StatusCode:    http.StatusOK,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": {"text/event-stream"}, "Cache-Control": {"no-cache"}},
		Body:          b,
		ContentLength: -1,
		Request:       req,
	}
}

// pump reads one Decode stream into events until it ends or ctx is done.
func pump(ctx context.Context, dc workerv1connect.DecodeServiceClient, dreq *workerv1.DecodeRequest, sub int, events chan<- streamEvent) {
	send := func(ev streamEvent) bool {
		select {
		case events <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	stream, err := dc.Decode(ctx, dreq)
	if err != nil {
		send(streamEvent{sub: sub, err: err})
		return
	}
	defer stream.Close()
	for stream.Receive() {
		if !send(streamEvent{sub: sub, msg: stream.Msg()}) {
			return
		}
	}
	send(streamEvent{sub: sub, err: stream.Err()})
}

// sseWriter renders stream events as SSE into the pipe.
type sseWriter struct {
	call    *grpcCall
	meta    *responseMeta
	samples []sample
	pw      *io.PipeWriter
	buf     []byte
}

// run writes the pending events, then the rest as they come, then the epilogue. It returns a
// non-nil error when the body must end abnormally (a transport failure, the reader went away).
func (w *sseWriter) run(ctx context.Context, pending []streamEvent, events <-chan streamEvent, subs int) error {
	live := subs
	for _, ev := range pending {
		if err := w.handle(ev, &live); err != nil {
			return err
		}
	}
	for live > 0 {
		select {
		case ev := <-events:
			if err := w.handle(ev, &live); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	w.buf = w.buf[:0]
	if w.call.includeUsage && w.call.route != body.RouteGenerate {
		w.buf = body.AppendSSE(w.buf, appendUsageChunk(nil, w.call, w.meta, w.samples))
	}
	w.buf = append(w.buf, sseDone...)
	_, err := w.pw.Write(w.buf)
	return err
}

func (w *sseWriter) handle(ev streamEvent, live *int) error {
	s := &w.samples[ev.sub]
	if ev.msg == nil {
		s.finished = true
		*live--
		if ev.err == nil {
			return nil
		}
		if !connect.IsWireError(ev.err) {
			return transportError(ev.err)
		}
		_, typ := statusForCode(connect.CodeOf(ev.err))
		w.buf = body.AppendSSE(w.buf[:0], appendErrorBody(nil, connectMessage(ev.err), typ, connect.CodeOf(ev.err).String()))
		w.buf = append(w.buf, sseDone...)
		if _, err := w.pw.Write(w.buf); err != nil {
			return err
		}
		return errStreamDone
	}
	s.add(ev.msg)
	w.buf = w.buf[:0]
	if ev.msg.GetText() != "" || ev.msg.GetFinishReason() != "" || !s.started || len(ev.msg.GetTokenIds()) > 0 {
		w.buf = append(w.buf, sseData...)
		w.buf = appendChunk(w.buf, w.call, w.meta, s, ev.sub, ev.msg)
		w.buf = append(w.buf, sseEnd...)
		s.started = true
	}
	if len(w.buf) == 0 {
		return nil
	}
	_, err := w.pw.Write(w.buf)
	return err
}

// errStreamDone ends the writer normally after an in-stream error event (the body then reads EOF).
var errStreamDone = errors.New("stream done")

// streamBody is a synthesized SSE body; Close cancels the RPCs and waits for the writer and pumps.
type streamBody struct {
	pr     *io.PipeReader
	cancel context.CancelFunc
	done   <-chan struct{}
	once   sync.Once
}

func (b *streamBody) Read(p []byte) (int, error) { return b.pr.Read(p) }

func (b *streamBody) Close() error {
	b.once.Do(func() {
		b.cancel()
		b.pr.CloseWithError(errBodyClosed)
	})
	<-b.done
	return nil
}

var errBodyClosed = errors.New("backend: response body closed")

// transportError wraps a failure to talk to the worker (not an answer from it).
func transportError(err error) error {
	if ctxErr := contextError(err); ctxErr != nil {
		return ctxErr
	}
	return fmt.Errorf("backend: grpc worker: %w", err)
}

func contextError(err error) error {
	switch connect.CodeOf(err) {
	case connect.CodeCanceled:
		if errors.Is(err, context.Canceled) {
			return fmt.Errorf("backend: grpc worker: %w", context.Canceled)
		}
	case connect.CodeDeadlineExceeded:
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("backend: grpc worker: %w", context.DeadlineExceeded)
		}
	}
	return nil
}

// rpcErrorResponse maps an RPC error: errors the worker sent become HTTP error responses; anything
// else (dial failures, resets, the context's end) is returned as an error.
func rpcErrorResponse(req *http.Request, err error) (*http.Response, error) {
	if !connect.IsWireError(err) {
		return nil, transportError(err)
	}
	code := connect.CodeOf(err)
	status, typ := statusForCode(code)
	return errorResponse(req, status, connectMessage(err), typ, code.String()), nil
}

func connectMessage(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) && ce.Message() != "" {
		return ce.Message()
	}
	return err.Error()
}

// statusForCode maps a worker's RPC code to the HTTP status an HTTP engine would have answered, and
// OpenAI's error type.
func statusForCode(code connect.Code) (int, string) {
	switch code {
	case connect.CodeUnavailable:
		return http.StatusServiceUnavailable, "server_error"
	case connect.CodeResourceExhausted:
		return http.StatusTooManyRequests, "rate_limit_error"
	case connect.CodeDeadlineExceeded:
		return http.StatusGatewayTimeout, "server_error"
	case connect.CodeInvalidArgument:
		return http.StatusBadRequest, "invalid_request_error"
	case connect.CodeNotFound:
		return http.StatusNotFound, "not_found_error"
	}
	return http.StatusInternalServerError, "server_error"
}

func errorResponse(req *http.Request, status int, message, typ, code string) *http.Response {
	return jsonResponse(req, status, appendErrorBody(nil, message, typ, code))
}

func jsonResponse(req *http.Request, status int, body []byte) *http.Response {
	return &http.Response{
		Status:        strconv.Itoa(status) + " " + http.StatusText(status),
		StatusCode:    status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": {"application/json"}},
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}
