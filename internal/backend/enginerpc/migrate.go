package enginerpc

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"

	"github.com/sluicegw/sluice/internal/backend/body"
)

// Mid-stream migration (docs/migration.md). A streamed PD answer whose decode engine breaks off after
// the client got its head (the RPC fails UNAVAILABLE, ABORTED or with a reset, the stream ends without
// a Complete, or the engine aborts it on its own) is continued on another pair instead of ending with
// an error frame: the gateway holds the prompt's ids and every id generated, so prompt + generated
// becomes the prompt of a new PD handshake (the prefill computes the whole prefix, the decode goes on),
// with max_tokens and min_tokens reduced by what was produced and the same sampling parameters. The
// sseWriter keeps its sample (detokenizer, stop matcher, parsers) and reads the new Generate stream as
// if it were the old one, so the client sees one stream.
//
// dispatch owns admission and placement: it puts a Migrator in the request's context (WithMigrator);
// the writer asks it for a continuation, and dispatch runs a new PD attempt whose legs carry the
// Resume (WithResume). The transport serves the continuation's prefill leg like any other (on the
// longer prompt) and, instead of rendering its decode leg, hands the Generate stream over through the
// Resume, answering dispatch a 200 whose body only ends the generation when closed. The writer closes
// that body (dispatch's Response, so every guard of the continuation is released) when it moves on or
// when the client's stream ends.

// Resume is a generation to continue on another pair.
type Resume struct {
	// IDs is the continuation's prompt: the client's prompt ids, then every id generated so far.
	IDs []uint32
	// Produced is how many of IDs were generated.
	Produced int
	// Failed is the engine (scheme://host:port) whose stream broke off.
	Failed string
	// Reason says how it broke off (the Reason* constants).
	Reason string

	got atomic.Pointer[handover]
}

// The reasons a stream migrates, sluice_migrations_total's reason label.
const (
	ReasonUnavailable = "unavailable"  // the RPC failed UNAVAILABLE (the engine went away)
	ReasonAborted     = "aborted"      // the RPC failed ABORTED
	ReasonReset       = "reset"        // the stream was reset (INTERNAL, UNKNOWN, CANCELED: a connection dropped)
	ReasonNoComplete  = "no_complete"  // the stream ended without a Complete
	ReasonEngineAbort = "engine_abort" // the engine's own "abort" finish
)

// A Migrator continues a broken generation: it runs a new PD attempt whose legs carry r (WithResume)
// and returns what ends the continuation (its response body: closing it releases its guards). It
// returns ErrNoMigration when the request may not migrate (again); any other error is a failed try,
// which also counts against the bound, and the writer asks again.
type Migrator func(ctx context.Context, r *Resume) (io.Closer, error)

// ErrNoMigration: the request's migrations are spent (or it may not migrate at all).
var ErrNoMigration = errors.New("enginerpc: no migration left")

type migratorKey struct{}

// WithMigrator returns ctx carrying the request's migrator.
func WithMigrator(ctx context.Context, m Migrator) context.Context {
	return context.WithValue(ctx, migratorKey{}, m)
}

type resumeKey struct{}

// resumeLeg is a continuation's leg marker: the Resume and the continuation's prefill engine.
type resumeLeg struct {
	r       *Resume
	prefill string
}

// WithResume marks the legs of r's continuation, whose prefill worker is prefillURL: the transport
// sends them the longer prompt and hands the decode's stream over to r.
func WithResume(ctx context.Context, r *Resume, prefillURL string) context.Context {
	return context.WithValue(ctx, resumeKey{}, &resumeLeg{r: r, prefill: EngineKey(prefillURL)})
}

// Retry forgets what a failed try of r's continuation handed over, before the next try.
func (r *Resume) Retry() { r.got.Store(nil) }

// Continued reports whether the transport handed a continuation's stream over to r.
func (r *Resume) Continued() bool { return r.got.Load() != nil }

// EngineKey is the engine a worker URL names (scheme://host:port), as Resume.Failed names it.
func EngineKey(workerURL string) string {
	u, err := url.Parse(workerURL)
	if err != nil {
		return workerURL
	}
	return engineKey(u)
}

func resumeOf(ctx context.Context) *resumeLeg {
	rl, _ := ctx.Value(resumeKey{}).(*resumeLeg)
	return rl
}

