package backend

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/sluicegw/sluice/internal/backend/enginerpc"
	"github.com/sluicegw/sluice/internal/backend/h1"
	"github.com/sluicegw/sluice/internal/backend/workerrpc"
)

// HTTPClientOptions tunes the gateway's upstream HTTP client. Zero values take the defaults.
type HTTPClientOptions struct {
	// MaxIdleConnsPerHost is the keep-alive pool per engine (default 1024: thousands of requests per
	// second to one engine must not churn connections).
	MaxIdleConnsPerHost int
	// MaxIdleConns bounds the whole pool (default 16384).
	MaxIdleConns int
	// DialTimeout bounds TCP connect (default 5s).
	DialTimeout time.Duration
	// KeepAlive is the TCP keep-alive period (default 30s).
	KeepAlive time.Duration
	// IdleConnTimeout closes pooled connections idle this long (default 90s).
	IdleConnTimeout time.Duration
	// ResponseHeaderTimeout, when positive, bounds the wait for a response head. Off by default: a
	// decode head may legitimately wait for a long prefill; requests are bounded by their context.
	ResponseHeaderTimeout time.Duration
	// TLSClientConfig is used for https:// engines (which may negotiate HTTP/2).
	TLSClientConfig *tls.Config
	// GRPC handles grpc:// and grpcs:// URLs. Nil installs an enginerpc.Transport for workers registered
	// as engines (EngineRPC), falling back to NewGRPCTransport("", NewH2CClient(...)), which takes each
	// request's role from RoleHeader.
	GRPC http.RoundTripper
	// DisableGRPC leaves grpc:// unsupported.
	DisableGRPC bool
}

