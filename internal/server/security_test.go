package server_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/gen/sluice/admin/v1/adminv1connect"
	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/server"
)

func TestCORS(t *testing.T) {
	t.Parallel()
	rest := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	_, exact := newServer(t, server.Options{REST: rest, Admin: fakeAdmin{}, CORSAllowedOrigins: []string{"https://app.example.com"}})
	_, wildcard := newServer(t, server.Options{REST: rest, CORSAllowedOrigins: []string{"*"}})
	_, off := newServer(t, server.Options{REST: rest})

	preflight := http.Header{
		"Origin":                         {"https://app.example.com"},
		"Access-Control-Request-Method":  {"POST"},
		"Access-Control-Request-Headers": {"authorization, content-type, x-stainless-os, connect-protocol-version"},
	}
	tests := []struct {
		name        string
		srv         string
		method      string
		header      http.Header
		wantStatus  int
		wantOrigin  string
		wantCreds   string
		wantHeaders string
		wantExpose  bool
	}{
		{"preflight allowed", exact.URL, http.MethodOptions, preflight, 204, "https://app.example.com", "true",
			"authorization, content-type, x-stainless-os, connect-protocol-version", false},
		{"preflight other origin", exact.URL, http.MethodOptions, http.Header{"Origin": {"https://evil.example"}, "Access-Control-Request-Method": {"POST"}}, 403, "", "", "", false},
		{"preflight wildcard", wildcard.URL, http.MethodOptions, preflight, 204, "*", "", "authorization, content-type, x-stainless-os, connect-protocol-version", false},
		{"preflight when off", off.URL, http.MethodOptions, preflight, 403, "", "", "", false},
		{"preflight bad header list", exact.URL, http.MethodOptions, http.Header{"Origin": {"https://app.example.com"}, "Access-Control-Request-Method": {"POST"}, "Access-Control-Request-Headers": {"x\r\ny"}}, 204, "https://app.example.com", "true", "", false},
		{"simple allowed", exact.URL, http.MethodGet, http.Header{"Origin": {"https://app.example.com"}}, 200, "https://app.example.com", "true", "", true},
		{"simple other origin", exact.URL, http.MethodGet, http.Header{"Origin": {"https://evil.example"}}, 200, "", "", "", false},
		{"no origin", exact.URL, http.MethodGet, nil, 200, "", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.header.Clone()
			if h != nil && strings.Contains(h.Get("Access-Control-Request-Headers"), "\r") {
				// net/http refuses to send CR LF in a header; a raw request below covers that case.
				h.Set("Access-Control-Request-Headers", "x y(")
			}
			r := do(t, http.DefaultClient, tt.method, tt.srv+"/v1/models", "", h)
			if r.status != tt.wantStatus {
				t.Fatalf("status %d, want %d (body %s)", r.status, tt.wantStatus, r.body)
			}
			if got := r.header.Get("Access-Control-Allow-Origin"); got != tt.wantOrigin {
				t.Errorf("Allow-Origin %q, want %q", got, tt.wantOrigin)
			}
			if got := r.header.Get("Access-Control-Allow-Credentials"); got != tt.wantCreds {
				t.Errorf("Allow-Credentials %q, want %q", got, tt.wantCreds)
			}
			if got := r.header.Get("Access-Control-Allow-Headers"); got != tt.wantHeaders {
				t.Errorf("Allow-Headers %q, want %q", got, tt.wantHeaders)
			}
			if got := r.header.Get("Access-Control-Expose-Headers") != ""; got != tt.wantExpose {
				t.Errorf("Expose-Headers present %v, want %v", got, tt.wantExpose)
			}
			if tt.wantOrigin != "" && !strings.Contains(strings.Join(r.header.Values("Vary"), ","), "Origin") {
				t.Errorf("Vary %v lacks Origin", r.header.Values("Vary"))
			}
			if tt.wantStatus == 403 {
				if code, _, _ := openAIError(t, r); code != apierror.CodeOriginNotAllowed {
					t.Errorf("code %q, want %q", code, apierror.CodeOriginNotAllowed)
				}
			}
		})
	}

	// A gRPC-Web call from an allowed page: the RPC answers and the status trailers are readable.
	client := adminv1connect.NewAdminServiceClient(exact.Client(), exact.URL, connect.WithGRPCWeb())
	ctx, info := connect.NewClientContext(t.Context())
	info.RequestHeader().Set("Origin", "https://app.example.com")
	if _, err := client.ListWorkers(ctx, &adminv1.ListWorkersRequest{}); err != nil {
		t.Errorf("gRPC-Web ListWorkers with an allowed Origin: %v", err)
	}
	if got := info.ResponseHeader().Get("Access-Control-Allow-Origin"); got != "https://app.example.com" {
		t.Errorf("gRPC-Web Allow-Origin %q", got)
	}
}

