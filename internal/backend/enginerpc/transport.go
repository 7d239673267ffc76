package enginerpc

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
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/sluicegw/sluice/gen/sglang/grpc/scheduler/sglangpbconnect"
	"github.com/sluicegw/sluice/gen/trtllm/trtllmpbconnect"
	"github.com/sluicegw/sluice/gen/vllm/grpc/engine/vllmpbconnect"
	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/enginebook"
	"github.com/sluicegw/sluice/internal/enginegrpc"
	"github.com/sluicegw/sluice/internal/reasoning"
	"github.com/sluicegw/sluice/internal/tokenizer"
	"github.com/sluicegw/sluice/internal/toolcall"
)

// Engine is what the transport needs to know of a worker that speaks an engine's protocol.
type Engine struct {
	Protocol  enginegrpc.Protocol // SGLang, VLLM or TRTLLM
	Tokenizer *tokenizer.Tokenizer
	// ContextLength is the model's longest sequence, prompt plus output (GetModelInfo; 0 unknown). A
	// prompt that fills it is refused before any engine call.
	ContextLength int
	// EOS are the model's end-of-sequence ids (GetModelInfo's eos_token_ids): their text is not output.
	EOS []int
	// Model answers for "model" when the request has none.
	Model string
	// ReasoningParser and ToolCallParser name the model's parsers of chat answers (internal/reasoning,
	// internal/toolcall: --reasoning-parser, --tool-call-parser); "" is none.
	ReasoningParser, ToolCallParser string
}

type engineEntry struct {
	Engine
	client engineClient
}

// Transport is an http.RoundTripper for grpc:// workers registered with SetEngine; requests for any
// other worker go to the fallback (the sluice.worker.v1 transport). See the package doc.
type Transport struct {
	client   connect.HTTPClient
	fallback http.RoundTripper
	now      func() time.Time
	newID    func() string
	// abortTimeout bounds the Abort sent when a client goes away.
	abortTimeout time.Duration

	mu      sync.RWMutex
	engines map[string]*engineEntry // by "scheme://host:port"

	live enginebook.Book[*generation] // the migratable streams being read, for Interrupt (interrupt.go)

}

// Option configures a Transport.
type Option func(*Transport)

// WithClock sets the clock of the answers' "created".
func WithClock(now func() time.Time) Option { return func(t *Transport) { t.now = now } }

// WithIDSource sets the generator of request ids for requests without X-Request-Id.
func WithIDSource(newID func() string) Option { return func(t *Transport) { t.newID = newID } }

// NewTransport returns a transport that calls engines with client (HTTP/2: h2c for grpc://, TLS for
// grpcs://) and sends requests for other workers to fallback (nil: they fail).
func NewTransport(client connect.HTTPClient, fallback http.RoundTripper, opts ...Option) *Transport {
	t := &Transport{client: client, fallback: fallback, now: time.Now, newID: randomID,
		abortTimeout: 5 * time.Second, engines: map[string]*engineEntry{}}
	for _, o := range opts {
		o(t)
	}
	return t
}

func randomID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// engineKey and baseURL read a worker URL: grpc://host:port is served at http://host:port, grpcs://
// at https://.
func engineKey(u *url.URL) string { return u.Scheme + "://" + u.Host }

func baseURL(u *url.URL) (string, error) {
	switch u.Scheme {
	case "grpc":
		return "http://" + u.Host, nil
	case "grpcs":
		return "https://" + u.Host, nil
	}
	return "", fmt.Errorf("enginerpc: unsupported scheme %q", u.Scheme)
}

// clientOptions are the engine clients': gRPC, and no gzip offered for the answers. connect offers
// gzip by default and a Go engine (the simulator) then compresses every streamed chunk of a few
// bytes, which the gateway must inflate: that was most of the gateway's CPU per streamed token. The
// engines' own servers (grpcio) and the Rust gateway's client (tonic) use no compression either.
var clientOptions = connect.WithClientOptions(connect.WithGRPC(), connect.WithAcceptCompression("gzip", nil, nil))