func (o HTTPClientOptions) withDefaults() HTTPClientOptions {
	if o.MaxIdleConnsPerHost <= 0 {
		o.MaxIdleConnsPerHost = 1024
	}
	if o.MaxIdleConns <= 0 {
		o.MaxIdleConns = 16384
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.KeepAlive <= 0 {
		o.KeepAlive = 30 * time.Second
	}
	if o.IdleConnTimeout <= 0 {
		o.IdleConnTimeout = 90 * time.Second
	}
	return o
}

// h1Options hands the lean transport its share of the (defaulted) options.
func (o HTTPClientOptions) h1Options() h1.Options {
	return h1.Options{
		DialTimeout:           o.DialTimeout,
		KeepAlive:             o.KeepAlive,
		MaxIdlePerHost:        o.MaxIdleConnsPerHost,
		IdleTimeout:           o.IdleConnTimeout,
		ResponseHeaderTimeout: o.ResponseHeaderTimeout,
	}
}

// NewHTTPClient returns the client the gateway uses to talk to engines. It has no overall Timeout
// (requests are bounded by their context; a streamed decode may run for minutes), a large keep-alive
// pool, HTTP/1.1 to http:// engines (which is what SGLang and vLLM serve), no transparent
// decompression (bodies are relayed as they are), and grpc:// support through the worker-protocol
// transport unless disabled.
func NewHTTPClient(opts HTTPClientOptions) *http.Client {
	o := opts.withDefaults()
	dialer := &net.Dialer{Timeout: o.DialTimeout, KeepAlive: o.KeepAlive}
	tr := &http.Transport{
		Proxy:                 nil, // engines are addressed directly, never through an environment proxy
		DialContext:           dialer.DialContext,
		MaxIdleConns:          o.MaxIdleConns,
		MaxIdleConnsPerHost:   o.MaxIdleConnsPerHost,
		IdleConnTimeout:       o.IdleConnTimeout,
		ResponseHeaderTimeout: o.ResponseHeaderTimeout,
		TLSHandshakeTimeout:   o.DialTimeout,
		ExpectContinueTimeout: 0,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
		TLSClientConfig:       cloneTLS(o.TLSClientConfig),
		// 8 KiB per direction: each pooled connection keeps its buffers, and 32 KiB ones made up most of
		// the gateway's ~75 KiB per registered worker (28 KiB with 8 KiB) with no measurable throughput gain.
		WriteBufferSize: 8 << 10,
		ReadBufferSize:  8 << 10,
	}
	ut := &upstreamTransport{http: tr, h1: h1.New(o.h1Options())}
	if !o.DisableGRPC {
		ut.grpc = o.GRPC
		if ut.grpc == nil {
			// Workers registered as engines (enginerpc.Transport.SetEngine) speak their engine's own
			// gRPC; every other grpc:// worker speaks sluice.worker.v1.
			h2c := NewH2CClient(opts)
			ut.grpc = enginerpc.NewTransport(h2c, workerrpc.NewGRPCTransport("", h2c))
		}
	}
	return &http.Client{
		Transport: ut,
		// Engines do not redirect; following one would resend a prompt somewhere unexpected.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// upstreamTransport sends http:// requests to the lean HTTP/1.1 transport (h1.go), grpc:// and
// grpcs:// requests to the worker-protocol transport, and everything else (https://) to net/http's.
type upstreamTransport struct {
	http *http.Transport
	h1   *h1.Transport
	grpc http.RoundTripper
}

func (t *upstreamTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.URL.Scheme {
	case "http":
		return t.h1.RoundTrip(req)
	case "grpc", "grpcs":
		if t.grpc != nil {
			return t.grpc.RoundTrip(req)
		}
	}
	return t.http.RoundTrip(req)
}

// WorkerRPC returns the worker-protocol transport of a client NewHTTPClient built, for callers that
// hand it typed calls (workerrpc.GRPCTransport.Send); nil for any other client or transport.
func WorkerRPC(c *http.Client) *workerrpc.GRPCTransport {
	if c == nil {
		return nil
	}
	ut, ok := c.Transport.(*upstreamTransport)
	if !ok {
		return nil
	}
	grpc := ut.grpc
	if et, ok := grpc.(*enginerpc.Transport); ok {
		grpc = et.Fallback()
	}
	t, _ := grpc.(*workerrpc.GRPCTransport)
	return t
}

// EngineRPC returns the engine-protocol transport of a client NewHTTPClient built, where grpc://
// workers that speak an engine's own gRPC are registered; nil for any other client or transport.
func EngineRPC(c *http.Client) *enginerpc.Transport {
	if c == nil {
		return nil
	}
	ut, ok := c.Transport.(*upstreamTransport)
	if !ok {
		return nil
	}
	t, _ := ut.grpc.(*enginerpc.Transport)
	return t
}

// CloseIdleConnections closes the idle connections of every transport.
func (t *upstreamTransport) CloseIdleConnections() {
	t.h1.CloseIdleConnections()
	t.http.CloseIdleConnections()
	if c, ok := t.grpc.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// NewH2CClient returns a client speaking HTTP/2: without TLS (h2c) to http:// URLs, as gRPC over
// grpc:// needs, and over TLS (with opts.TLSClientConfig: extra CAs, client certificate) to https://
// URLs, as grpcs:// needs.
func NewH2CClient(opts HTTPClientOptions) *http.Client {
	o := opts.withDefaults()
	dialer := &net.Dialer{Timeout: o.DialTimeout, KeepAlive: o.KeepAlive}
	tr := &http.Transport{
		DialContext:        dialer.DialContext,
		MaxIdleConns:       o.MaxIdleConns,
		IdleConnTimeout:    o.IdleConnTimeout,
		DisableCompression: true,
		TLSClientConfig:    cloneTLS(o.TLSClientConfig),
	}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetUnencryptedHTTP2(true)
	tr.Protocols.SetHTTP2(true)
	return &http.Client{Transport: tr}
}

// cloneTLS gives each transport its own copy: a transport setting up HTTP/2 writes to its config
// (NextProtos) while another may be dialing with it. The reloading callbacks are kept.
func cloneTLS(c *tls.Config) *tls.Config {
	if c == nil {
		return nil
	}
	return c.Clone()
}

// Upstream sends requests to engines.
type Upstream struct {
	Client *http.Client
	// APIKey, when set, is sent as "Authorization: Bearer <key>", replacing any forwarded one.
	APIKey string
}

// Do sends one request with the given body (nil for none) and headers (copied, not modified), with
// Content-Type: application/json when there is a body, Accept: application/json, text/event-stream
// unless the headers set one, and the API key. A non-2xx response is returned as a response, not an
// error; errors are transport failures or context ends.
func (u *Upstream) Do(ctx context.Context, method, url string, body []byte, header http.Header) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, err
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if req.Header.Get("Accept") == "" {
		req.Header.Set("Accept", "application/json, text/event-stream")
	}
	if u.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+u.APIKey)
	}
	c := u.Client
	if c == nil {
		c = http.DefaultClient
	}
	return c.Do(req)
}

// ForwardHeaders copies the allow-listed client headers to an upstream request: authorization,
// x-request-id and x-request-id-*, x-correlation-id, traceparent, tracestate, and the given routing
// key headers (case-insensitive). Everything else (cookies, hop-by-hop headers, content-length, the
// gateway's own control headers) stays behind. A worker with its own API key overrides the forwarded
// authorization (Upstream.Do does that).
func ForwardHeaders(dst, src http.Header, routingKeyHeaders ...string) {
	for k, vs := range src {
		if !forwardable(k, routingKeyHeaders) {
			continue
		}
		ck := http.CanonicalHeaderKey(k)
		dst[ck] = slices.Clone(vs)
	}
}

func forwardable(k string, extra []string) bool {
	switch {
	case strings.EqualFold(k, "Authorization"),
		strings.EqualFold(k, "X-Request-Id"),
		strings.EqualFold(k, "X-Correlation-Id"),
		strings.EqualFold(k, "Traceparent"),
		strings.EqualFold(k, "Tracestate"):
		return true
	case len(k) > len("X-Request-Id-") && strings.EqualFold(k[:len("X-Request-Id-")], "X-Request-Id-"):
		return true
	}
	for _, h := range extra {
		if strings.EqualFold(k, h) {
			return true
		}
	}
	return false
}

// NewPostRequest builds a POST of a JSON body to baseURL+path, as http.NewRequestWithContext would,
// with fewer allocations on the per-leg path: the URL is split rather than parsed when it is a plain
// scheme://host[/prefix], and the body is read from body itself (also available through GetBody).
func NewPostRequest(ctx context.Context, baseURL, path string, body []byte) (*http.Request, error) {
	u := splitURL(baseURL, path)
	if u == nil {
		return http.NewRequestWithContext(ctx, http.MethodPost, baseURL+path, bytes.NewReader(body))
	}
	if ctx == nil {
		return nil, errors.New("backend: nil context")
	}
	// The fields http.NewRequestWithContext sets, without its parse of a URL we already have.
	r := http.Request{Method: http.MethodPost, URL: u, Host: u.Host, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: make(http.Header), Body: &bytesBody{b: body}, ContentLength: int64(len(body)),
		GetBody: func() (io.ReadCloser, error) { return &bytesBody{b: body}, nil }}
	return r.WithContext(ctx), nil
}

// splitURL builds baseURL+path for a base of the form scheme://host[:port][/prefix] without parsing;
// nil for anything else (user info, query, fragment, escapes).
func splitURL(baseURL, path string) *url.URL {
	scheme, rest, ok := strings.Cut(baseURL, "://")
	if !ok || scheme == "" || strings.ContainsAny(rest, "@?#%") || strings.ContainsAny(path, "?#%") {
		return nil
	}
	host, prefix := rest, ""
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		host, prefix = rest[:i], strings.TrimSuffix(rest[i:], "/")
	}
	if host == "" {
		return nil
	}
	if prefix != "" {
		path = prefix + path
	}
	return &url.URL{Scheme: scheme, Host: host, Path: path}
}

// bytesBody is a request body read from a byte slice.
type bytesBody struct {
	b   []byte
	off int
}

func (r *bytesBody) Read(p []byte) (int, error) {
	if r.off >= len(r.b) {
		return 0, io.EOF
	}
	n := copy(p, r.b[r.off:])
	r.off += n
	return n, nil
}

func (*bytesBody) Close() error { return nil }

// RoundTrip sends req through c's transport directly, without http.Client's per-request work
// (header copies for redirects, timers): the gateway's client follows no redirects and sets no
// timeout, so the result is what c.Do returns, errors wrapped the same way. Any other client goes
// through Do.
func RoundTrip(c *http.Client, req *http.Request) (*http.Response, error) {
	if c.Transport == nil || c.Timeout != 0 || c.Jar != nil {
		return c.Do(req)
	}
	resp, err := c.Transport.RoundTrip(req)
	if err != nil {
		method := req.Method
		if method == "" {
			method = http.MethodGet
		}
		return nil, &url.Error{Op: method[:1] + strings.ToLower(method[1:]), URL: req.URL.Redacted(), Err: err}
	}
	return resp, nil
}