func TestAdminSecurityHeadersAndBodyLimit(t *testing.T) {
	t.Parallel()
	rest := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	_, srv := newServer(t, server.Options{REST: rest, Admin: fakeAdmin{}, AdminMaxBytes: 1024, HSTS: true})

	r := do(t, srv.Client(), http.MethodGet, srv.URL+"/admin/v1/workers", "", nil)
	for k, want := range map[string]string{
		"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY",
		"Referrer-Policy": "no-referrer", "Strict-Transport-Security": "max-age=31536000",
	} {
		if got := r.header.Get(k); got != want {
			t.Errorf("admin REST %s = %q, want %q", k, got, want)
		}
	}
	if !strings.Contains(r.header.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
		t.Errorf("admin REST CSP %q", r.header.Get("Content-Security-Policy"))
	}
	if got := do(t, srv.Client(), http.MethodGet, srv.URL+"/v1/models", "", nil).header.Get("X-Frame-Options"); got != "" {
		t.Errorf("inference REST got admin security headers (X-Frame-Options %q)", got)
	}

	big := `{"url":"http://10.0.0.9:1","labels":{"x":"` + strings.Repeat("a", 2048) + `"}}`
	r = do(t, srv.Client(), http.MethodPost, srv.URL+"/admin/v1/workers", big, nil)
	if r.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized admin REST body: status %d, want 413", r.status)
	}
	if code, _, _ := openAIError(t, r); code != apierror.CodePayloadTooLarge {
		t.Errorf("oversized admin REST body: code %q", code)
	}
	// Chunked (no Content-Length) is caught while reading.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/admin/v1/workers", io.MultiReader(strings.NewReader(big)))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = -1
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized chunked admin body: status %d, want 413", resp.StatusCode)
	}

	for _, proto := range []struct {
		name string
		opt  connect.ClientOption
	}{{"connect", connect.WithProtoJSON()}, {"grpc-web", connect.WithGRPCWeb()}} {
		client := adminv1connect.NewAdminServiceClient(srv.Client(), srv.URL, proto.opt)
		_, err := client.AddWorker(t.Context(), &adminv1.AddWorkerRequest{Worker: &adminv1.WorkerSpec{
			Url: "http://10.0.0.9:1", Labels: map[string]string{"x": strings.Repeat("a", 2048)}}})
		if err == nil {
			t.Errorf("%s: oversized AddWorker succeeded", proto.name)
			continue
		}
		if got := apierror.CodeString(err); got != apierror.CodePayloadTooLarge {
			t.Errorf("%s: oversized AddWorker error %v (code %q), want %s", proto.name, err, got, apierror.CodePayloadTooLarge)
		}
	}
}

// listen serves h on a real loopback listener with the given options.
func listen(t *testing.T, h http.Handler, o server.ListenOptions) string {
	t.Helper()
	s, err := server.Listen("127.0.0.1:0", h, o)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		<-done
	})
	return s.Addr().String()
}

