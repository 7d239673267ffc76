package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/structpb"

	openaiv1 "github.com/sluicegw/sluice/gen/sluice/openai/v1"
	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
	"github.com/sluicegw/sluice/internal/tlsconf/tlstest"
)

// servedCN dials addr and returns the common name of the certificate the server presents.
func servedCN(t *testing.T, addr string, roots *x509.CertPool) string {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatalf("TLS dial: %v", err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
}

// TestTLSCertificateRotation serves HTTPS and gRPC over TLS with a self-signed CA's certificate, rotates
// the certificate on disk while an openai-go client and a grpc-go client send requests, and checks that
// no request fails, new handshakes see the new certificate, and the gRPC connection opened before the
// rotation keeps serving.
func TestTLSCertificateRotation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "sluice test CA")
	certPath, keyPath := ca.Issue(t, "gateway-1").WriteFiles(t, dir, "tls")
	c := startCluster(t, sim.ClusterConfig{Regular: 2, Engine: instantEngine()})
	var urls []string
	for _, e := range c.ByRole(sim.RoleRegular) {
		urls = append(urls, e.URL())
	}
	gw := startGateway(t, app.Options{}, "--worker-urls", strings.Join(urls, ","), "--tls-cert-path", certPath, "--tls-key-path", keyPath)
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	if gw.Scheme() != "https" {
		t.Fatalf("scheme %q, want https", gw.Scheme())
	}
	base := "https://" + gw.Addr()

	// Plaintext is refused on a TLS port.
	if resp, err := http.Get("http://" + gw.Addr() + "/health"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP to the TLS port: status %d, want 400", resp.StatusCode)
		}
	}

	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	rest := openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("unused"),
		option.WithHTTPClient(&http.Client{Transport: tr}), option.WithMaxRetries(0))
	cc, err := grpc.NewClient(gw.Addr(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	typed := openaiv1.NewOpenAIServiceClient(cc)
	req := &openaiv1.CreateChatCompletionRequest{Model: simModel, MaxTokens: ptr[int32](4),
		Messages: []*openaiv1.ChatMessage{{Role: "user", Content: structpb.NewStringValue("rotate")}}}
	if _, err := typed.CreateChatCompletion(context.Background(), req); err != nil {
		t.Fatalf("gRPC over TLS before rotation: %v", err)
	}
	if cn := servedCN(t, gw.Addr(), ca.Pool()); cn != "gateway-1" {
		t.Fatalf("served certificate %q, want gateway-1", cn)
	}

	// Load: both clients send requests until stop is closed.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ok, failed atomic.Int64
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				var err error
				if i%2 == 0 {
					_, err = rest.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: simModel,
						Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("rotate")}, MaxTokens: openai.Int(4)})
				} else {
					_, err = typed.CreateChatCompletion(ctx, req)
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, &err)
				} else {
					ok.Add(1)
				}
			}
		})
	}
	waitFor(t, "requests before rotation", 30*time.Second, func() bool { return ok.Load() >= 20 })
	ca.Issue(t, "gateway-2").WriteFiles(t, dir, "tls")
	waitFor(t, "new handshakes to see the new certificate", 30*time.Second, func() bool {
		return servedCN(t, gw.Addr(), ca.Pool()) == "gateway-2"
	})
	after := ok.Load()
	// New connections (a fresh transport) handshake against the new certificate and verify it.
	fresh := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}
	resp, err := (&http.Client{Transport: fresh}).Get(base + "/v1/models")
	if err != nil {
		t.Fatalf("new HTTPS connection after rotation: %v", err)
	}
	resp.Body.Close()
	fresh.CloseIdleConnections()
	if resp.TLS == nil || resp.TLS.PeerCertificates[0].Subject.CommonName != "gateway-2" {
		t.Errorf("new connection saw %v, want gateway-2", resp.TLS.PeerCertificates[0].Subject.CommonName)
	}
	waitFor(t, "requests after rotation", 30*time.Second, func() bool { return ok.Load() >= after+20 })
	close(stop)
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Errorf("%d of %d requests failed across the rotation; first: %v", n, n+ok.Load(), *firstErr.Load())
	}
	if got := metricValue(t, gw, `sluice_file_reloads_total{file="tls_server",result="ok"}`); got < 1 {
		t.Errorf("reload counter %v, want >= 1", got)
	}
}

