package httpapi

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/dispatch"
)

// FuzzRelaySSE feeds any upstream byte stream through the SSE relay: the client always gets well-formed
// frames, and the last one is [DONE] or an error frame, so a cut stream never looks complete.
func FuzzRelaySSE(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data: {\"choices\":[]}\n\n"))
	f.Add([]byte("data: {\"error\":{\"message\":\"engine failed\"}}\n\ndata: [DONE]\n\n"))
	f.Add([]byte(": keep-alive\n\nevent: x\ndata: a\ndata: b\n\n"))
	f.Add([]byte("data: [DONE]\n\ndata: after done\n\n"))
	f.Add([]byte("data: partial"))
	f.Fuzz(func(t *testing.T, upstream []byte) {
		w := httptest.NewRecorder()
		resp := &dispatch.Response{Body: io.NopCloser(bytes.NewReader(upstream)), Stream: true}
		relaySSE(context.Background(), w, resp.Frames(), slog.New(slog.DiscardHandler))
		out := w.Body.Bytes()
		r := body.NewSSEReader(bytes.NewReader(out))
		var last []byte
		for {
			data, err := r.Next()
			if err != nil {
				break
			}
			last = data
		}
		if !bytes.HasSuffix(out, []byte("\n\n")) {
			t.Fatalf("output does not end with a complete frame: %q", out)
		}
		if !body.IsDone(last) && !body.IsErrorFrame(last) {
			t.Fatalf("stream ends with %q, neither [DONE] nor an error frame (upstream %q)", last, upstream)
		}
		if strings.Contains(string(out), "\n\n\n") && !strings.Contains(string(upstream), "\n\n\n") {
			t.Fatalf("relay produced an empty frame: %q", out)
		}
	})
}
