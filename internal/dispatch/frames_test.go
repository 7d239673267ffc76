package dispatch

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/sluicegw/sluice/internal/backend/body"
)

// TestFramesNextBuffered: NextBuffered meters and strips exactly as Next does, returns only events
// already read, and a stripped usage chunk with nothing after it yet leaves it saying no (the relay
// then flushes and waits in Next) instead of waiting for [DONE] itself.
func TestFramesNextBuffered(t *testing.T) {
	const chunk = `{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"x"}}],"usage":null}`
	const usage = `{"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`
	pr, pw := io.Pipe()
	resp := &Response{Body: pr, Stream: true}
	m := &meter{ctx: context.Background(), route: body.RouteChat, stream: true, strip: true, streams: 1}
	resp.meter = m
	f := resp.Frames()
	go func() {
		_, _ = pw.Write([]byte("data: " + chunk + "\n\ndata: " + chunk + "\n\ndata: " + usage + "\n\n"))
		_, _ = pw.Write([]byte("data: [DONE]\n\n"))
		pw.Close()
	}()
	cut := `{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"x"}}]}`
	if p, err := f.Next(); err != nil || string(p) != cut {
		t.Fatalf("Next = %q, %v; want the chunk without usage:null", p, err)
	}
	if p, ok := f.NextBuffered(); !ok || string(p) != cut {
		t.Fatalf("NextBuffered = %q, %v; want the second chunk", p, ok)
	}
	if p, ok := f.NextBuffered(); ok {
		t.Fatalf("NextBuffered = %q; want no: only the stripped usage chunk was buffered", p)
	}
	if p, err := f.Next(); err != nil || !body.IsDone(p) {
		t.Fatalf("Next = %q, %v; want [DONE]", p, err)
	}
	if !m.hasUsage || m.usage.Completion != 2 || m.frames != 2 {
		t.Fatalf("metered usage %+v (has %v), %d frames; want 2 completion tokens, 2 frames", m.usage, m.hasUsage, m.frames)
	}
	if _, err := f.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("end: %v", err)
	}
}
