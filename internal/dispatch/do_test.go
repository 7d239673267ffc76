package dispatch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/backend"
	"github.com/sluicegw/sluice/internal/placement"
	"github.com/sluicegw/sluice/internal/worker"
)

// fakeMetrics records what dispatch reports.
type fakeMetrics struct {
	mu       sync.Mutex
	upstream []string // "worker status"
	retries  int
	errors   []string // "worker class"
	events   []string // splits, skipped prefills, prefill legs
	requests []RequestStats
}

func (m *fakeMetrics) ObserveUpstream(w string, status int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.upstream = append(m.upstream, fmt.Sprint(w, " ", status))
}

func (m *fakeMetrics) IncRetry() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.retries++
}

func (m *fakeMetrics) ObservePrefill(h string, _ time.Duration, _ trace.SpanContext) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, "prefill "+h)
}

func (m *fakeMetrics) IncWorkerError(w, class string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.errors = append(m.errors, w+" "+class)
}

func (m *fakeMetrics) IncSplit(h string, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, fmt.Sprint("split ", h, " ", n))
}

func (m *fakeMetrics) IncPrefillSkipped(h, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, "skipped "+h+" "+reason)
}

func (m *fakeMetrics) ObserveRequest(s *RequestStats) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests = append(m.requests, *s)
}

// stats returns the requests recorded so far.
func (m *fakeMetrics) stats() []RequestStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.requests)
}

func (m *fakeMetrics) IncKVTransferFallback(h string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.upstream = append(m.upstream, "kv_fallback "+h)
}

