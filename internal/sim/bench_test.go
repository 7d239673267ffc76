package sim

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkInstantChat measures the engine's own cost per instant-mode chat request (no network).
func BenchmarkInstantChat(b *testing.B) {
	for _, bc := range []struct {
		name string
		body string
	}{
		{name: "unary", body: `{"model":"sim-model","messages":[{"role":"user","content":"Hello, how are you today?"}],"max_tokens":16}`},
		{name: "stream", body: `{"model":"sim-model","messages":[{"role":"user","content":"Hello, how are you today?"}],"max_tokens":16,"stream":true}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			e, err := New(Config{Mode: ModeInstant}, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			h := e.routes()
			b.ReportAllocs()
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(bc.body)))
				if rec.Code != 200 {
					b.Fatal(rec.Code)
				}
			}
		})
	}
}
