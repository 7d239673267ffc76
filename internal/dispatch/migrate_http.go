package dispatch

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/backend/enginerpc"
	"github.com/sluicegw/sluice/internal/enginebook"
	"github.com/sluicegw/sluice/internal/worker"
)

// Mid-stream migration in HTTP mode (docs/migration.md). It applies where the engine's HTTP stream
// gives the generated ids, so the gateway holds prompt + generated without tokenizing anything:
//   - SGLang's /generate with a token-id prompt (input_ids): output_ids in every chunk
//     (migrate_http_generate.go);
//   - OpenAI completions on vLLM and SGLang: the gateway asks for return_token_ids and takes the
//     prompt's ids from the first chunk and each chunk's token_ids (migrate_http_completions.go);
//   - OpenAI chat on vLLM: the same ids, continued as a completion whose chunks are rewritten as
//     chat chunks (migrate_http_chat.go).
//
// When the decode's stream breaks off, the gateway sends prompt + generated as the prompt of a new
// request with the token budget reduced (a new PD handshake, the same sampling parameters) and reads
// the continuation's stream as the rest of the first: the API's state rewrites its frames into the
// request's (ids, counts, usage). The reader does it in the relay's goroutine (Read), one
// continuation at a time.

// httpStreamAPI is one API's part of a migratable stream: it reads each frame into the
// generation's state, rewrites a continuation's frames as the request's, and makes the body of the
// next continuation.
type httpStreamAPI interface {
	// serves says whether a stream of a worker speaking p can migrate (and takes p's defaults).
	serves(p worker.Protocol) bool
	// frame takes one data payload other than [DONE], appends what to pass on (the payload, or its
	// rewriting) to dst, and says whether the stream is over (a finish or an error: nothing to
	// continue). The first stream's frames are on every answer's path: read them cheaply.
	frame(dst, payload []byte) (out []byte, ended bool)
	// finished says, when the stream broke off before [DONE], whether the generation had ended.
	finished() bool
	// generated is how many tokens the client has of the generation.
	generated() int
	// movable says whether the stream could go on elsewhere from what has been read: a drain cuts
	// only such streams, and leaves the others to end on the draining engine.
	movable() bool
	// continuation is the body that goes on after what was generated, false when the request's token
	// budget is spent; the frames read next are the continuation's.
	continuation() (ids []uint32, b []byte, ok bool)
	// lengthFinish appends the frames that end the stream as the engine would have, when the
	// request's token budget is spent: the stream broke off after its last token and before the
	// chunk that finishes it. False when tokens are left to generate.
	lengthFinish(dst []byte) ([]byte, bool)
	// closing appends the frames that end the stream as the engine would have, when it broke off
	// after the generation ended (a finish or an error chunk went out) and before [DONE].
	closing(dst []byte) []byte
}

// rerouted is an API whose continuations go to another route than the request's: a chat goes on as
// a completion of its token ids.
type rerouted interface {
	continuationRoute() body.Route
}

// httpMigration wraps a streamed answer of an HTTP worker whose stream may migrate, or returns it as
// it is. api is the state the request's preparation made (prepareHTTPMigration); interrupt cuts the
// attempt's context (a drain).
func (x *Dispatcher) httpMigration(ctx context.Context, q *prepared, resp *Response, interrupt context.CancelCauseFunc) *Response {
	m := migratorOf(ctx)
	if m == nil || m.http == nil || !resp.Stream || !strings.HasPrefix(resp.Worker, "http") {
		return resp
	}
	if w, ok := x.d.Registry.Snapshot().ByURL(resp.Worker); !ok || !m.http.api.serves(w.Protocol()) {
		return resp
	}
	s := &migratingStream{ctx: ctx, m: m, api: m.http.api, first: resp.Body, cur: resp.Body, live: &x.live}
	s.reading(enginerpc.EngineKey(resp.Worker), interrupt)
	resp.Body = s
	return resp
}

// httpPlan is what prepareHTTPMigration found: the API state of a stream that may migrate when its
// worker speaks a protocol the API serves.
type httpPlan struct {
	api httpStreamAPI
}

