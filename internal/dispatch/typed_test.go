package dispatch

import (
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/worker"
)

// typedOf is what a typed surface hands Do for raw: the parsed fields, and the JSON counted as it is
// rendered.
func typedOf(t *testing.T, route Route, raw string, renders *atomic.Int64) *Request {
	t.Helper()
	br, err := body.ParseRequest(route, []byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	return &Request{Route: route, Header: http.Header{}, Typed: &Typed{Parsed: br,
		JSON: func() ([]byte, error) { renders.Add(1); return []byte(raw), nil }}}
}

// TestTypedRequestToHTTPEngines: a typed request to HTTP engines is rendered as JSON once, however
// many legs need it, and what each leg gets is what the JSON path sends: the usage asked for a stream
// that did not, the bootstrap fields of SGLang PD, the rank hint of a data-parallel engine.
func TestTypedRequestToHTTPEngines(t *testing.T) {
	sse := func(w http.ResponseWriter, _ leg) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n")
	}
	raw := `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`

	p, d := newEngine(t, "prefill", sse), newEngine(t, "decode", sse)
	x, _ := newPDDispatcher(t, Config{}, pdWorker{p.srv.URL, worker.RolePrefill, worker.ProtocolSGLang},
		pdWorker{d.srv.URL, worker.RoleDecode, worker.ProtocolSGLang})
	var renders atomic.Int64
	resp, err := x.Do(t.Context(), typedOf(t, RouteChat, raw, &renders))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if n := renders.Load(); n != 1 {
		t.Errorf("rendered %d times, want once", n)
	}
	for _, e := range []*engine{p, d} {
		e.mu.Lock()
		l := e.legs[0]
		e.mu.Unlock()
		so, _ := l.body["stream_options"].(map[string]any)
		if so["include_usage"] != true || l.body["bootstrap_room"] == nil {
			t.Errorf("%s leg body %v: want include_usage and the bootstrap fields", e.role, l.body)
		}
	}

	r := newEngine(t, "regular", sse)
	x, _ = newPDDispatcherSpecs(t, Config{}, worker.Spec{URL: r.srv.URL, Role: worker.RoleRegular, Protocol: worker.ProtocolSGLang, DPSize: 2})
	x.cfg.PD = false
	resp, err = x.Do(t.Context(), typedOf(t, RouteChat, raw, &renders))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.legs) != 1 || r.legs[0].body["routed_dp_rank"] == nil {
		t.Errorf("data-parallel engine got %v, want the rank hint", r.legs)
	}
}
