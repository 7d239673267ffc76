package dispatch

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicegw/sluice/internal/worker"
)

// A short prompt goes to a kv_both decode worker alone (no prefill leg, no kv_transfer_params, counted
// as skipped for local_prefill); a prompt at the limit goes PD; a decode worker without the role never
// gets a request alone.
func TestLocalPrefill(t *testing.T) {
	nixlPrefill := func(w http.ResponseWriter, _ leg) {
		writeJSON(w, 200, `{"choices":[],"kv_transfer_params":{"remote_engine_id":"e","remote_block_ids":[1],"remote_host":"h","remote_port":1,"do_remote_prefill":true}}`)
	}
	// 40 characters = 10 estimated tokens at 4 characters per token.
	short, long := strings.Repeat("a", 36), strings.Repeat("a", 40)
	chat := func(content string) string {
		return `{"model":"m","messages":[{"role":"user","content":"` + content + `"}]}`
	}
	for _, tc := range []struct {
		name      string
		role      string
		content   string
		wantLocal bool
	}{
		{"short prompt on kv_both is local", worker.KVRoleBoth, short, true},
		{"prompt at the limit goes PD", worker.KVRoleBoth, long, false},
		{"decode without kv_both goes PD", "", short, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newEngine(t, "prefill", nixlPrefill)
			dec := newEngine(t, "decode", chatAnswer)
			d, m := newPDDispatcherSpecs(t, Config{LocalPrefillMaxTokens: 10},
				worker.Spec{URL: p.srv.URL, Role: worker.RolePrefill, Protocol: worker.ProtocolVLLM},
				worker.Spec{URL: dec.srv.URL, Role: worker.RoleDecode, Protocol: worker.ProtocolVLLM, KVRole: tc.role})
			// The request's server span (httpapi starts it) carries the skip.
			exp := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
			ctx, span := tp.Tracer("test").Start(t.Context(), "request")
			resp, err := d.Do(ctx, &Request{Route: RouteChat, Body: []byte(chat(tc.content)), Header: http.Header{}})
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			span.End()
			var onSpan bool
			for _, s := range exp.GetSpans() {
				if s.Name == "request" {
					onSpan = slices.Contains(s.Attributes, attribute.String("sluice.prefill_skipped", ReasonLocalPrefill))
				}
			}
			if onSpan != tc.wantLocal {
				t.Errorf("sluice.prefill_skipped=local_prefill on the request span: %v, want %v", onSpan, tc.wantLocal)
			}
			dl := dec.recorded()
			if len(dl) != 1 {
				t.Fatalf("%d decode legs, want 1", len(dl))
			}
			_, hasKV := dl[0].body["kv_transfer_params"]
			m.mu.Lock()
			skipped := slices.Contains(m.events, "skipped "+worker.HandoffNIXL.String()+" "+ReasonLocalPrefill)
			m.mu.Unlock()
			if tc.wantLocal {
				if n := len(p.recorded()); n != 0 || hasKV || !skipped {
					t.Errorf("prefill legs %d, decode kv_transfer_params %v, skipped counted %v; want 0, none, counted", n, hasKV, skipped)
				}
			} else if n := len(p.recorded()); n != 1 || !hasKV || skipped {
				t.Errorf("prefill legs %d, decode kv_transfer_params %v, skipped counted %v; want 1, set, not counted", n, hasKV, skipped)
			}
			assertReleased(t, d)
		})
	}
}

// In a fleet with one kv_both decode worker and one without the role, every short prompt goes to the
// kv_both one alone, and a long one goes PD as the decode policy picks.
func TestLocalPrefillMixedDecodeFleet(t *testing.T) {
	p := newEngine(t, "prefill", func(w http.ResponseWriter, _ leg) {
		writeJSON(w, 200, `{"choices":[],"kv_transfer_params":{"remote_engine_id":"e","remote_block_ids":[1],"remote_host":"h","remote_port":1,"do_remote_prefill":true}}`)
	})
	both := newEngine(t, "decode", chatAnswer)
	plain := newEngine(t, "decode", chatAnswer)
	d, _ := newPDDispatcherSpecs(t, Config{LocalPrefillMaxTokens: 10},
		worker.Spec{URL: p.srv.URL, Role: worker.RolePrefill, Protocol: worker.ProtocolVLLM},
		worker.Spec{URL: both.srv.URL, Role: worker.RoleDecode, Protocol: worker.ProtocolVLLM, KVRole: worker.KVRoleBoth},
		worker.Spec{URL: plain.srv.URL, Role: worker.RoleDecode, Protocol: worker.ProtocolVLLM})
	for range 3 {
		if _, _, err := do(t, d, RouteChat, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, nil); err != nil {
			t.Fatal(err)
		}
	}
	if nb, np, npre := len(both.recorded()), len(plain.recorded()), len(p.recorded()); nb != 3 || np != 0 || npre != 0 {
		t.Fatalf("short prompts: kv_both decode %d, plain decode %d, prefill %d; want 3, 0, 0", nb, np, npre)
	}
	long := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("a", 80) + `"}]}`
	for range 2 {
		if _, _, err := do(t, d, RouteChat, long, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Round robin over the two decode workers, consulted once per PD request.
	if nb, np, npre := len(both.recorded()), len(plain.recorded()), len(p.recorded()); nb != 4 || np != 1 || npre != 2 {
		t.Errorf("long prompts: kv_both decode %d, plain decode %d, prefill %d; want 4, 1, 2", nb, np, npre)
	}
	assertReleased(t, d)
}
