package tlsconf_test

import (
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicegw/sluice/internal/tlsconf"
	"github.com/sluicegw/sluice/internal/tlsconf/tlstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is advanced by the test; KeyPair only compares times.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestKeyPairReloadsOnChange(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	first, second := ca.Issue(t, "first"), ca.Issue(t, "second")
	certPath, keyPath := first.WriteFiles(t, dir, "server")

	clock := &fakeClock{now: time.Unix(1000, 0)}
	var reloads []error
	kp, err := tlsconf.LoadKeyPair(certPath, keyPath, tlsconf.Options{
		Name: "server", Now: clock.Now, CheckInterval: time.Second,
		OnReload: func(_ string, err error) { reloads = append(reloads, err) },
	})
	if err != nil {
		t.Fatal(err)
	}
	subject := func() string { return kp.Certificate().Leaf.Subject.CommonName }
	if got := subject(); got != "first" {
		t.Fatalf("initial certificate %q, want first", got)
	}

	second.WriteFiles(t, dir, "server")
	if got := subject(); got != "first" {
		t.Errorf("certificate changed to %q before the check interval passed", got)
	}
	clock.Add(time.Second)
	if got := subject(); got != "second" {
		t.Errorf("after the check interval: certificate %q, want second", got)
	}

	// Half-written rotation: a new certificate with the old key does not parse; the old pair stays.
	third := ca.Issue(t, "third")
	tlstest.WriteAtomic(t, certPath, third.CertPEM)
	clock.Add(time.Second)
	if got := subject(); got != "second" {
		t.Errorf("mismatched pair: certificate %q, want second kept", got)
	}
	tlstest.WriteAtomic(t, keyPath, third.KeyPEM)
	clock.Add(time.Second)
	if got := subject(); got != "third" {
		t.Errorf("completed rotation: certificate %q, want third", got)
	}

	// A deleted file keeps the current certificate in service.
	if err := os.Remove(keyPath); err != nil {
		t.Fatal(err)
	}
	clock.Add(time.Second)
	if got := subject(); got != "third" {
		t.Errorf("missing key file: certificate %q, want third kept", got)
	}

	var ok, failed int
	for _, e := range reloads {
		if e == nil {
			ok++
		} else {
			failed++
		}
	}
	if ok != 2 || failed != 2 {
		t.Errorf("reload reports: %d ok, %d failed (%v); want 2 and 2", ok, failed, reloads)
	}
}

func TestLoadKeyPairErrors(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	a, b := ca.Issue(t, "a"), ca.Issue(t, "b")
	certA, _ := a.WriteFiles(t, dir, "a")
	_, keyB := b.WriteFiles(t, dir, "b")
	if _, err := tlsconf.LoadKeyPair(certA, keyB, tlsconf.Options{Name: "server"}); err == nil {
		t.Error("mismatched certificate and key loaded")
	}
	if _, err := tlsconf.LoadKeyPair(filepath.Join(dir, "missing.crt"), keyB, tlsconf.Options{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v, want ErrNotExist", err)
	}
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := tlsconf.Client([]string{junk}, nil); !errors.Is(err, tlsconf.ErrNoCertificates) {
		t.Errorf("junk CA file: err = %v, want ErrNoCertificates", err)
	}
	if cfg, err := tlsconf.Client(nil, nil); cfg != nil || err != nil {
		t.Errorf("Client(nil, nil) = %v, %v; want nil, nil", cfg, err)
	}
}

// TestMutualTLS runs a real TLS server that requires a client certificate from the test CA, and checks
// that Client's configuration verifies the server with the CA file and presents the client pair.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "worker CA")
	server := ca.Issue(t, "worker")
	client := ca.Issue(t, "gateway")
	caPath := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caPath, ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	sCert, sKey := server.WriteFiles(t, dir, "worker")
	cCert, cKey := client.WriteFiles(t, dir, "gateway")

	sk, err := tlsconf.LoadKeyPair(sCert, sKey, tlsconf.Options{Name: "server"})
	if err != nil {
		t.Fatal(err)
	}
	// A plain http.Server on a TLS listener: httptest's StartTLS would install its own certificate.
	scfg := tlsconf.Server(sk)
	scfg.ClientAuth = tls.RequireAndVerifyClientCert
	scfg.ClientCAs = ca.Pool()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", scfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte(r.TLS.PeerCertificates[0].Subject.CommonName))
		}),
		ErrorLog: log.New(io.Discard, "", 0),
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close(); <-done }()
	url := "https://" + ln.Addr().String()

	get := func(cfg *tls.Config) (string, error) {
		tr := &http.Transport{TLSClientConfig: cfg}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Get(url)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		buf := make([]byte, 64)
		n, _ := resp.Body.Read(buf)
		return string(buf[:n]), nil
	}

	ck, err := tlsconf.LoadKeyPair(cCert, cKey, tlsconf.Options{Name: "client"})
	if err != nil {
		t.Fatal(err)
	}
	withCert, err := tlsconf.Client([]string{caPath}, ck)
	if err != nil {
		t.Fatal(err)
	}
	got, err := get(withCert)
	if err != nil || got != "gateway" {
		t.Errorf("mTLS request = %q, %v; want the server to see client cert \"gateway\"", got, err)
	}

	withoutCert, err := tlsconf.Client([]string{caPath}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := get(withoutCert); err == nil {
		t.Error("request without a client certificate succeeded against a server requiring one")
	}
	if _, err := get(&tls.Config{MinVersion: tls.VersionTLS12}); err == nil {
		t.Error("request trusting only system roots verified a test-CA server")
	}

	// The server refuses TLS 1.1.
	conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: ca.Pool(), MaxVersion: tls.VersionTLS11, ServerName: "localhost"})
	if err == nil {
		conn.Close()
		t.Error("TLS 1.1 handshake succeeded")
	}
	var ne net.Error
	_ = errors.As(err, &ne) // any handshake error will do; the type varies by Go version
}
