package dispatch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/backend/enginerpc"
	"github.com/sluicegw/sluice/internal/worker"
)

// Mid-stream migration in HTTP mode (docs/migration.md): SGLang's /generate streamed with a token-id
// prompt (input_ids), the token-in/token-out form RL trainers and agents use. SGLang's stream gives
// the generated ids in every chunk (output_ids, cumulative as its text is, by default), so when the
// decode's stream breaks off the gateway holds the prompt's ids and every id generated: it sends
// prompt + generated as the input_ids of a new /generate with max_new_tokens reduced (a new PD
// handshake, the same sampling parameters) and reads the continuation's stream as the rest of the
// first: its text, output_ids and completion_tokens are appended to what the client already has.
// The reader does it in the relay's goroutine (Read), one continuation at a time.

// generateMigration is a migratable /generate stream: the request's prompt ids and token budget.
type generateMigration struct {
	prompt []uint32
	maxNew int
	body   map[string]json.RawMessage // the client's body, for the continuations'
	params map[string]json.RawMessage // its sampling_params
}

// httpMigration wraps a streamed answer of an HTTP worker whose stream may migrate, or returns it as
// it is: SGLang /generate with input_ids and max_new_tokens, on http(s) workers.
func (x *Dispatcher) httpMigration(ctx context.Context, q *prepared, resp *Response) *Response {
	m := migratorOf(ctx)
	if m == nil || !resp.Stream || q.br.Route != body.RouteGenerate || !strings.HasPrefix(resp.Worker, "http") {
		return resp
	}
	if w, ok := x.d.Registry.Snapshot().ByURL(resp.Worker); !ok || w.Protocol() != worker.ProtocolSGLang {
		return resp
	}
	gm, ok := parseGenerateMigration(q.br.Body)
	if !ok {
		return resp
	}
	resp.Body = &migratingStream{ctx: ctx, m: m, gm: gm, first: resp.Body, cur: resp.Body, engine: enginerpc.EngineKey(resp.Worker)}
	return resp
}

// parseGenerateMigration reads what a continuation needs from a /generate body: a flat input_ids
// and sampling_params.max_new_tokens (without it the engine's default would start again).
func parseGenerateMigration(b []byte) (*generateMigration, bool) {
	gm := &generateMigration{}
	if json.Unmarshal(b, &gm.body) != nil || json.Unmarshal(gm.body["input_ids"], &gm.prompt) != nil || len(gm.prompt) == 0 ||
		json.Unmarshal(gm.body["sampling_params"], &gm.params) != nil || json.Unmarshal(gm.params["max_new_tokens"], &gm.maxNew) != nil {
		return nil, false
	}
	return gm, gm.maxNew > 0
}

// finishReason is a continuation's finish_reason as the request's: a length finish names the
// request's max_new_tokens (SGLang's FINISH_LENGTH), not the continuation's.
func (gm *generateMigration) finishReason(raw json.RawMessage) json.RawMessage {
	var fr map[string]json.RawMessage
	if json.Unmarshal(raw, &fr) != nil || string(fr["type"]) != `"length"` {
		return raw
	}
	fr["length"] = json.RawMessage(strconv.Itoa(gm.maxNew))
	b, err := json.Marshal(fr)
	if err != nil {
		return raw
	}
	return b
}

// continuation is the body of the /generate that goes on after produced ids.
func (gm *generateMigration) continuation(ids []uint32, produced int) ([]byte, error) {
	params := make(map[string]json.RawMessage, len(gm.params))
	for k, v := range gm.params {
		params[k] = v
	}
	params["max_new_tokens"] = json.RawMessage(strconv.Itoa(gm.maxNew - produced))
	if mn, ok := params["min_new_tokens"]; ok {
		var n int
		if json.Unmarshal(mn, &n) == nil {
			params["min_new_tokens"] = json.RawMessage(strconv.Itoa(max(n-produced, 0)))
		}
	}
	b := make(map[string]json.RawMessage, len(gm.body))
	for k, v := range gm.body {
		b[k] = v
	}
	delete(b, "text")
	var err error
	if b["input_ids"], err = json.Marshal(ids); err != nil {
		return nil, err
	}
	if b["sampling_params"], err = json.Marshal(params); err != nil {
		return nil, err
	}
	return json.Marshal(b)
}

// migratingStream is the client's body of a migratable /generate stream.
type migratingStream struct {
	ctx    context.Context
	m      *migrator
	gm     *generateMigration
	first  io.ReadCloser   // the first attempt's body: closed last, it ends the request
	cur    io.ReadCloser   // the body read now: first, or the latest continuation's
	conts  []io.ReadCloser // the continuations' bodies, closed when left or at the end
	engine string          // the engine serving cur (scheme://host:port)

	in, out []byte
	sent    generated // what the client has of the generation
	base    generated // what the current continuation's chunks are appended to
	ended   bool      // [DONE], a finish_reason or an error chunk went out: nothing to continue
	err     error
}

// generated is a /generate stream's state: its text, ids and counts so far.
type generated struct {
	text                     string
	ids                      []uint32
	id                       json.RawMessage // meta_info.id
	prompt, completion, seen int             // seen: chunks
}

