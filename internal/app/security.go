package app

import (
	"context"
	"crypto/tls"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/sluicegw/sluice/internal/auth"
	"github.com/sluicegw/sluice/internal/server"
	"github.com/sluicegw/sluice/internal/telemetry"
	"github.com/sluicegw/sluice/internal/tlsconf"
	"github.com/sluicegw/sluice/internal/worker"
)

// setupTLS loads the listeners' certificate (kept for Start) and returns the upstream TLS configuration
// for https:// and grpcs:// workers (nil when Go's defaults do).
func (a *App) setupTLS() (*tls.Config, error) {
	cfg := a.cfg.TLS
	reload := func(name string, err error) { a.Security.IncReload("tls_"+name, err) }
	if cfg.Enabled() {
		kp, err := tlsconf.LoadKeyPair(cfg.CertPath, cfg.KeyPath, tlsconf.Options{Name: "server", Logger: a.logger, OnReload: reload})
		if err != nil {
			return nil, err
		}
		a.serverTLS = tlsconf.Server(kp)
	}
	var client *tlsconf.KeyPair
	if cfg.ClientCertPath != "" {
		kp, err := tlsconf.LoadKeyPair(cfg.ClientCertPath, cfg.ClientKeyPath, tlsconf.Options{Name: "client", Logger: a.logger, OnReload: reload})
		if err != nil {
			return nil, err
		}
		client = kp
	}
	return tlsconf.Client(cfg.CACertPaths, client)
}

// setupAuth builds the authenticator from the static keys, the keys file and the JWT settings.
func (a *App) setupAuth(upstreamTLS *tls.Config) error {
	c := a.cfg
	ac := auth.Config{
		APIKey: c.Server.APIKey.Value(), AdminAPIKey: c.Server.AdminAPIKey.Value(), KeysFile: c.Auth.APIKeysFile,
		Logger: a.logger, OnFailure: a.Security.IncAuthFailure,
		OnKeysReload: func(err error) { a.Security.IncReload("api_keys", err) },
	}
	if c.Auth.JWTEnabled() {
		// The identity provider may sit behind the same private CA as the workers.
		tr := &http.Transport{Proxy: http.ProxyFromEnvironment, TLSClientConfig: upstreamTLS, ForceAttemptHTTP2: true}
		a.idpClient = &http.Client{Timeout: 10 * time.Second, Transport: tr}
		ac.JWT = &auth.JWTConfig{
			Issuer: c.Auth.JWTIssuer, Audience: c.Auth.JWTAudience, JWKSURI: c.Auth.JWTJWKSURI,
			RoleClaim: c.Auth.JWTRoleClaim, AdminRole: c.Auth.JWTAdminRole, HTTP: a.idpClient,
			TenantClaim: c.Tenants.JWTClaim,
		}
	}
	au, err := auth.New(ac)
	if err != nil {
		return err
	}
	a.auth = au
	return nil
}

// listenOptions are the limits and TLS of one listener.
func (a *App) listenOptions(name string) server.ListenOptions {
	l := a.cfg.Limits
	return server.ListenOptions{
		Logger: a.logger, Name: name, TLS: a.serverTLS,
		ReadHeaderTimeout: l.ReadHeaderTimeout, IdleTimeout: l.IdleTimeout,
		MaxHeaderBytes: int(l.MaxHeaderBytes), MaxConnections: l.MaxConnections, Conns: a.Security,
	}
}

// onBreakerTransition logs and counts a circuit breaker state change: opening is a warning (the worker
// gets no traffic), recovering is info.
func (a *App) onBreakerTransition(w *worker.Worker, from, to worker.BreakerState, reason string) {
	a.Metrics.IncBreakerTransition(w.URL(), from.String(), to.String(), reason)
	attrs := []any{"worker", w.ID(), "url", w.URL(), "from", from.String(), "to", to.String(), "reason", reason}
	if to == worker.BreakerOpen {
		a.logger.Warn("circuit breaker opened", attrs...)
		return
	}
	a.logger.Info("circuit breaker "+to.String(), attrs...)
}

// principalAttrs names the authenticated caller on request spans: its id, never its credential.
func principalAttrs(ctx context.Context) []attribute.KeyValue {
	p, ok := auth.PrincipalFrom(ctx)
	if !ok {
		return nil
	}
	return []attribute.KeyValue{attribute.String("sluice.auth.principal", p.ID), attribute.String("sluice.auth.method", p.Method)}
}

// Scheme is "https" when the listeners serve TLS, else "http".
func (a *App) Scheme() string {
	if a.serverTLS != nil {
		return "https"
	}
	return "http"
}

// newSecurity builds the security metrics, TLS and authentication, and returns the TLS of the calls
// to engines.
func (a *App) newSecurity() (*tls.Config, error) {
	a.Security = telemetry.NewSecurityMetrics(a.Prom)
	upstreamTLS, err := a.setupTLS()
	if err != nil {
		return nil, err
	}
	if err := a.setupAuth(upstreamTLS); err != nil {
		return nil, err
	}
	return upstreamTLS, nil
}