// SetEngine registers the worker at workerURL (grpc://host:port or grpcs://) as an engine speaking
// e.Protocol; its requests are served by this transport from then on.
func (t *Transport) SetEngine(workerURL string, e Engine) error {
	u, err := url.Parse(workerURL)
	if err != nil {
		return err
	}
	base, err := baseURL(u)
	if err != nil {
		return err
	}
	if e.Tokenizer == nil {
		return errors.New("enginerpc: an engine worker needs its model's tokenizer")
	}
	if e.ReasoningParser != "" && !reasoning.Known(e.ReasoningParser) {
		return fmt.Errorf("enginerpc: unknown reasoning parser %q", e.ReasoningParser)
	}
	if e.ToolCallParser != "" && !toolcall.Known(e.ToolCallParser) {
		return fmt.Errorf("enginerpc: unknown tool-call parser %q", e.ToolCallParser)
	}
	entry := &engineEntry{Engine: e}
	switch e.Protocol {
	case enginegrpc.SGLang:
		entry.client = sglangClient{sglangpbconnect.NewSglangSchedulerClient(t.client, base, clientOptions),
			newGenCaller(t.client, base, sglangpbconnect.SglangSchedulerGenerateProcedure, sglangLayout)}
	case enginegrpc.VLLM:
		entry.client = vllmClient{vllmpbconnect.NewVllmEngineClient(t.client, base, clientOptions),
			newGenCaller(t.client, base, vllmpbconnect.VllmEngineGenerateProcedure, vllmLayout)}
	case enginegrpc.TRTLLM:
		entry.client = trtllmClient{trtllmpbconnect.NewTrtllmServiceClient(t.client, base, clientOptions), e.ContextLength}
	default:
		return fmt.Errorf("enginerpc: unknown engine protocol %q", e.Protocol)
	}
	t.mu.Lock()
	old := t.engines[engineKey(u)]
	t.engines[engineKey(u)] = entry
	t.mu.Unlock()
	if old != nil {
		old.client.closeIdle(true)
	}
	return nil
}

// RemoveEngine forgets the worker at workerURL.
func (t *Transport) RemoveEngine(workerURL string) {
	u, err := url.Parse(workerURL)
	if err != nil {
		return
	}
	t.mu.Lock()
	old := t.engines[engineKey(u)]
	delete(t.engines, engineKey(u))
	t.mu.Unlock()
	if old != nil {
		old.client.closeIdle(true)
	}
}

func (t *Transport) engine(u *url.URL) *engineEntry {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.engines[engineKey(u)]
}

// Fallback is the transport of workers not registered as engines.
func (t *Transport) Fallback() http.RoundTripper { return t.fallback }