// prepareHTTPMigration makes the migration state of a request whose HTTP stream can migrate, and
// returns the body to send: completions, and chats when vLLM serves some over HTTP, ask for the token
// ids the migration needs.
func (x *Dispatcher) prepareHTTPMigration(br *body.Request) (*httpPlan, *body.Request) {
	if br.BatchSize > 1 {
		return nil, br
	}
	switch br.Route {
	case body.RouteChat: // the rendered prompt's ids come with the first chunk (prompt_token_ids)
		if !x.servesVLLMOverHTTP() {
			return nil, br
		}
		if cm, ok := checkChatMigration(br.Body); ok {
			return askingIDs(br, &cm.idStream, cm)
		}
	case body.RouteGenerate:
		if br.PromptTokenIDs > 0 {
			return &httpPlan{api: &generateMigration{raw: br.Body}}, br
		}
		// A text prompt: SGLang's stream does not give its ids, so the gateway tokenizes it (at a
		// migration only), when it has the model's tokenizer.
		if x.d.Tokenizer != nil {
			if tk := x.d.Tokenizer(br.Model); tk != nil {
				return &httpPlan{api: &generateMigration{raw: br.Body, tok: tk}}, br
			}
		}
	case body.RouteCompletions: // a text prompt's ids come with the first chunk (prompt_token_ids)
		if cm, ok := checkCompletionMigration(br.Body); ok {
			return askingIDs(br, &cm.idStream, cm)
		}
	}
	return nil, br
}

// askingIDs is the plan of a stream of api whose engine must be asked for its token ids (s), and the
// request with the body that asks.
func askingIDs(br *body.Request, s *idStream, api httpStreamAPI) (*httpPlan, *body.Request) {
	b, err := s.engineBody()
	if err != nil {
		return nil, br
	}
	out := *br
	out.Body = b
	return &httpPlan{api: api}, &out
}

// migratingStream is the client's body of a migratable HTTP stream.
type migratingStream struct {
	ctx    context.Context
	m      *migrator
	api    httpStreamAPI
	first  io.ReadCloser   // the first attempt's body: closed last, it ends the request
	cur    io.ReadCloser   // the body read now: first, or the latest continuation's
	conts  []io.ReadCloser // the continuations' bodies, closed when left or at the end
	engine string          // the engine serving cur (scheme://host:port)

	live    *enginebook.Book[*migratingStream]
	mu      sync.Mutex              // guards stop and untrack against a drain (interrupt)
	stop    context.CancelCauseFunc // cuts cur's attempt
	untrack func()
	drained atomic.Bool // a drain cut cur
	movable atomic.Bool // api.movable after the frames read so far, for a drain

	in     []byte // read from cur, not yet a whole frame
	out    []byte // for the client, from outPos on
	outPos int
	ended  bool // [DONE], a finish or an error chunk went out: nothing to continue
	done   bool // [DONE] went out
	err    error
}

var errStreamEnded = errors.New("the engine's stream ended without finishing")

func (s *migratingStream) Read(p []byte) (int, error) {
	for s.outPos == len(s.out) {
		if s.err != nil {
			return 0, s.err
		}
		s.out, s.outPos = s.out[:0], 0
		s.fill()
	}
	n := copy(p, s.out[s.outPos:])
	s.outPos += n
	return n, nil
}

// fill reads the current body, passes its whole frames on (rewritten in a continuation), and
// migrates when it breaks off.
func (s *migratingStream) fill() {
	if cap(s.in)-len(s.in) < 1<<10 {
		s.in = slices.Grow(s.in, 4<<10) // an engine's stream comes a chunk or a few at a time
	}
	n, err := s.cur.Read(s.in[len(s.in):cap(s.in)])
	s.in = s.in[:len(s.in)+n]
	off := 0
	for {
		i := bytes.Index(s.in[off:], []byte("\n\n"))
		if i < 0 {
			break
		}
		s.frame(s.in[off : off+i+2])
		off += i + 2
	}
	s.in = s.in[:copy(s.in, s.in[off:])] // the partial frame, kept at the buffer's start
	if off > 0 {
		s.movable.Store(!s.ended && s.api.movable())
	}
	if err == nil {
		return
	}
	s.ended = s.ended || s.api.finished()
	if s.ended {
		// Nothing was left to generate: a break after the finish loses only what follows it, which
		// the gateway writes as the engine would have, rather than an error after a whole answer.
		if !s.done {
			s.out, s.in = s.api.closing(s.out), s.in[:0] // a partial frame would be garbage
		}
		s.err = io.EOF
		return
	}
	if errors.Is(err, io.EOF) {
		err = errStreamEnded
	}
	if s.drained.Swap(false) {
		err = errDrained
	}
	if !s.migrate(err) {
		s.out = append(s.out, s.in...)
		s.in = s.in[:0]
		s.err = err
	}
}

