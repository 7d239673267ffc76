package httpapi

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/dispatch"
)

// flushRecorder is a ResponseWriter that reports what each flush sent.
type flushRecorder struct {
	h       http.Header
	pending bytes.Buffer
	writes  int
	flushes chan flushed
}

type flushed struct {
	body   string
	writes int // Write calls since the previous flush
}

func (f *flushRecorder) Header() http.Header { return f.h }
func (f *flushRecorder) WriteHeader(int)     {}
func (f *flushRecorder) Write(p []byte) (int, error) {
	f.writes++
	return f.pending.Write(p)
}

func (f *flushRecorder) Flush() {
	f.flushes <- flushed{body: f.pending.String(), writes: f.writes}
	f.pending.Reset()
	f.writes = 0
}

// TestRelaySSEFrameAccurate: frames that arrive together go out in one write and one flush; a frame
// that arrives alone is flushed at once, without waiting for the next; a partial frame waits for its
// end; the relay stops at [DONE].
func TestRelaySSEFrameAccurate(t *testing.T) {
	t.Parallel()
	pr, pw := io.Pipe()
	rec := &flushRecorder{h: http.Header{}, flushes: make(chan flushed)}
	resp := &dispatch.Response{Body: pr, Stream: true}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		relaySSE(context.Background(), rec, resp.Frames(), slog.New(slog.DiscardHandler))
	}()
	expect := func(want string) {
		t.Helper()
		select {
		case got := <-rec.flushes:
			if got.body != want || got.writes != 1 {
				t.Fatalf("flushed %q in %d writes, want %q in one", got.body, got.writes, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no flush; waiting for %q", want)
		}
	}
	send := func(s string) {
		t.Helper()
		if _, err := pw.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	send("data: a\n\ndata: b\r\n\r\n: keep-alive\n\ndata: c\n\n")
	expect("data: a\n\ndata: b\n\ndata: c\n\n")
	send("data: d\n\n")
	expect("data: d\n\n")     // alone: out at once, nothing waits for e
	send("data: e\ndata: e2") // incomplete: stays until its end arrives
	send("\n\ndata: f\n\n")
	expect("data: e\ndata: e2\n\ndata: f\n\n")
	send("data: g\n\ndata: [DONE]\n\ndata: after the end\n\n")
	expect("data: g\n\ndata: [DONE]\n\n")
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("relay did not stop at [DONE]")
	}
	pw.Close()
}