// CloseIdleConnections closes the idle connections of the client and the fallback.
func (t *Transport) CloseIdleConnections() {
	t.mu.RLock()
	for _, e := range t.engines {
		e.client.closeIdle(false)
	}
	t.mu.RUnlock()
	if c, ok := t.client.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
	if c, ok := t.fallback.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	e := t.engine(req.URL)
	if e == nil {
		if t.fallback == nil {
			closeBody(req)
			return nil, fmt.Errorf("enginerpc: %s is not a registered engine", engineKey(req.URL))
		}
		return t.fallback.RoundTrip(req)
	}
	route, ok := body.RouteFromPath(req.URL.Path)
	if !ok || (route != body.RouteChat && route != body.RouteCompletions && route != body.RouteGenerate && route != body.RouteEmbeddings) {
		return t.passThrough(req)
	}
	raw, err := readBody(req)
	if err != nil {
		return nil, err
	}
	if route == body.RouteEmbeddings {
		return t.embed(req, e, raw)
	}
	if field, items := batchField(route, raw); field != "" {
		return t.batch(req, route, raw, field, items)
	}
	c, err := parseCall(route, raw, &e.Engine, givenPrompt(req.Context(), route, &e.Engine))
	if err != nil {
		var re *body.RequestError
		if errors.As(err, &re) {
			return errorResponse(req, http.StatusBadRequest, re.Message, "invalid_request_error", re.Param, "invalid_request_error"), nil
		}
		return nil, err
	}
	if err := refuseForProtocol(c, e.Protocol); err != nil {
		return errorResponse(req, http.StatusBadRequest, err.Message, "invalid_request_error", err.Param, "invalid_request_error"), nil
	}
	if e.ContextLength > 0 && len(c.ids) >= e.ContextLength {
		return contextExceeded(req, c, e.ContextLength), nil
	}
	c.requestID = req.Header.Get("X-Request-Id")
	if c.requestID == "" {
		c.requestID = t.newID()
	}
	m := &meta{id: c.requestID, created: t.now().Unix(), model: c.model, proto: e.Protocol, eos: e.EOS, tok: e.Tokenizer}
	switch route {
	case body.RouteChat:
		m.id = "chatcmpl-" + c.requestID
	case body.RouteCompletions:
		m.id = "cmpl-" + c.requestID
	}
	if rl := resumeOf(req.Context()); rl != nil { // a migrated stream's continuation (migrate.go)
		return t.resume(req, e, c, m, rl)
	}
	return t.run(req, e, c, m)
}

// readBody reads and closes the request's body, in one allocation when its length is known (a leg's
// always is) rather than io.ReadAll's doubling from 512 bytes.
func readBody(req *http.Request) ([]byte, error) {
	if req.Body == nil {
		return nil, nil
	}
	defer req.Body.Close()
	if n := req.ContentLength; n > 0 && n <= 1<<30 {
		raw := make([]byte, n+1) // a spare byte: a body that ends where it said ends short of it
		m, err := io.ReadFull(req.Body, raw)
		switch {
		case err == nil: // longer than it said: take the rest too, as io.ReadAll would
			rest, err := io.ReadAll(req.Body)
			return append(raw, rest...), err
		case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
			return raw[:m], nil
		default:
			return raw[:m], err
		}
	}
	return io.ReadAll(req.Body)
}

// contextExceeded is vLLM's 400 for a prompt that leaves no room in the model's context (ContextExceeded).
func contextExceeded(req *http.Request, c *call, limit int) *http.Response {
	param, msg := ContextExceeded(c.route, c.text != "", len(c.ids), limit)
	return errorResponse(req, http.StatusBadRequest, msg, "invalid_request_error", param, "context_length_exceeded")
}

// passThrough sends any other request (a gRPC call such as a health check made through an
// *http.Client with this transport) to the engine unchanged but for the scheme.
func (t *Transport) passThrough(req *http.Request) (*http.Response, error) {
	base, err := baseURL(req.URL)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	u, err := url.Parse(base + req.URL.RequestURI())
	if err != nil {
		closeBody(req)
		return nil, err
	}
	out := req.Clone(req.Context())
	out.URL, out.Host = u, ""
	return t.client.Do(out)
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// generation is one Generate call's lifetime. Its RPC runs on a context detached from the request's,
// so that when the client goes away (the request's context ends, or the body is closed) the engine is
// sent Abort before the RPC is cancelled, as the Rust gateway's abort-on-drop stream does: the engine
// learns of the end from the Abort rather than from a cancellation it may notice late.
type generation struct {
	t *Transport
	e *engineEntry
	c *call

	ctx       context.Context
	cancel    context.CancelFunc
	rpc       context.Context         // the Generate RPC's: ctx's, and cut alone by interrupt
	rpcCancel context.CancelCauseFunc // (a drain: the request goes on)
	drained   atomic.Bool
	once      sync.Once
	completed atomic.Bool // the Complete arrived: nothing to abort
	stopWatch func() bool
	watchDone chan struct{}
}

func (t *Transport) start(req *http.Request, e *engineEntry, c *call) *generation {
	g := &generation{t: t, e: e, c: c, watchDone: make(chan struct{})}
	g.ctx, g.cancel = context.WithCancel(context.WithoutCancel(req.Context()))
	g.rpc, g.rpcCancel = context.WithCancelCause(g.ctx)
	g.stopWatch = context.AfterFunc(req.Context(), func() {
		defer close(g.watchDone)
		g.stop()
	})
	return g
}

// abort sends Abort once, unless the generation completed, bounded by abortTimeout; its failure
// changes nothing for the client.
func (g *generation) abort() {
	if g.completed.Load() {
		return
	}
	g.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(g.ctx), g.t.abortTimeout)
		defer cancel()
		_ = g.e.client.abort(ctx, g.c.requestID)
	})
}

