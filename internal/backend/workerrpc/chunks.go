package workerrpc

import (
	"context"
	"errors"
	"io"
	"sync"

	"connectrpc.com/connect"

	workerv1 "github.com/sluicegw/sluice/gen/sluice/worker/v1"
	"github.com/sluicegw/sluice/internal/backend/body"
)

// The typed stream: a streamed chat or completions answer a caller reads as messages
// (Call.WithTypedAnswer). The
// caller pulls each chunk from the sub-requests' pumps in its own goroutine (Stream.Next): there is
// no writer goroutine and no SSE in between. Reading the body instead renders the same chunks as the
// SSE an HTTP engine sends, so a reader of bytes gets what it always got.

// Chunk is one event of a streamed answer, as the rendered SSE chunk says it.
type Chunk struct {
	// Index is the choice (sub-request) the chunk belongs to.
	Index int
	// First: the choice's first chunk (a chat delta then carries the role).
	First bool
	// Text is the generated text; HasText says a chat delta carries content (the first chunk always
	// does, possibly empty).
	Text    string
	HasText bool
	// FinishReason is set on the choice's last chunk.
	FinishReason string
	// Usage: the trailing usage chunk (no choice), with the call's usage.
	Usage                                        bool
	PromptTokens, CompletionTokens, CachedTokens uint64
	// ErrorBody is set when the worker failed mid-stream: the OpenAI error object the SSE would carry.
	// The stream ends after it.
	ErrorBody []byte
}

// Stream is a streamed answer read as messages; ID, Created and Model are the chunks' id, created
// and model. Next and Read must not be used on one Stream together.
type Stream struct {
	ID      string
	Created int64
	Model   string

	ctx     context.Context
	stop    func() // cancels the pumps and waits for them
	once    sync.Once
	call    *grpcCall
	meta    *responseMeta
	samples []sample
	pending []streamEvent
	events  <-chan streamEvent
	live    int
	ended   bool                     // the usage chunk (if any) went out, or an error ended the stream
	last    *workerv1.DecodeResponse // the message of the last chunk (Read renders from it)

	buf      []byte // Read's rendering
	off      int
	readDone bool
}

// StreamOf returns the typed stream a response body (Send's) carries, nil when it is SSE bytes.
func StreamOf(b io.Reader) *Stream {
	if s, ok := b.(*Stream); ok {
		return s
	}
	return nil
}

// Next returns the next chunk; io.EOF after the last. A transport failure or the end of the request
// ends it with an error.
func (s *Stream) Next() (*Chunk, error) {
	for {
		if s.ended {
			return nil, io.EOF
		}
		var ev streamEvent
		switch {
		case len(s.pending) > 0:
			ev, s.pending = s.pending[0], s.pending[1:]
		case s.live == 0:
			s.ended = true
			if s.call.includeUsage && s.call.route != body.RouteGenerate {
				c := &Chunk{Usage: true}
				c.PromptTokens, c.CompletionTokens, c.CachedTokens = usage(s.call, s.samples)
				return c, nil
			}
			return nil, io.EOF
		default:
			select {
			case ev = <-s.events:
			case <-s.ctx.Done():
				s.ended = true
				return nil, s.ctx.Err()
			}
		}
		smp := &s.samples[ev.sub]
		if ev.msg == nil {
			smp.finished = true
			s.live--
			if ev.err == nil {
				continue
			}
			s.ended = true
			if !connect.IsWireError(ev.err) {
				return nil, transportError(ev.err)
			}
			_, typ := statusForCode(connect.CodeOf(ev.err))
			return &Chunk{Index: ev.sub, ErrorBody: appendErrorBody(nil, connectMessage(ev.err), typ, connect.CodeOf(ev.err).String())}, nil
		}
		smp.add(ev.msg)
		m := ev.msg
		if m.GetText() == "" && m.GetFinishReason() == "" && smp.started && len(m.GetTokenIds()) == 0 {
			continue // nothing the SSE would show
		}
		c := &Chunk{Index: ev.sub, First: !smp.started, Text: m.GetText(), HasText: m.GetText() != "" || !smp.started,
			FinishReason: m.GetFinishReason()}
		s.last = m
		smp.started = true
		return c, nil
	}
}

// Read renders the chunks as the SSE body of the untyped stream (decodeStream's writer).
func (s *Stream) Read(p []byte) (int, error) {
	for s.off == len(s.buf) {
		if s.readDone {
			return 0, io.EOF
		}
		c, err := s.Next()
		s.buf, s.off = s.buf[:0], 0
		switch {
		case errors.Is(err, io.EOF):
			s.buf, s.readDone = append(s.buf, sseDone...), true
		case err != nil:
			return 0, err
		case c.ErrorBody != nil:
			s.buf = append(body.AppendSSE(s.buf, c.ErrorBody), sseDone...)
			s.readDone = true
		case c.Usage:
			s.buf = body.AppendSSE(s.buf, appendUsageChunk(nil, s.call, s.meta, s.samples))
		default:
			smp := sample{started: !c.First} // all appendChunk reads of a chat or completions sample
			s.buf = append(s.buf, sseData...)
			s.buf = appendChunk(s.buf, s.call, s.meta, &smp, c.Index, s.last)
			s.buf = append(s.buf, sseEnd...)
		}
	}
	n := copy(p, s.buf[s.off:])
	s.off += n
	return n, nil
}

// Close cancels what still runs and returns once every pump has ended.
func (s *Stream) Close() error {
	s.once.Do(s.stop)
	return nil
}
