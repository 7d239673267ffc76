package backend

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/backend/workerrpc"
	"github.com/sluicegw/sluice/internal/tlsconf/tlstest"
)

func TestForwardHeaders(t *testing.T) {
	t.Parallel()
	src := http.Header{
		"Authorization":          {"Bearer client"},
		"X-Request-Id":           {"r1"},
		"X-Request-Id-Trace":     {"t"},
		"X-Request-Idx":          {"no: not the x-request-id- prefix"},
		"X-Correlation-Id":       {"c"},
		"Traceparent":            {"00-abc-def-01"},
		"Tracestate":             {"k=v"},
		"X-Sluice-Routing-Key":   {"user-7"},
		"X-Smg-Routing-Key":      {"alias"},
		"Cookie":                 {"secret"},
		"Connection":             {"keep-alive"},
		"Content-Length":         {"12"},
		"X-Sluice-Target-Worker": {"0"},
		workerrpc.RoleHeader:     {"decode"},
		"x-lowercase-routing":    {"raw map key"},
	}
	dst := http.Header{"Existing": {"kept"}}
	ForwardHeaders(dst, src, "x-sluice-routing-key", "X-SMG-Routing-Key", "X-Lowercase-Routing")
	want := http.Header{
		"Existing":             {"kept"},
		"Authorization":        {"Bearer client"},
		"X-Request-Id":         {"r1"},
		"X-Request-Id-Trace":   {"t"},
		"X-Correlation-Id":     {"c"},
		"Traceparent":          {"00-abc-def-01"},
		"Tracestate":           {"k=v"},
		"X-Sluice-Routing-Key": {"user-7"},
		"X-Smg-Routing-Key":    {"alias"},
		"X-Lowercase-Routing":  {"raw map key"},
	}
	if diff := cmp.Diff(want, dst); diff != "" {
		t.Errorf("ForwardHeaders (-want +got):\n%s", diff)
	}
	// The copy is independent of the source.
	dst["Authorization"][0] = "changed"
	if src["Authorization"][0] != "Bearer client" {
		t.Error("ForwardHeaders aliased the source slice")
	}
}

func TestUpstreamDo(t *testing.T) {
	t.Parallel()
	type seen struct {
		method, path, ctype, accept, auth, reqID, body string
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.URL.Path, r.Header.Get("Content-Type"), r.Header.Get("Accept"),
			r.Header.Get("Authorization"), r.Header.Get("X-Request-Id"), string(b)}
		w.WriteHeader(http.StatusTeapot)
	}))
	defer srv.Close()
	client := NewHTTPClient(HTTPClientOptions{})
	defer client.CloseIdleConnections()

	tests := []struct {
		name   string
		apiKey string
		header http.Header
		body   []byte
		want   seen
	}{
		{
			name:   "worker key replaces client authorization",
			apiKey: "worker-key",
			header: http.Header{"Authorization": {"Bearer client"}, "X-Request-Id": {"r"}},
			body:   []byte(`{"a":1}`),
			want:   seen{"POST", "/generate", "application/json", "application/json, text/event-stream", "Bearer worker-key", "r", `{"a":1}`},
		},
		{
			name:   "client authorization forwarded without a worker key",
			header: http.Header{"Authorization": {"Bearer client"}, "Accept": {"text/event-stream"}},
			body:   []byte(`{}`),
			want:   seen{"POST", "/generate", "application/json", "text/event-stream", "Bearer client", "", `{}`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := &Upstream{Client: client, APIKey: tt.apiKey}
			resp, err := u.Do(context.Background(), http.MethodPost, srv.URL+"/generate", tt.body, tt.header)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusTeapot {
				t.Errorf("status %d: a non-2xx answer must come back as a response", resp.StatusCode)
			}
			if diff := cmp.Diff(tt.want, <-got, cmp.AllowUnexported(seen{})); diff != "" {
				t.Errorf("request (-want +got):\n%s", diff)
			}
			if tt.header.Get("Authorization") != "Bearer client" {
				t.Error("Do modified the caller's headers")
			}
		})
	}
}

func TestNewHTTPClientNoRedirects(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/elsewhere", http.StatusFound)
	}))
	defer srv.Close()
	c := NewHTTPClient(HTTPClientOptions{})
	defer c.CloseIdleConnections()
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Errorf("status %d: the client followed a redirect", resp.StatusCode)
	}
	if c.Timeout != 0 {
		t.Errorf("client has an overall Timeout %v", c.Timeout)
	}
	tr := c.Transport.(*upstreamTransport).http
	if tr.MaxIdleConnsPerHost < 1024 || tr.ForceAttemptHTTP2 || tr.Proxy != nil {
		t.Errorf("transport not tuned: %+v", tr)
	}
}