// stop aborts the generation (unless it completed) and then cancels its RPC.
func (g *generation) stop() {
	g.abort()
	g.cancel()
}

// end cancels the RPC and, if the request-context watch fired, waits for it: after end returns no
// goroutine of the generation is left.
func (g *generation) end() {
	if !g.stopWatch() {
		<-g.watchDone
	}
	g.rpcCancel(nil)
	g.cancel()
}

// run calls Generate and answers once the engine has sent its first message, as an HTTP engine
// answers once it has started: an error before that is an error status.
func (t *Transport) run(req *http.Request, e *engineEntry, c *call, m *meta) (*http.Response, error) {
	g, st, first, resp, err := t.begin(req, e, c, nil)
	if g == nil {
		return resp, err
	}
	ss := newSamples(e.Tokenizer, c, e.client.cumulativeCounts())
	if !c.stream {
		defer g.end()
		defer st.Close()
		return t.whole(req, g, st, ss, first, m)
	}
	w := &sseWriter{g: g, c: c, m: m, ss: ss, engine: engineKey(req.URL), first: st, st: st, ev: first, pending: true}
	return streamResponse(req, &streamBody{w: w}), nil
}

// begin calls Generate and waits for the engine's first message (adjusted by adjust when not nil). A
// nil generation means the answer is already resp, err and the generation has ended: the call failed
// before that message, or the engine aborted it before generating anything, which is answered as the
// engine's HTTP server does, with an error status dispatch may retry, not a 200 with an empty answer.
func (t *Transport) begin(req *http.Request, e *engineEntry, c *call, adjust func(event) event) (*generation, genStream, event, *http.Response, error) {
	g := t.start(req, e, c)
	st, err := e.client.generate(g.rpc, c)
	if err != nil {
		resp, ferr := t.failed(req, g, err)
		g.end()
		return nil, nil, event{}, resp, ferr
	}
	if !st.Receive() {
		err := st.Err()
		st.Close()
		if err == nil {
			err = errNoAnswer
		}
		resp, ferr := t.failed(req, g, err)
		g.end()
		return nil, nil, event{}, resp, ferr
	}
	first := st.event()
	if adjust != nil {
		first = adjust(first)
	}
	if first.aborted() {
		st.Close()
		g.completed.Store(true)
		g.end()
		return nil, nil, event{}, abortedResponse(req), nil
	}
	return g, st, first, nil, nil
}

// whole reads a unary call's events until every sample's Complete and answers them.
func (t *Transport) whole(req *http.Request, g *generation, st genStream, ss *samples, ev event, m *meta) (*http.Response, error) {
	c := g.c
	for {
		if _, _, err := ss.add(ev); err != nil {
			g.abort()
			return errorResponse(req, http.StatusBadGateway, err.Error(), "server_error", "", "bad_gateway"), nil
		}
		if ev.aborted() {
			// One sample aborted is the request aborted (SGLang's tokenizer manager raises on it).
			g.completed.Store(ss.done())
			g.abort()
			return abortedResponse(req), nil
		}
		if ss.done() {
			g.completed.Store(true)
			break
		}
		if !st.Receive() {
			err := st.Err()
			if err == nil {
				err = errNoAnswer
			}
			return t.failed(req, g, err)
		}
		ev = st.event()
	}
	if c.echo && c.lp.output && ss.inLPs() == nil {
		re := errNoPromptLogprobs
		return errorResponse(req, http.StatusBadRequest, re.Message, "invalid_request_error", re.Param, "invalid_request_error"), nil
	}
	for _, s := range ss.all {
		if s.inLPs == nil {
			s.inLPs = ss.inLPs()
		}
	}
	return jsonResponse(req, http.StatusOK, renderWhole(c, m, ss)), nil
}