// readClosed reports whether the server closed conn (EOF or reset) before the test's 10 s bound.
func readClosed(t *testing.T, conn net.Conn) bool {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.ReadAll(conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return true
}

type connCounter struct {
	mu             sync.Mutex
	open, rejected int
}

func (c *connCounter) AddOpen(_ string, d int) { c.mu.Lock(); c.open += d; c.mu.Unlock() }
func (c *connCounter) IncRejected(string)      { c.mu.Lock(); c.rejected++; c.mu.Unlock() }
func (c *connCounter) get() (int, int)         { c.mu.Lock(); defer c.mu.Unlock(); return c.open, c.rejected }

func TestListenLimits(t *testing.T) {
	t.Parallel()
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })

	t.Run("connection cap", func(t *testing.T) {
		cc := &connCounter{}
		addr := listen(t, ok, server.ListenOptions{MaxConnections: 2, Conns: cc, Name: "main"})
		var held []net.Conn
		for range 2 {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, c)
			// A request proves the server accepted this connection before the next dial.
			if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		extra, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer extra.Close()
		if !readClosed(t, extra) {
			t.Error("connection beyond the cap was not closed")
		}
		// The counters are updated on the server's goroutine: poll them with a deadline.
		deadline := time.Now().Add(5 * time.Second)
		for open, rejected := cc.get(); open != 2 || rejected != 1; open, rejected = cc.get() {
			if time.Now().After(deadline) {
				t.Fatalf("open %d rejected %d, want 2 and 1", open, rejected)
			}
			time.Sleep(5 * time.Millisecond) // polling interval; the condition is re-checked
		}
		for _, c := range held {
			c.Close()
		}
	})

	t.Run("header bytes", func(t *testing.T) {
		addr := listen(t, ok, server.ListenOptions{MaxHeaderBytes: 4096})
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
		req.Header.Set("X-Big", strings.Repeat("a", 16<<10))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("16 KiB header: status %d, want 431", resp.StatusCode)
		}
	})

	t.Run("slow headers", func(t *testing.T) {
		addr := listen(t, ok, server.ListenOptions{ReadHeaderTimeout: 200 * time.Millisecond})
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n") // never finishes the header block
		if !readClosed(t, c) {
			t.Error("a client that never finished its headers kept the connection")
		}
	})
}

func TestBodyAndWriteTimeouts(t *testing.T) {
	t.Parallel()
	readErr := make(chan error, 1)
	writeErr := make(chan error, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/upload", func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		readErr <- err
	})
	mux.HandleFunc("/v1/stream", func(w http.ResponseWriter, r *http.Request) {
		chunk := []byte(strings.Repeat("x", 64<<10))
		for {
			if _, err := w.Write(chunk); err != nil {
				writeErr <- err
				return
			}
			w.(http.Flusher).Flush()
		}
	})
	mux.HandleFunc("/v1/long", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		for range 6 {
			time.Sleep(100 * time.Millisecond) // the work of a long response: 600 ms, twice the body timeout
			if r.Context().Err() != nil {
				_, _ = io.WriteString(w, "cancelled")
				return
			}
			_, _ = io.WriteString(w, ".")
			w.(http.Flusher).Flush()
		}
		_, _ = io.WriteString(w, "ok")
	})
	mux.HandleFunc("/v1/late", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		time.Sleep(600 * time.Millisecond) // an engine slow to answer: twice the write timeout
		_, _ = io.WriteString(w, "ok")
	})
	hs, err := server.NewHandlers(server.Options{REST: mux, BodyReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	addr := listen(t, hs.Main, server.ListenOptions{})

	t.Run("slow body", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = io.WriteString(c, "POST /v1/upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
		select {
		case err := <-readErr:
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Errorf("handler read error %v, want a timeout", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a body that never arrives held the handler")
		}
	})

	t.Run("client stops reading", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = io.WriteString(c, "GET /v1/stream HTTP/1.1\r\nHost: x\r\n\r\n") // and never reads
		select {
		case err := <-writeErr:
			if err == nil {
				t.Error("nil write error")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a client that stopped reading held the handler")
		}
	})

	t.Run("late answers on one connection", func(t *testing.T) {
		// The write deadline armed when a request starts (and the one its predecessor on the
		// connection left) expires while the handler waits; the answer must still be written.
		tr := &http.Transport{MaxConnsPerHost: 1}
		defer tr.CloseIdleConnections()
		for i := range 2 {
			resp, err := (&http.Client{Transport: tr}).Post("http://"+addr+"/v1/late", "application/json", strings.NewReader(`"hello"`))
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || string(b) != "ok" {
				t.Errorf("request %d: answer %q (%v), want ok", i, b, err)
			}
		}
	})

	t.Run("long response after a body", func(t *testing.T) {
		// The read deadline must not outlive the body: on HTTP/1.1 the server's background read would
		// hit it and cancel a response that runs longer than the body timeout.
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Post("http://"+addr+"/v1/long", "application/json", strings.NewReader(`"hello"`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "......ok" {
			t.Errorf("long response %q, want six ticks and ok", b)
		}
	})
}