// frame passes one SSE frame on, after the API's state has taken it.
func (s *migratingStream) frame(f []byte) {
	payload, ok := bytes.CutPrefix(bytes.TrimSpace(f), []byte("data: "))
	if !ok || bytes.Equal(payload, []byte("[DONE]")) {
		s.ended = s.ended || ok
		s.done = s.done || ok
		s.out = append(s.out, f...)
		return
	}
	var ended bool
	s.out, ended = s.api.frame(append(s.out, "data: "...), payload)
	s.out = append(s.out, "\n\n"...)
	s.ended = s.ended || ended
}

// migrate continues the generation on another pair after cause broke the stream off, or ends it
// when nothing was left to generate; false when it may not (the client went away, it had ended, no
// migration left). A stream that broke before its
// first chunk migrates too: the client has its 200 already, so no retry can answer it.
func (s *migratingStream) migrate(cause error) bool {
	if s.ctx.Err() != nil || s.ended {
		return false
	}
	reason := enginerpc.ReasonReset
	switch {
	case errors.Is(cause, errStreamEnded):
		reason = enginerpc.ReasonNoComplete
	case errors.Is(cause, errDrained):
		reason = enginerpc.ReasonDrain
	}
	if out, ok := s.api.lengthFinish(s.out); ok {
		// Everything was generated and only the finish was lost: end here, as gRPC mode does,
		// rather than ask a pair for nothing.
		s.out, s.in, s.ended, s.err = out, s.in[:0], true, io.EOF
		return true
	}
	failed := s.engine
	for {
		ids, b, ok := s.api.continuation()
		if !ok {
			return false
		}
		r := &enginerpc.Resume{IDs: ids, Produced: s.api.generated(), Failed: failed, Reason: reason}
		br := *s.m.q.br
		br.Body = b
		if r, ok := s.api.(rerouted); ok {
			br.Route = r.continuationRoute()
		}
		s.leave()
		cctx, stop := interruptible(s.ctx)
		resp, err := s.m.continueOn(cctx, r, &br)
		switch {
		case err == nil:
			s.cur, s.in = resp.Body, s.in[:0]
			s.conts = append(s.conts, resp.Body)
			s.reading(enginerpc.EngineKey(resp.Worker), stop)
			return true
		case errors.Is(err, enginerpc.ErrNoMigration) || s.ctx.Err() != nil:
			stop(nil)
			return false
		}
		stop(nil)
		// A failed try counts against the bound: continueOn says when it is spent.
	}
}

// leave closes the continuation being read, if any, and forgets its engine: the stream is leaving it.
func (s *migratingStream) leave() {
	if len(s.conts) > 0 && s.cur == s.conts[len(s.conts)-1] {
		s.cur.Close()
		s.mu.Lock()
		if s.stop != nil {
			s.stop(nil)
		}
		s.mu.Unlock()
	}
	s.reading("", nil)
}

// reading records that the stream reads engine now, under an attempt that stop cuts ("" : none).
func (s *migratingStream) reading(engine string, stop context.CancelCauseFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.untrack != nil {
		s.untrack()
		s.untrack = nil
	}
	s.engine, s.stop = engine, stop
	if engine != "" {
		s.untrack = s.live.Add(engine, s)
	}
}

// interrupt cuts the attempt the stream reads now, when the stream can go on elsewhere: its engine
// is being drained. It says whether it did.
func (s *migratingStream) interrupt() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stop == nil || !s.movable.Load() {
		return false
	}
	s.drained.Store(true)
	s.stop(errDrained)
	return true
}

// canMove says whether interrupt would cut the stream now.
func (s *migratingStream) canMove() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stop != nil && s.movable.Load()
}

// Close ends every attempt: the continuations', then the first's (which ends the request).
func (s *migratingStream) Close() error {
	s.reading("", nil)
	for _, c := range s.conts {
		c.Close()
	}
	return s.first.Close()
}

// appendData appends one SSE data frame.
func appendData(dst, payload []byte) []byte {
	dst = append(dst, "data: "...)
	dst = append(dst, payload...)
	return append(dst, "\n\n"...)
}

// sseDone is the frame that ends an OpenAI-style stream.
const sseDone = "data: [DONE]\n\n"

// prefixed is prompt + generated, as a new slice.
func prefixed(prompt, generated []uint32) []uint32 {
	return append(slices.Clip(prompt), generated...)
}