// newTestDispatcher builds a regular-mode dispatcher over Ready regular workers serving model "m" at
// urls. Its client is a plain one whose idle connections are closed when the test ends.
func newTestDispatcher(t *testing.T, cfg Config, urls ...string) (*Dispatcher, []*worker.Worker) {
	t.Helper()
	reg := worker.NewRegistry(worker.RegistryOptions{})
	var ws []*worker.Worker
	for _, u := range urls {
		w, err := reg.Add(worker.Spec{URL: u, Role: worker.RoleRegular, Protocol: worker.ProtocolSGLang, Models: []string{"m"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := reg.SetHealth(w.ID(), worker.HealthReady); err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	pols, err := placement.NewSet(placement.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	adm, err := admission.New(admission.Settings{MaxInflightPerWorker: 1, QueueSize: 1, QueueTimeout: time.Second}, admission.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	d, err := New(cfg, Deps{Registry: reg, Policies: pols, Admission: adm, HTTP: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatal(err)
	}
	return d, ws
}

// tinyBackoff keeps retry waits negligible; the tests count attempts, never time them.
var tinyBackoff = backend.BackoffConfig{Initial: time.Microsecond, Multiplier: 1, Max: time.Microsecond, Jitter: 0.01}

const chatBody = `{"model":"m","messages":[{"role":"user","content":"héllo"}],"engine_extra":{"top_k":5},"stream":false}`

// seen is what the engine server received.
type seen struct {
	method, path string
	body         []byte
	header       http.Header
}

func TestDoRegularForwardsAndReleases(t *testing.T) {
	got := make(chan seen, 1)
	const answer = `{"id":"chatcmpl-1","choices":[{"message":{"role":"assistant","content":"hi"}}]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{method: r.Method, path: r.URL.Path, body: b, header: r.Header.Clone()}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Set-Cookie", "engine=1")
		_, _ = io.WriteString(w, answer)
	}))
	defer srv.Close()

	m := &fakeMetrics{}
	d, ws := newTestDispatcher(t, Config{}, srv.URL)
	d.d.Metrics = m
	body := []byte(chatBody)
	req := &Request{Route: RouteChat, Body: bytes.Clone(body), Header: http.Header{
		"Cookie":       {"session=secret"},
		"X-Request-Id": {"req-123"},
		"X-Api-Key":    {"client-key"},
	}}

	resp, err := d.Do(t.Context(), req)
	if err != nil {
		t.Fatalf("Do() error = %v", err)
	}
	if l := ws[0].Load(); l != 1 {
		t.Errorf("worker load while the response is open = %d, want 1", l)
	}
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	if err := resp.Body.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
	_ = resp.Body.Close() // a second Close must not release the guard twice
	if l := ws[0].Load(); l != 0 {
		t.Errorf("worker load after Close = %d, want 0", l)
	}

	up := <-got
	if up.method != http.MethodPost || up.path != "/v1/chat/completions" {
		t.Errorf("upstream got %s %s, want POST /v1/chat/completions", up.method, up.path)
	}
	if !bytes.Equal(up.body, body) {
		t.Errorf("upstream body = %q, want the client's body byte for byte %q", up.body, body)
	}
	if v := up.header.Get("X-Request-Id"); v != "req-123" {
		t.Errorf("upstream X-Request-Id = %q, want req-123", v)
	}
	for _, h := range []string{"Cookie", "X-Api-Key"} {
		if v, ok := up.header[h]; ok {
			t.Errorf("upstream got %s: %q; only allow-listed headers may be forwarded", h, v)
		}
	}
	if string(out) != answer {
		t.Errorf("response body = %q, want %q", out, answer)
	}

	wantHeader := http.Header{"Content-Type": {"application/json"}, "X-Sluice-Worker": {srv.URL}, "X-Request-Id": {"req-123"}}
	if diff := cmp.Diff(wantHeader, resp.Header); diff != "" {
		t.Errorf("response headers mismatch (-want +got):\n%s", diff)
	}
	if resp.Status != http.StatusOK || resp.Worker != srv.URL || resp.PrefillWorker != "" || resp.Model != "m" || resp.Stream {
		t.Errorf("response = status %d worker %q prefill %q model %q stream %v", resp.Status, resp.Worker, resp.PrefillWorker, resp.Model, resp.Stream)
	}
}

func TestDoRetriesUpstream503(t *testing.T) {
	tests := []struct {
		name        string
		maxAttempts int
		status      int
		wantHits    int32
		wantStatus  int
	}{
		{name: "503 retried to the limit", maxAttempts: 3, status: 503, wantHits: 3, wantStatus: 503},
		{name: "503 without retries", maxAttempts: 1, status: 503, wantHits: 1, wantStatus: 503},
		{name: "400 is not retried", maxAttempts: 3, status: 400, wantHits: 1, wantStatus: 400},
		{name: "429 from the engine is retried", maxAttempts: 2, status: 429, wantHits: 2, wantStatus: 429},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hits atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, `{"error":{"message":"engine says no","type":"server_error"}}`)
			}))
			defer srv.Close()

			m := &fakeMetrics{}
			d, ws := newTestDispatcher(t, Config{Retry: RetryConfig{MaxAttempts: tt.maxAttempts, Backoff: tinyBackoff}}, srv.URL)
			d.d.Metrics = m
			resp, err := d.Do(t.Context(), &Request{Route: RouteChat, Body: []byte(chatBody), Header: http.Header{}})
			if err == nil {
				resp.Body.Close()
				t.Fatal("Do() succeeded, want an error")
			}
			if n := hits.Load(); n != tt.wantHits {
				t.Errorf("server hits = %d, want %d", n, tt.wantHits)
			}
			if m.retries != int(tt.wantHits)-1 {
				t.Errorf("retries counted = %d, want %d", m.retries, tt.wantHits-1)
			}
			var wantUpstream []string
			for range tt.wantHits {
				wantUpstream = append(wantUpstream, fmt.Sprint(srv.URL, " ", tt.status))
			}
			if diff := cmp.Diff(wantUpstream, m.upstream); diff != "" {
				t.Errorf("upstream observations mismatch (-want +got):\n%s", diff)
			}
			var ae *apierror.Error
			if !errors.As(err, &ae) {
				t.Fatalf("Do() error %T is not an *apierror.Error", err)
			}
			if ae.Status != tt.wantStatus || ae.Message != "engine says no" {
				t.Errorf("Do() error = %d %q, want %d %q", ae.Status, ae.Message, tt.wantStatus, "engine says no")
			}
			if l := ws[0].Load(); l != 0 {
				t.Errorf("worker load after failure = %d, want 0", l)
			}
		})
	}
}

func TestDoRetrySucceedsOnAnotherAttempt(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if hits.Add(1) == 1 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	defer srv.Close()
	d, ws := newTestDispatcher(t, Config{Retry: RetryConfig{MaxAttempts: 3, Backoff: tinyBackoff}}, srv.URL)
	resp, err := d.Do(t.Context(), &Request{Route: RouteChat, Body: []byte(chatBody), Header: http.Header{}})
	if err != nil {
		t.Fatalf("Do() error = %v", err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(out) != `{"ok":true}` || hits.Load() != 2 {
		t.Errorf("got %q after %d hits, want {\"ok\":true} after 2", out, hits.Load())
	}
	if l := ws[0].Load(); l != 0 {
		t.Errorf("worker load after Close = %d, want 0", l)
	}
}

func TestDoRejectsBeforeCallingUpstream(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	tests := []struct {
		name       string
		body       string
		header     http.Header
		wantStatus int
		wantCode   string
	}{
		{name: "invalid body", body: `{"model":"m"}`, wantStatus: 400, wantCode: apierror.CodeInvalidRequest},
		{name: "unknown model", body: `{"model":"other","messages":[{"role":"user","content":"x"}]}`, wantStatus: 404, wantCode: apierror.CodeModelNotFound},
		{name: "bad target header", body: chatBody, header: http.Header{"X-Sluice-Target-Worker": {"-3"}}, wantStatus: 400, wantCode: apierror.CodeInvalidRequest},
	}
	d, _ := newTestDispatcher(t, Config{Retry: RetryConfig{MaxAttempts: 3, Backoff: tinyBackoff}}, srv.URL)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.header
			if h == nil {
				h = http.Header{}
			}
			resp, err := d.Do(t.Context(), &Request{Route: RouteChat, Body: []byte(tt.body), Header: h})
			if err == nil {
				resp.Body.Close()
				t.Fatal("Do() succeeded, want an error")
			}
			e := apierror.From(err)
			if e.Status != tt.wantStatus || e.Code != tt.wantCode {
				t.Errorf("Do() error = %d %s, want %d %s", e.Status, e.Code, tt.wantStatus, tt.wantCode)
			}
		})
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("upstream was called %d times for requests rejected up front", n)
	}
}

func TestDoNoHealthyWorker(t *testing.T) {
	d, ws := newTestDispatcher(t, Config{Retry: RetryConfig{MaxAttempts: 3, Backoff: tinyBackoff}}, "http://127.0.0.1:1")
	if err := d.d.Registry.SetHealth(ws[0].ID(), worker.HealthNotReady); err != nil {
		t.Fatal(err)
	}
	_, err := d.Do(t.Context(), &Request{Route: RouteChat, Body: []byte(chatBody), Header: http.Header{}})
	var ae *apierror.Error
	if !errors.As(err, &ae) {
		t.Fatalf("Do() error = %v, want an *apierror.Error", err)
	}
	if ae.Status != 503 || ae.Code != apierror.CodeNoAvailableWorkers || ae.RetryAfter <= 0 {
		t.Errorf("Do() error = %d %s RetryAfter=%v, want 503 %s with a Retry-After", ae.Status, ae.Code, ae.RetryAfter, apierror.CodeNoAvailableWorkers)
	}
}

// hangingEngine answers nothing until the client goes away (or the test ends).
func hangingEngine(t *testing.T) (srv *httptest.Server, arrived <-chan struct{}) {
	t.Helper()
	ch := make(chan struct{}, 8)
	done := make(chan struct{})
	srv = httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		ch <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-done:
		}
	}))
	t.Cleanup(func() {
		close(done)
		srv.Close()
	})
	return srv, ch
}

func TestDoRequestTimeout(t *testing.T) {
	srv, _ := hangingEngine(t)
	m := &fakeMetrics{}
	d, ws := newTestDispatcher(t, Config{RequestTimeout: 50 * time.Millisecond, Retry: RetryConfig{MaxAttempts: 3, Backoff: tinyBackoff}}, srv.URL)
	d.d.Metrics = m
	_, err := d.Do(t.Context(), &Request{Route: RouteChat, Body: []byte(chatBody), Header: http.Header{}})
	e := apierror.From(err)
	if e.Status != http.StatusGatewayTimeout || e.Code != apierror.CodeTimeout {
		t.Errorf("Do() error = %d %s (%v), want 504 %s", e.Status, e.Code, err, apierror.CodeTimeout)
	}
	if l := ws[0].Load(); l != 0 {
		t.Errorf("worker load after timeout = %d, want 0", l)
	}
	// Our own timeout is not the worker's failure: no upstream observation (which would also feed the breaker).
	if len(m.upstream) != 0 {
		t.Errorf("upstream observations = %q after our own timeout, want none", m.upstream)
	}
}

// TestDoClientCancelIsClassifiedAsCanceled: a client that goes away while the engine works must end
// as 499 request_canceled (and codes.Canceled on RPC), not as a worker failure.
func TestDoClientCancelIsClassifiedAsCanceled(t *testing.T) {
	srv, arrived := hangingEngine(t)
	d, ws := newTestDispatcher(t, Config{Retry: RetryConfig{MaxAttempts: 3, Backoff: tinyBackoff}}, srv.URL)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		resp, err := d.Do(ctx, &Request{Route: RouteChat, Body: []byte(chatBody), Header: http.Header{}})
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-arrived
	cancel()
	err := <-errc
	if err == nil {
		t.Fatal("Do() succeeded after cancellation")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Do() error = %v, want errors.Is context.Canceled", err)
	}
	if l := ws[0].Load(); l != 0 {
		t.Errorf("worker load after cancel = %d, want 0", l)
	}
	if e := apierror.From(err); e.Status != 499 || e.Code != apierror.CodeCanceled {
		t.Errorf("apierror.From(Do error) = %d %s %q, want 499 %s", e.Status, e.Code, e.Message, apierror.CodeCanceled)
	}
}

// TestDoClientAuthorization: the client's Authorization reaches engines only when the gateway does not
// check its own key (then it carries the gateway's key and must not leak upstream).
func TestDoClientAuthorization(t *testing.T) {
	for _, tc := range []struct {
		name string
		drop bool
		want string
	}{
		{"forwarded when the gateway has no key", false, "Bearer client-key"},
		{"dropped when the gateway checks its own key", true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan string, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got <- r.Header.Get("Authorization")
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"ok":true}`))
			}))
			defer srv.Close()
			d, _ := newTestDispatcher(t, Config{DropClientAuthorization: tc.drop}, srv.URL)
			resp, err := d.Do(context.Background(), &Request{Route: RouteChat,
				Body:   []byte(`{"model":"m","messages":[{"role":"user","content":"x"}]}`),
				Header: http.Header{"Authorization": {"Bearer client-key"}}})
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if a := <-got; a != tc.want {
				t.Fatalf("engine saw Authorization %q, want %q", a, tc.want)
			}
		})
	}
}