// resume serves a continuation's leg: the prefill leg runs as usual on the longer prompt; the decode
// leg's stream is handed over.
func (t *Transport) resume(req *http.Request, e *engineEntry, c *call, m *meta, rl *resumeLeg) (*http.Response, error) {
	c.ids = rl.r.IDs
	c.echo = false
	if !c.wantKVBack { // vLLM's prefill leg keeps its one-token cap
		c.maxTokens, c.minTokens = remaining(c.maxTokens, c.minTokens, rl.r.Produced)
	}
	if e.ContextLength > 0 && len(c.ids) >= e.ContextLength {
		return contextExceeded(req, c, e.ContextLength), nil
	}
	if engineKey(req.URL) == rl.prefill || !c.stream {
		return t.run(req, e, c, m)
	}
	return t.handOver(req, e, c, rl.r)
}

// remaining is a continuation's max_tokens and min_tokens: the request's less what was produced.
func remaining(maxTokens *int, minTokens uint32, produced int) (*int, uint32) {
	if maxTokens != nil {
		left := max(*maxTokens-produced, 0)
		maxTokens = &left
	}
	if int(minTokens) <= produced {
		return maxTokens, 0
	}
	return maxTokens, minTokens - uint32(produced)
}

// handOver starts the continuation's Generate and, once the engine sent its first message (an error
// before that is an error status dispatch may retry, as in run), hands the stream to r.
func (t *Transport) handOver(req *http.Request, e *engineEntry, c *call, r *Resume) (*http.Response, error) {
	rs := &resumedStream{cumulative: e.client.cumulativeCounts(), base: uint32(r.Produced)}
	g, st, first, resp, err := t.begin(req, e, c, rs.adjust)
	if g == nil {
		return resp, err
	}
	rs.genStream = st
	h := &handover{g: g, st: rs, engine: engineKey(req.URL)}
	h.first = rs.split(first)
	r.got.Store(h)
	return streamResponse(req, h), nil
}

// handover is a continuation's Generate, handed to the writer of the stream it continues. As a
// response body it has nothing to read; closing it ends the generation (an Abort unless it completed).
type handover struct {
	g      *generation
	st     *resumedStream
	first  event
	engine string
	once   sync.Once
}

func (h *handover) Read([]byte) (int, error) { return 0, io.EOF }

func (h *handover) Close() error {
	h.once.Do(func() {
		h.g.stop()
		h.st.Close()
		h.g.end()
	})
	return nil
}

// resumedStream is a continuation's Generate stream as the writer's sample expects the rest of its
// own: the counts continue the first stream's (the prompt and cached tokens are the client's, the
// completion goes on from what was produced), and a Complete that comes without a chunk before it
// (the continuation's first message) gives its ids as a chunk first, since the sample drops a streamed
// Complete's ids once it has seen chunks.
type resumedStream struct {
	genStream
	cumulative bool   // SGLang: the chunks' counts are totals so far
	base       uint32 // tokens produced before the continuation
	chunks     int
	cur        event
	pending    *event
}

func (s *resumedStream) Receive() bool {
	if s.pending != nil {
		s.cur, s.pending = *s.pending, nil
		return true
	}
	if !s.genStream.Receive() {
		return false
	}
	s.cur = s.split(s.adjust(s.genStream.event()))
	return true
}

func (s *resumedStream) event() event { return s.cur }

func (s *resumedStream) adjust(ev event) event {
	ev.prompt, ev.cached, ev.inLP = 0, 0, nil // the client's prompt is counted once, by the first stream
	if s.cumulative {
		ev.completion += s.base
	}
	return ev
}

// split returns ev, or for a Complete with ids before any chunk its ids as a chunk (the Complete
// itself then comes next).
func (s *resumedStream) split(ev event) event {
	if !ev.complete {
		s.chunks++
		return ev
	}
	if s.chunks > 0 || len(ev.ids) == 0 || ev.aborted() {
		return ev
	}
	s.chunks++
	done := ev
	s.pending = &done
	return event{ids: ev.ids, outLP: ev.outLP, index: ev.index, completion: ev.completion}
}

// endedStream is a stream with nothing more to read: the writer's answer was complete.
type endedStream struct{}

func (endedStream) Receive() bool { return false }
func (endedStream) Err() error    { return nil }
func (endedStream) Close() error  { return nil }
func (endedStream) event() event  { return event{} }

