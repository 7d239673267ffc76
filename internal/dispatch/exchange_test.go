package dispatch

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/worker"
)

// countingServer is an engine that counts the connections it accepted.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

// TestPrefillAnsweringAfterDecodeKeepsItsConnection: an SGLang prefill engine that answers only once
// its decode has answered (as an instant engine often does) is waited for, not cancelled: its
// connection goes back to the pool, so a run of requests uses one, and every prefill is recorded as
// completed.
func TestPrefillAnsweringAfterDecodeKeepsItsConnection(t *testing.T) {
	decoded := make(chan struct{}, 1)
	pre, preConns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		<-decoded // answer after the decode did
		writeJSON(w, 200, `{"id":"p","object":"chat.completion","choices":[]}`)
	})
	dec, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		writeJSON(w, 200, `{"id":"d","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`)
		decoded <- struct{}{}
	})
	d, m := newPDDispatcher(t, Config{PrefillGrace: time.Minute},
		pdWorker{pre.URL, worker.RolePrefill, worker.ProtocolSGLang}, pdWorker{dec.URL, worker.RoleDecode, worker.ProtocolSGLang})
	for range 3 {
		if _, b, err := do(t, d, RouteChat, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, nil); err != nil || !strings.Contains(string(b), `"hi"`) {
			t.Fatalf("answer %s, %v", b, err)
		}
	}
	if n := preConns.Load(); n != 1 {
		t.Errorf("prefill engine accepted %d connections for 3 requests, want 1 (a cancelled prefill loses its connection)", n)
	}
	m.mu.Lock()
	prefills := strings.Count(strings.Join(m.events, ","), "prefill sglang_bootstrap")
	m.mu.Unlock()
	if prefills != 3 {
		t.Errorf("%d prefill legs recorded as completed, want 3 (events %v)", prefills, m.events)
	}
	assertReleased(t, d)
}

// TestPrefillThatNeverAnswersIsCancelled: a prefill engine that never answers once the decode has
// answered holds the request no longer than the grace: the client gets its answer, the prefill leg is
// cancelled, and its slot and load are given back.
func TestPrefillThatNeverAnswersIsCancelled(t *testing.T) {
	arrived := make(chan struct{}, 1)
	cancelled := make(chan struct{}, 1)
	pre, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		arrived <- struct{}{}
		<-r.Context().Done() // hangs until the gateway gives up on it
		cancelled <- struct{}{}
	})
	dec, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		<-arrived // the KV is there: the prefill got its request
		writeJSON(w, 200, `{"id":"d","object":"chat.completion","choices":[]}`)
	})
	d, _ := newPDDispatcher(t, Config{PrefillGrace: time.Millisecond},
		pdWorker{pre.URL, worker.RolePrefill, worker.ProtocolSGLang}, pdWorker{dec.URL, worker.RoleDecode, worker.ProtocolSGLang})
	if _, b, err := do(t, d, RouteChat, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, nil); err != nil {
		t.Fatalf("answer %s, %v", b, err)
	}
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the hanging prefill leg was never cancelled")
	}
	assertReleased(t, d)
}