// abortedResponse answers a generation the engine aborted on its own (its Complete says "abort": a PD
// leg whose peer failed, a scheduler that shed it) as SGLang's HTTP server does a non-client abort: a
// 503 the gateway may retry, never a 200 with an empty answer.
func abortedResponse(req *http.Request) *http.Response {
	return errorResponse(req, http.StatusServiceUnavailable, "the engine aborted the request", "server_error", "", "engine_aborted")
}

var errNoAnswer = errors.New("the engine ended the Generate stream without a result")

// failed answers a Generate that failed before its end: an error the engine sent is an HTTP error
// status; anything else (the engine unreachable, the request's context ended) is returned as an
// error, as any transport does, after an Abort when the client went away.
func (t *Transport) failed(req *http.Request, g *generation, err error) (*http.Response, error) {
	if req.Context().Err() != nil {
		g.abort()
		return nil, fmt.Errorf("enginerpc: %w", req.Context().Err())
	}
	if errors.Is(err, errNoAnswer) {
		return errorResponse(req, http.StatusBadGateway, err.Error(), "server_error", "", "bad_gateway"), nil
	}
	if !connect.IsWireError(err) {
		return nil, fmt.Errorf("enginerpc: %s engine: %w", g.e.Protocol, err)
	}
	code := connect.CodeOf(err)
	status, typ := statusForCode(code)
	return errorResponse(req, status, connectMessage(err), typ, "", code.String()), nil
}

// sseWriter renders the SSE body from the Generate stream, on the goroutine that reads the body: each
// Read of an empty buffer reads the stream until it has something to give, as the relay reads an HTTP
// engine's body on its own goroutine. A writer goroutine handing frames to the reader cost two
// goroutine switches a frame (issue #35, docs/benchmarks.md).
type sseWriter struct {
	g   *generation
	c   *call
	m   *meta
	ss  *samples
	buf []byte // rendered, buf[off:] not yet read
	off int
	// engine is the engine of the first stream; mig the continuation read since a migration (migrate.go).
	engine string
	mig    migration
	// untrack forgets the stream read now in the transport's live streams (track).
	untrack func()

	first   genStream // g's stream: closed at the end, a continuation's by endContinuation
	st      genStream // the stream read now: first, or a continuation's
	ev      event     // the event read last
	pending bool      // ev is not rendered yet
	opened  bool      // the stream is tracked and a chat's roles are out
	over    bool      // the generation ended: what is in buf is the last of the body
	endErr  error     // the body's end once buf is read: io.EOF, or why it ended abnormally
}

func (w *sseWriter) chunk(s *sample, d delta, first, final bool) {
	w.buf = append(w.buf, "data: "...)
	w.buf = appendChunk(w.buf, w.c, w.m, s, d, first, final)
	w.buf = append(w.buf, "\n\n"...)
}