var errStreamEnded = errors.New("the engine's stream ended without finishing")

func (s *migratingStream) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		s.fill()
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
}

// fill reads the current body, passes its whole frames on (rewritten in a continuation), and
// migrates when it breaks off.
func (s *migratingStream) fill() {
	var buf [16 << 10]byte
	n, err := s.cur.Read(buf[:])
	s.in = append(s.in, buf[:n]...)
	for {
		i := bytes.Index(s.in, []byte("\n\n"))
		if i < 0 {
			break
		}
		s.frame(s.in[:i+2])
		s.in = s.in[i+2:]
	}
	if err == nil {
		return
	}
	if errors.Is(err, io.EOF) && s.ended {
		s.err = io.EOF
		return
	}
	if errors.Is(err, io.EOF) {
		err = errStreamEnded
	}
	if !s.migrate(err) {
		s.out = append(s.out, s.in...)
		s.err = err
	}
}

// frame passes one SSE frame on, after the state it tells is taken.
func (s *migratingStream) frame(f []byte) {
	payload, ok := bytes.CutPrefix(bytes.TrimSpace(f), []byte("data: "))
	if !ok || bytes.Equal(payload, []byte("[DONE]")) {
		s.ended = s.ended || ok
		s.out = append(s.out, f...)
		return
	}
	var c map[string]json.RawMessage
	var meta map[string]json.RawMessage
	if json.Unmarshal(payload, &c) != nil || json.Unmarshal(c["meta_info"], &meta) != nil {
		s.ended = true // an error chunk or something else: the client gets it, and the stream is over
		s.out = append(s.out, f...)
		return
	}
	var g generated
	_ = json.Unmarshal(c["text"], &g.text)
	_ = json.Unmarshal(c["output_ids"], &g.ids)
	_ = json.Unmarshal(meta["prompt_tokens"], &g.prompt)
	_ = json.Unmarshal(meta["completion_tokens"], &g.completion)
	if fr := meta["finish_reason"]; len(fr) > 0 && string(fr) != "null" {
		s.ended = true
	}
	if s.base.seen == 0 { // the first stream: as the engine sent it
		g.id, g.seen = meta["id"], s.sent.seen+1
		s.sent = g
		s.out = append(s.out, f...)
		return
	}
	g.text, g.ids = s.base.text+g.text, append(slices.Clip(s.base.ids), g.ids...)
	g.prompt, g.completion, g.id, g.seen = s.base.prompt, s.base.completion+g.completion, s.base.id, s.sent.seen+1
	s.sent = g
	c["text"], _ = json.Marshal(g.text)
	c["output_ids"], _ = json.Marshal(g.ids)
	meta["prompt_tokens"] = json.RawMessage(strconv.Itoa(g.prompt))
	meta["completion_tokens"] = json.RawMessage(strconv.Itoa(g.completion))
	meta["id"] = g.id
	meta["finish_reason"] = s.gm.finishReason(meta["finish_reason"])
	c["meta_info"], _ = json.Marshal(meta)
	b, _ := json.Marshal(c)
	s.out = append(append(append(s.out, "data: "...), b...), "\n\n"...)
}

// migrate continues the generation on another pair after cause broke the stream off; false when it
// may not (the client went away, it had ended, no migration left). A stream that broke before its
// first chunk migrates too: the client has its 200 already, so no retry can answer it.
func (s *migratingStream) migrate(cause error) bool {
	if s.ctx.Err() != nil || s.ended || len(s.sent.ids) >= s.gm.maxNew {
		return false
	}
	reason := enginerpc.ReasonReset
	if errors.Is(cause, errStreamEnded) {
		reason = enginerpc.ReasonNoComplete
	}
	for {
		ids := append(slices.Clip(s.gm.prompt), s.sent.ids...)
		r := &enginerpc.Resume{IDs: ids, Produced: len(s.sent.ids), Failed: s.engine, Reason: reason}
		b, err := s.gm.continuation(ids, len(s.sent.ids))
		if err != nil {
			return false
		}
		br := *s.m.q.br
		br.Body = b
		s.leave()
		resp, err := s.m.continueOn(s.ctx, r, &br)
		switch {
		case err == nil:
			s.cur, s.engine, s.in = resp.Body, enginerpc.EngineKey(resp.Worker), nil
			s.conts = append(s.conts, resp.Body)
			s.base = s.sent
			return true
		case errors.Is(err, enginerpc.ErrNoMigration) || s.ctx.Err() != nil:
			return false
		}
		// A failed try counts against the bound: continueOn says when it is spent.
	}
}

// leave closes the continuation being read, if any: the stream is leaving its engine.
func (s *migratingStream) leave() {
	if len(s.conts) > 0 && s.cur == s.conts[len(s.conts)-1] {
		s.cur.Close()
	}
}

// Close ends every attempt: the continuations', then the first's (which ends the request).
func (s *migratingStream) Close() error {
	for _, c := range s.conts {
		c.Close()
	}
	return s.first.Close()
}