// metricValue reads one sample from the gateway's /metrics (served in-process) by its exact series text;
// 0 when absent.
func metricValue(t *testing.T, gw *gateway, series string) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	gw.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for line := range strings.SplitSeq(rec.Body.String(), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return 0
}

// mtlsProxy is a TLS front for a simulated engine that requires a client certificate from ca: a real
// HTTPS (and gRPC over TLS) server, as a worker behind mTLS would be. It forwards gRPC to the engine
// over h2c and HTTP over HTTP/1.1.
func mtlsProxy(t *testing.T, ca *tlstest.CA, target string) string {
	t.Helper()
	leaf := ca.Issue(t, "worker")
	cert, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	// gRPC goes to the engine over h2c, the rest over HTTP/1.1: an engine's HTTP server speaks no h2c.
	h2c := &http.Transport{Protocols: new(http.Protocols)}
	h2c.Protocols.SetUnencryptedHTTP2(true)
	h1 := &http.Transport{}
	var handshakes atomic.Int64
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(u); r.Out.Host = u.Host },
		Transport: roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			if strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
				return h2c.RoundTrip(r)
			}
			return h1.RoundTrip(r)
		}),
		FlushInterval: -1,
		ErrorLog:      log.New(io.Discard, "", 0),
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool(),
		NextProtos: []string{"h2", "http/1.1"}, MinVersion: tls.VersionTLS12,
		VerifyConnection: func(tls.ConnectionState) error { handshakes.Add(1); return nil },
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	srv := &http.Server{Handler: proxy, Protocols: &p, TLSConfig: cfg, ErrorLog: log.New(io.Discard, "", 0)}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
		h2c.CloseIdleConnections()
		h1.CloseIdleConnections()
	})
	return ln.Addr().String()
}

// TestMTLSToWorkers reaches https:// and grpcs:// workers that require a client certificate: with
// --ca-cert-paths and --client-cert-path/--client-key-path the health checks pass and requests are
// served; without the client certificate the workers never become ready.
func TestMTLSToWorkers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "worker CA")
	caPath := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caPath, ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	clientCert, clientKey := ca.Issue(t, "sluice-gateway").WriteFiles(t, dir, "client")
	eng := instantEngine()
	eng.GRPC = true
	c := startCluster(t, sim.ClusterConfig{Regular: 2, Engine: eng})
	engines := c.ByRole(sim.RoleRegular)
	httpsWorker := "https://" + mtlsProxy(t, ca, engines[0].URL())
	grpcsWorker := "grpcs://" + mtlsProxy(t, ca, engines[1].URL())

	for _, w := range []struct{ name, url string }{{"https", httpsWorker}, {"grpcs", grpcsWorker}} {
		t.Run(w.name, func(t *testing.T) {
			args := []string{"--worker-urls", w.url, "--model-id", simModel, "--health-check-interval-secs", "1"}
			gw := startGateway(t, app.Options{}, append(args, "--ca-cert-paths", caPath,
				"--client-cert-path", clientCert, "--client-key-path", clientKey)...)
			waitFor(t, "worker ready over mTLS", 15*time.Second, func() bool { return gw.Ready() == nil })
			client := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
			got, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: simModel,
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("over mTLS")}, MaxTokens: openai.Int(4)})
			if err != nil {
				t.Fatalf("chat over mTLS: %v", err)
			}
			if len(got.Choices) != 1 || got.Choices[0].Message.Content == "" {
				t.Errorf("chat over mTLS: %+v", got)
			}

			// Without a client certificate the worker refuses the handshake: the health checks fail, so
			// it never becomes ready and requests get 503.
			noCert := startGateway(t, app.Options{}, append(args, "--ca-cert-paths", caPath)...)
			if err := noCert.Ready(); err == nil {
				t.Fatal("gateway without a client certificate is ready")
			}
			noCertClient := openai.NewClient(option.WithBaseURL(noCert.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
			_, err = noCertClient.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: simModel,
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("no cert")}, MaxTokens: openai.Int(4)})
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusServiceUnavailable {
				t.Errorf("request without client certificate: %v, want 503", err)
			}
		})
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