// migration is a stream writer's continuations: the one it reads now and the engine serving it.
type migration struct {
	cur    *handover
	closer io.Closer // the continuation's dispatch response
}

// migrationReason is why a stream that ended with cause (nil: without a Complete) may migrate, or ""
// when it may not (the client went away, the engine refused something).
func migrationReason(cause error) string {
	if cause == nil {
		return ReasonNoComplete
	}
	if errors.Is(cause, errDrained) {
		return ReasonDrain
	}
	if errors.Is(cause, errEngineAborted) {
		return ReasonEngineAbort
	}
	switch connect.CodeOf(cause) {
	case connect.CodeUnavailable:
		return ReasonUnavailable
	case connect.CodeAborted:
		return ReasonAborted
	case connect.CodeInternal, connect.CodeUnknown, connect.CodeCanceled:
		// Canceled too: connect reports a connection reset by the engine's host so, and the writer
		// has already ruled out the client's own cancellation (its context is live).
		return ReasonReset
	}
	return ""
}

// errEngineAborted is the engine's own "abort" finish in the middle of a stream.
var errEngineAborted = errors.New("the engine aborted the request")

// migratable reports a call whose state the writer can carry to another engine: one sample, no
// structured-output constraint (the grammar's state is the engine's), no logprobs.
func (w *sseWriter) migratable() bool {
	c := w.c
	return c.n == 1 && c.constraint == nil && !c.lp.output && !c.wantKVBack && streamable(c.route)
}

// migrate continues the stream on another pair when it broke off with cause for a reason that
// migrates: it returns the new stream and its first event, or false to end the stream as before.
// engine is the engine whose stream broke off when it was the first one.
func (w *sseWriter) migrate(cause error, engine string) (genStream, event, bool) {
	mig, _ := w.g.ctx.Value(migratorKey{}).(Migrator)
	reason := migrationReason(cause)
	if mig == nil || reason == "" || w.g.ctx.Err() != nil || !w.migratable() || len(w.ss.all) != 1 {
		return nil, event{}, false
	}
	s := w.ss.all[0]
	if s.complete {
		return nil, event{}, false
	}
	if s.m.Result().Reason != "" || w.c.maxTokens != nil && produced(s) >= *w.c.maxTokens {
		// Everything was generated (the gateway's stop matcher ended the answer, or max_tokens was
		// reached) and only the engine's Complete was lost: finish here rather than generate again.
		return endedStream{}, event{complete: true, finish: "length", completion: uint32(produced(s))}, true
	}
	if w.mig.cur != nil {
		engine = w.mig.cur.engine
	} else if reason == ReasonDrain {
		w.g.abort() // the drained engine is alive: it must not go on generating for nobody
	}
	w.endContinuation(false)
	for {
		r := &Resume{IDs: append(slices.Clip(w.c.ids), s.ids...), Produced: produced(s), Failed: engine, Reason: reason}
		closer, err := mig(w.g.ctx, r)
		if err != nil {
			if errors.Is(err, ErrNoMigration) || w.g.ctx.Err() != nil {
				return nil, event{}, false
			}
			continue // a failed try counts against the bound: the migrator says when it is spent
		}
		h := r.got.Load()
		if h == nil { // not an engine-gRPC decode: nothing to continue with
			closer.Close()
			return nil, event{}, false
		}
		w.mig = migration{cur: h, closer: closer}
		return h.st, h.first, true
	}
}

// produced is how many tokens s's engine generated: its own count (a token may be several ids, as
// the simulator's byte ids are), else the ids.
func produced(s *sample) int {
	if s.completion > 0 {
		return int(s.completion)
	}
	return len(s.ids)
}

// endContinuation closes the continuation being read, if any, releasing its guards; completed says
// its generation completed (no Abort is due).
func (w *sseWriter) endContinuation(completed bool) {
	if w.mig.cur == nil {
		return
	}
	if completed {
		w.mig.cur.g.completed.Store(true)
	}
	w.mig.closer.Close()
	w.mig = migration{}
}

// streamable reports whether a route's stream can be continued (chat, completions, /generate).
func streamable(route body.Route) bool {
	return route == body.RouteChat || route == body.RouteCompletions || route == body.RouteGenerate
}
