// Package tlsconf builds the gateway's TLS configurations: the listeners' (TLS 1.2+, ALPN h2 and
// http/1.1, the certificate re-read from disk when its files change) and the upstream client's (extra CA
// roots for https:// and grpcs:// workers, and a client certificate for mTLS, also re-read).
//
// # Concurrency Model
//
// A [KeyPair] has no goroutine. Handshakes call [KeyPair.GetCertificate] or
// [KeyPair.GetClientCertificate] concurrently; at most once per check interval one of them re-reads the
// files (under a mutex, off the fast path) and, when their bytes changed and parse, publishes the new
// certificate through an atomic pointer. Handshakes in progress keep the certificate they started with;
// established connections are never touched, so a rotation drops nothing.
package tlsconf

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// ErrNoCertificates is returned for a CA file that holds no PEM certificate.
var ErrNoCertificates = errors.New("no PEM certificate found")

// DefaultCheckInterval is how often, at most, a KeyPair looks at its files.
const DefaultCheckInterval = time.Second

// Options tune a KeyPair.
type Options struct {
	// Name labels log lines and reload counts ("server", "client").
	Name string
	// CheckInterval is the least time between two looks at the files; zero means DefaultCheckInterval.
	CheckInterval time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger receives reload lines; nil discards.
	Logger *slog.Logger
	// OnReload, when set, is called after each attempt to load changed files, with its error (nil on
	// success). It must not block.
	OnReload func(name string, err error)
}

// KeyPair is a certificate and key kept in step with their files.
type KeyPair struct {
	certPath, keyPath string
	o                 Options

	cur       atomic.Pointer[tls.Certificate]
	nextCheck atomic.Int64 // unix nanoseconds

	mu                 sync.Mutex // serialises reloads
	certPEM, keyPEM    []byte     // the bytes cur was built from, under mu
	badCert, badKeyPEM []byte     // the last pair that failed to parse (logged once), under mu
}

// LoadKeyPair reads and parses the pair once; it fails when the files are missing or do not match.
func LoadKeyPair(certPath, keyPath string, o Options) (*KeyPair, error) {
	if o.CheckInterval <= 0 {
		o.CheckInterval = DefaultCheckInterval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	k := &KeyPair{certPath: certPath, keyPath: keyPath, o: o}
	certPEM, keyPEM, err := k.read()
	if err != nil {
		return nil, err
	}
	cert, err := parse(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("tls %s certificate %s / key %s: %w", o.Name, certPath, keyPath, err)
	}
	k.certPEM, k.keyPEM = certPEM, keyPEM
	k.cur.Store(cert)
	k.nextCheck.Store(o.Now().Add(o.CheckInterval).UnixNano())
	return k, nil
}

func (k *KeyPair) read() (certPEM, keyPEM []byte, err error) {
	certPEM, err = os.ReadFile(k.certPath)
	if err != nil {
		return nil, nil, fmt.Errorf("tls %s certificate: %w", k.o.Name, err)
	}
	keyPEM, err = os.ReadFile(k.keyPath)
	if err != nil {
		return nil, nil, fmt.Errorf("tls %s key: %w", k.o.Name, err)
	}
	return certPEM, keyPEM, nil
}

func parse(certPEM, keyPEM []byte) (*tls.Certificate, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	return &cert, nil
}

// Certificate returns the current certificate, first re-reading the files if the check interval has
// passed since the last look.
func (k *KeyPair) Certificate() *tls.Certificate {
	now := k.o.Now().UnixNano()
	next := k.nextCheck.Load()
	if now >= next && k.nextCheck.CompareAndSwap(next, k.o.Now().Add(k.o.CheckInterval).UnixNano()) {
		k.reload()
	}
	return k.cur.Load()
}

// reload re-reads the files and swaps in the new pair when the bytes changed and parse. A pair that
// does not parse (say the certificate was written and the key not yet) keeps the old one in service.
func (k *KeyPair) reload() {
	k.mu.Lock()
	defer k.mu.Unlock()
	certPEM, keyPEM, err := k.read()
	if err != nil {
		k.o.Logger.Warn("tls: cannot read certificate files; keeping the current one", "name", k.o.Name, "err", err)
		k.report(err)
		return
	}
	if bytes.Equal(certPEM, k.certPEM) && bytes.Equal(keyPEM, k.keyPEM) {
		return
	}
	cert, err := parse(certPEM, keyPEM)
	if err != nil {
		if !bytes.Equal(certPEM, k.badCert) || !bytes.Equal(keyPEM, k.badKeyPEM) {
			k.badCert, k.badKeyPEM = certPEM, keyPEM
			k.o.Logger.Warn("tls: changed certificate files do not load; keeping the current certificate",
				"name", k.o.Name, "cert", k.certPath, "err", err)
			k.report(err)
		}
		return
	}
	k.certPEM, k.keyPEM = certPEM, keyPEM
	k.badCert, k.badKeyPEM = nil, nil
	k.cur.Store(cert)
	attrs := []any{"name", k.o.Name, "cert", k.certPath}
	if cert.Leaf != nil {
		attrs = append(attrs, "subject", cert.Leaf.Subject.String(), "not_after", cert.Leaf.NotAfter)
	}
	k.o.Logger.Info("tls: certificate reloaded", attrs...)
	k.report(nil)
}

func (k *KeyPair) report(err error) {
	if k.o.OnReload != nil {
		k.o.OnReload(k.o.Name, err)
	}
}

// GetCertificate serves as tls.Config.GetCertificate.
func (k *KeyPair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return k.Certificate(), nil
}

// GetClientCertificate serves as tls.Config.GetClientCertificate.
func (k *KeyPair) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return k.Certificate(), nil
}

// Server returns the listeners' TLS configuration: TLS 1.2 or later, ALPN offering HTTP/2 then
// HTTP/1.1 (gRPC needs h2; browsers and SDKs take either), and the certificate from k.
func Server(k *KeyPair) *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{"h2", "http/1.1"},
		GetCertificate: k.GetCertificate,
	}
}

// Client returns the upstream TLS configuration, or nil when there is nothing to add to Go's defaults
// (no CA file, no client certificate). The CA files add to the system roots; client, when not nil, is
// presented to workers that ask for a certificate.
func Client(caPaths []string, client *KeyPair) (*tls.Config, error) {
	if len(caPaths) == 0 && client == nil {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(caPaths) > 0 {
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		for _, p := range caPaths {
			pem, err := os.ReadFile(p)
			if err != nil {
				return nil, fmt.Errorf("tls CA file: %w", err)
			}
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("tls CA file %s: %w", p, ErrNoCertificates)
			}
		}
		cfg.RootCAs = pool
	}
	if client != nil {
		cfg.GetClientCertificate = client.GetClientCertificate
	}
	return cfg, nil
}