// fill renders chunks into the empty buffer until it holds some or the body is over: up to the
// Complete, then the usage chunk and [DONE]. A stream that breaks off continues on another pair when
// it may (migrate.go).
func (w *sseWriter) fill() {
	if !w.opened {
		w.opened = true
		w.track()
		if w.c.route == body.RouteChat { // a chat stream opens with the role of each choice, as vLLM's does
			for _, s := range w.ss.all {
				w.chunk(s, delta{}, true, false)
			}
			return
		}
	}
	for !w.over && (len(w.buf) == 0 || len(w.buf) < sseCoalesceBytes && w.ready()) {
		if !w.pending && !w.receive() {
			return
		}
		w.pending = false
		ev := w.ev
		if ev.aborted() { // the engine gave up mid-stream: continue elsewhere if the request may
			if next, first, ok := w.migrate(errEngineAborted, w.engine); ok {
				w.continueWith(next, first)
				continue
			}
		}
		s, d, err := w.ss.add(ev)
		if err != nil {
			w.errorEvent(err.Error(), "server_error", "bad_gateway")
			w.end(nil)
			return
		}
		switch {
		case ev.complete && w.ss.done():
			w.finish(s, d)
			w.end(nil)
		case ev.complete:
			w.chunk(s, d, false, true)
		case !d.empty() || w.c.route == body.RouteGenerate:
			w.chunk(s, d, false, false)
		}
	}
}

// sseCoalesceBytes bounds what one Read renders of events that came together.
const sseCoalesceBytes = 16 << 10

// ready says whether the next event can be had without waiting for the engine: events that arrived
// together are rendered together, and the relay writes and flushes them once, as it does an HTTP
// engine's frames that wait in the socket.
func (w *sseWriter) ready() bool {
	if w.pending {
		return true
	}
	r, ok := w.st.(interface{ ready() bool })
	return ok && r.ready()
}

// receive reads the next event into ev; false when the stream broke off and did not migrate (the
// body is then over).
func (w *sseWriter) receive() bool {
	if w.st.Receive() {
		w.ev = w.st.event()
		return true
	}
	err := w.brokeOff(w.st.Err())
	if next, first, ok := w.migrate(err, w.engine); ok { // continued on another pair
		w.continueWith(next, first)
		return true
	}
	w.end(w.brokenOff(err))
	return false
}

// continueWith reads st from now on, first its first event: the stream continues on another pair.
func (w *sseWriter) continueWith(st genStream, first event) {
	w.st, w.ev, w.pending = st, first, true
	w.track()
}

// end ends the generation: without the Complete the client went away, the body was closed or the
// engine broke off, and the engine must not go on computing for nobody. The body ends with err
// (nil: io.EOF) once buf is read.
func (w *sseWriter) end(err error) {
	if w.over {
		return
	}
	if w.untrack != nil {
		w.untrack()
		w.untrack = nil
	}
	w.endContinuation(w.g.completed.Load())
	w.g.abort()
	w.first.Close()
	w.g.end()
	if err == nil {
		err = io.EOF
	}
	w.over, w.endErr = true, err
}

// finish writes the last sample's final chunk, the usage chunk and [DONE]: the generation completed.
func (w *sseWriter) finish(s *sample, d delta) {
	w.g.completed.Store(true)
	w.chunk(s, d, false, true)
	if w.c.includeUsage && w.c.route != body.RouteGenerate {
		w.buf = append(w.buf, "data: "...)
		w.buf = appendUsageChunk(w.buf, w.c, w.m, w.ss)
		w.buf = append(w.buf, "\n\n"...)
	}
	w.buf = append(w.buf, "data: [DONE]\n\n"...)
}

// brokenOff is how a stream that broke off with err and did not migrate ends: an error event for
// the engine's error (nil returned: the body then ends cleanly), or err itself (the body ends
// abnormally) when the connection went.
func (w *sseWriter) brokenOff(err error) error {
	switch {
	case err == nil:
		w.errorEvent(errNoAnswer.Error(), "server_error", "bad_gateway")
	case connect.IsWireError(err) && connect.CodeOf(err) != connect.CodeCanceled:
		_, typ := statusForCode(connect.CodeOf(err))
		w.errorEvent(connectMessage(err), typ, connect.CodeOf(err).String())
	default:
		return fmt.Errorf("enginerpc: %w", err)
	}
	return nil
}