// TestNewPostRequest: the split URL is the one url.Parse gives for base+path, with the body, its
// length and GetBody as http.NewRequest sets them.
func TestNewPostRequest(t *testing.T) {
	t.Parallel()
	for _, base := range []string{"http://127.0.0.1:8000", "http://h:1/", "http://h:1/prefix", "https://engine.example",
		"http://u:p@h:1", "http://h:1/a?x=1", "grpc://h:2"} {
		req, err := NewPostRequest(t.Context(), base, "/v1/chat/completions", []byte(`{"a":1}`))
		if err != nil {
			t.Fatal(err)
		}
		want, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", nil)
		if strings.HasSuffix(base, "/") {
			want, _ = http.NewRequest(http.MethodPost, strings.TrimSuffix(base, "/")+"/v1/chat/completions", nil)
		}
		if req.URL.String() != want.URL.String() || req.Host != want.Host || req.Method != http.MethodPost {
			t.Errorf("%s: URL %s host %s, want %s host %s", base, req.URL, req.Host, want.URL, want.Host)
		}
		if req.Proto != want.Proto || req.ProtoMajor != 1 || req.ProtoMinor != 1 || req.Header == nil || req.Context() != t.Context() {
			t.Errorf("%s: proto %s %d.%d, header %v, context %v: want %s 1.1, a header, the caller's context",
				base, req.Proto, req.ProtoMajor, req.ProtoMinor, req.Header, req.Context(), want.Proto)
		}
		b, _ := io.ReadAll(req.Body)
		rb, _ := req.GetBody()
		b2, _ := io.ReadAll(rb)
		if string(b) != `{"a":1}` || string(b2) != `{"a":1}` || req.ContentLength != 7 {
			t.Errorf("%s: body %q, GetBody %q, length %d", base, b, b2, req.ContentLength)
		}
	}
}

// TestRoundTripErrorsAsClientDo: the direct round trip fails with the same error http.Client.Do
// gives.
func TestRoundTripErrorsAsClientDo(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	c := NewHTTPClient(HTTPClientOptions{})
	mk := func() *http.Request {
		req, _ := NewPostRequest(t.Context(), "http://"+addr, "/v1/completions", []byte("{}"))
		return req
	}
	_, viaDo := c.Do(mk())
	_, direct := RoundTrip(c, mk())
	var ue *url.Error
	if viaDo == nil || direct == nil || !errors.As(direct, &ue) || direct.Error() != viaDo.Error() {
		t.Errorf("RoundTrip error %v, Do error %v", direct, viaDo)
	}
}

// TestUpstreamTransportByScheme: http:// engines go through h1Transport; https:// engines through
// net/http's Transport with the configured TLS (here a private CA and a client certificate the
// engine requires), never through h1Transport, which speaks no TLS; the caller's config is not
// written to.
func TestUpstreamTransportByScheme(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "engine CA")
	srvLeaf, cliLeaf := ca.Issue(t, "engine"), ca.Issue(t, "gateway")
	pair := func(l *tlstest.Leaf) tls.Certificate {
		c, err := tls.X509KeyPair(l.CertPEM, l.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, r.URL.Scheme+"ok")
	})
	tlsSrv := httptest.NewUnstartedServer(handler)
	tlsSrv.TLS = &tls.Config{Certificates: []tls.Certificate{pair(srvLeaf)}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool()}
	tlsSrv.StartTLS()
	defer tlsSrv.Close()
	plain := httptest.NewServer(handler)
	defer plain.Close()

	cfg := &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{pair(cliLeaf)}}
	c := NewHTTPClient(HTTPClientOptions{TLSClientConfig: cfg})
	ut := c.Transport.(*upstreamTransport)
	defer ut.CloseIdleConnections()
	h1Idle := ut.h1.IdleConns
	post := func(c *http.Client, base string) (string, error) {
		req, err := NewPostRequest(t.Context(), base, "/v1/chat/completions", []byte("{}"))
		if err != nil {
			return "", err
		}
		resp, err := RoundTrip(c, req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	if got, err := post(c, tlsSrv.URL); err != nil || got != "ok" {
		t.Fatalf("https engine with a client certificate: %q, %v", got, err)
	}
	if n := h1Idle(); n != 0 {
		t.Errorf("h1Transport holds %d connections after an https request, want 0", n)
	}
	if got, err := post(c, plain.URL); err != nil || got != "ok" {
		t.Fatalf("http engine: %q, %v", got, err)
	}
	if n := h1Idle(); n != 1 {
		t.Errorf("h1Transport holds %d connections after an http request, want 1", n)
	}
	if len(cfg.NextProtos) != 0 {
		t.Errorf("the caller's TLS config was written to: NextProtos %v", cfg.NextProtos)
	}
	// Without the client certificate the engine refuses the handshake.
	noCert := NewHTTPClient(HTTPClientOptions{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}})
	defer noCert.CloseIdleConnections()
	if _, err := post(noCert, tlsSrv.URL); err == nil {
		t.Error("https engine that requires a client certificate answered a gateway without one")
	}
}

// BenchmarkNewPostRequest: one PD leg's request (two per PD request).
func BenchmarkNewPostRequest(b *testing.B) {
	body := []byte(`{"model":"m"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := NewPostRequest(b.Context(), "http://127.0.0.1:8000", "/generate", body); err != nil {
			b.Fatal(err)
		}
	}
}