// errorEvent is an error after the head of a stream: an error event then [DONE], as vLLM streams one.
func (w *sseWriter) errorEvent(message, typ, code string) {
	w.buf = append(w.buf, "data: "...)
	w.buf = appendErrorBody(w.buf, message, typ, "", code)
	w.buf = append(w.buf, "\n\ndata: [DONE]\n\n"...)
}

// streamBody is the SSE body. Close aborts and cancels the Generate unless it completed; it may come
// from another goroutine while a Read waits for the engine, which the cancel ends.
type streamBody struct {
	w      *sseWriter
	mu     sync.Mutex // held by a Read, and by Close to end the generation after it
	closed bool
	once   sync.Once
}

func (b *streamBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.w
	for w.off == len(w.buf) {
		switch {
		case b.closed:
			return 0, errBodyClosed
		case w.over:
			return 0, w.endErr
		}
		if w.buf == nil {
			w.buf = *sseBufs.Get().(*[]byte)
		}
		w.buf, w.off = w.buf[:0], 0
		w.fill()
	}
	n := copy(p, w.buf[w.off:])
	w.off += n
	return n, nil
}

func (b *streamBody) Close() error {
	b.once.Do(b.w.g.stop)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.w.end(errBodyClosed)
	b.closed = true
	if buf := b.w.buf; cap(buf) <= sseKeepBytes {
		b.w.buf, b.w.off = nil, 0
		sseBufs.Put(&buf)
	}
	return nil
}

// sseBufs are the streams' render buffers: events that come together are rendered together, up to
// sseCoalesceBytes, and a buffer grown to that size for each stream was most of what a gRPC stream
// allocated (an alloc_space profile: 18 kB a 51-token stream) once the engine's transport delivered
// its messages together.
var sseBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

// sseKeepBytes is the largest buffer put back: one that grew for a large event is left to the GC.
const sseKeepBytes = 2 * sseCoalesceBytes

var errBodyClosed = errors.New("enginerpc: response body closed")

func streamResponse(req *http.Request, b io.ReadCloser) *http.Response {
	return &http.Response{
		Status: "200 OK", StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"text/event-stream"}, "Cache-Control": {"no-cache"}},
		Body:          b,
		ContentLength: -1,
		Request:       req,
	}
}

// statusLine is a response's Status; an OK costs no allocation.
func statusLine(status int) string {
	if status == http.StatusOK {
		return "200 OK"
	}
	return strconv.Itoa(status) + " " + http.StatusText(status)
}

func jsonResponse(req *http.Request, status int, b []byte) *http.Response {
	return &http.Response{
		Status:     statusLine(status),
		StatusCode: status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/json"}},
		Body:          io.NopCloser(bytes.NewReader(b)),
		ContentLength: int64(len(b)),
		Request:       req,
	}
}

func errorResponse(req *http.Request, status int, message, typ, param, code string) *http.Response {
	return jsonResponse(req, status, appendErrorBody(nil, message, typ, param, code))
}

func connectMessage(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) && ce.Message() != "" {
		return ce.Message()
	}
	return err.Error()
}

// statusForCode maps an engine's gRPC code to the status its HTTP server would have answered, and
// OpenAI's error type.
func statusForCode(code connect.Code) (int, string) {
	switch code {
	case connect.CodeInvalidArgument, connect.CodeOutOfRange, connect.CodeFailedPrecondition:
		return http.StatusBadRequest, "invalid_request_error"
	case connect.CodeNotFound:
		return http.StatusNotFound, "not_found_error"
	case connect.CodeResourceExhausted:
		return http.StatusTooManyRequests, "rate_limit_error"
	case connect.CodeUnavailable:
		return http.StatusServiceUnavailable, "server_error"
	case connect.CodeDeadlineExceeded:
		return http.StatusGatewayTimeout, "server_error"
	case connect.CodeUnimplemented:
		return http.StatusNotImplemented, "server_error"
	}
	return http.StatusInternalServerError, "server_error"
}
