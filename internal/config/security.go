package config

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// TLSConfig holds TLS on the listeners and towards https:// and grpcs://
// workers. The flag names are the Rust gateway's.
type TLSConfig struct {
	// CertPath and KeyPath are the PEM certificate (chain) and private key
	// served on the main and admin listeners (--tls-cert-path,
	// --tls-key-path, default "" = plaintext). Both or neither; the files are
	// re-read when they change, without a restart.
	CertPath, KeyPath string
	// CACertPaths are PEM files of CAs trusted for https:// and grpcs://
	// workers, in addition to the system roots (--ca-cert-paths, repeatable,
	// default none).
	CACertPaths []string
	// ClientCertPath and ClientKeyPath are the PEM certificate and key the
	// gateway presents to workers that ask for one (mTLS)
	// (--client-cert-path, --client-key-path, default none). Both or
	// neither; re-read when they change.
	ClientCertPath, ClientKeyPath string
}

// Enabled reports whether the listeners serve TLS.
func (t TLSConfig) Enabled() bool { return t.CertPath != "" }

// AuthConfig holds authentication beyond the static keys of ServerConfig,
// and browser access.
type AuthConfig struct {
	// APIKeysFile lists inference API keys, one per line ("KEY", "ID KEY" or
	// "ID KEY admin"); re-read when it changes (--api-keys-file, default
	// none).
	APIKeysFile string
	// JWTIssuer and JWTAudience turn on JWT bearer tokens: the iss claim must
	// equal the issuer and aud must contain the audience (--jwt-issuer,
	// --jwt-audience, default none). Both or neither.
	JWTIssuer, JWTAudience string
	// JWTJWKSURI is where the signing keys are fetched; empty = discovered
	// from the issuer's /.well-known/openid-configuration (--jwt-jwks-uri).
	JWTJWKSURI string
	// JWTRoleClaim names the claim holding the caller's roles, a string or a
	// list of strings; dots descend into objects, e.g. realm_access.roles
	// (--jwt-role-claim, default "roles").
	JWTRoleClaim string
	// JWTAdminRole is the role that grants the admin API (--jwt-admin-role,
	// default "admin").
	JWTAdminRole string
	// CORSAllowedOrigins are the browser origins allowed to call the APIs
	// ("https://app.example.com", or "*" for any origin without credentials)
	// (--cors-allowed-origins, repeatable, default none = no CORS).
	CORSAllowedOrigins []string
}

// JWTEnabled reports whether JWT bearer tokens are accepted.
func (a AuthConfig) JWTEnabled() bool { return a.JWTIssuer != "" }

// LimitsConfig bounds what one client can hold: time, header bytes and
// connections. Body sizes are ServerConfig.MaxPayloadSize.
type LimitsConfig struct {
	// ReadHeaderTimeout bounds reading a request's headers
	// (--read-header-timeout-secs, default 10s).
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long
	// (--idle-timeout-secs, default 120s).
	IdleTimeout time.Duration
	// BodyReadTimeout bounds reading a whole request body
	// (--body-read-timeout-secs, default 60s).
	BodyReadTimeout time.Duration
	// WriteTimeout bounds each write to a client: a client that stops
	// reading a response for this long is disconnected
	// (--client-write-timeout-secs, default 60s).
	WriteTimeout time.Duration
	// MaxHeaderBytes bounds a request's header block (--max-header-bytes,
	// default 64KiB).
	MaxHeaderBytes int64
	// MaxConnections caps open client connections per listener; connections
	// beyond it are closed at once (--max-connections, default 10000; 0 = no
	// cap).
	MaxConnections int
}

// defaultMaxPayloadSize is --max-payload-size's default. A request body is
// held in memory whole, so the cap is also the worst case per in-flight
// request. 32 MiB fits the largest prompts engines take today (a 2M-token
// prompt is ~8 MB of text, ~14 MB as token ids) plus a few base64 images,
// while a few hundred hostile uploads cannot exhaust a node's memory the way
// 512 MiB each could.
const defaultMaxPayloadSize = 32 << 20

// registerSecurity adds the TLS, authentication and limit flags, each group
// in its own help section, after the Server section.
func (s *flagSet) registerSecurity() {
	c := s.cfg
	const sec = time.Second

	s.section("TLS")
	s.str(&c.TLS.CertPath, "tls-cert-path", "FILE", "", "PEM certificate (chain) served on the listeners; with --tls-key-path turns on HTTPS (HTTP/2 via ALPN). Re-read when it changes.")
	s.str(&c.TLS.KeyPath, "tls-key-path", "FILE", "", "PEM private key of --tls-cert-path.")
	s.add(commaListValue{&c.TLS.CACertPaths}, "ca-cert-paths", "FILE", "PEM CA certificates trusted for https:// and grpcs:// workers, besides the system roots; repeatable or comma-separated.")
	s.str(&c.TLS.ClientCertPath, "client-cert-path", "FILE", "", "PEM client certificate presented to https:// and grpcs:// workers (mTLS), health checks included; needs --client-key-path. Re-read when it changes.")
	s.str(&c.TLS.ClientKeyPath, "client-key-path", "FILE", "", "PEM private key of --client-cert-path.")

	s.section("Authentication and browsers")
	s.str(&c.Auth.APIKeysFile, "api-keys-file", "FILE", "", "Inference API keys, one per line: KEY, or ID KEY, or ID KEY admin (also grants the admin API); # comments. Re-read when it changes; logs show the ID, never the key.")
	s.str(&c.Auth.JWTIssuer, "jwt-issuer", "URL", "", "Accept JWT bearer tokens from this issuer (iss claim); needs --jwt-audience.")
	s.str(&c.Auth.JWTAudience, "jwt-audience", "AUD", "", "Audience a JWT's aud claim must contain.")
	s.str(&c.Auth.JWTJWKSURI, "jwt-jwks-uri", "URL", "", "JWKS URL of the issuer's signing keys; empty = discovered from the issuer's /.well-known/openid-configuration.")
	s.str(&c.Auth.JWTRoleClaim, "jwt-role-claim", "NAME", "roles", "JWT claim holding the caller's roles (string or list; dots descend into objects, e.g. realm_access.roles).")
	s.str(&c.Auth.JWTAdminRole, "jwt-admin-role", "ROLE", "admin", "Role in --jwt-role-claim that grants the admin API.")
	s.add(commaListValue{&c.Auth.CORSAllowedOrigins}, "cors-allowed-origins", "ORIGINS", "Browser origins allowed to call the APIs (scheme://host[:port]), or * for any (then without credentials); repeatable or comma-separated. Empty = no CORS.")

	s.section("Limits against slow and hostile clients")
	s.dur(&c.Limits.ReadHeaderTimeout, sec, "read-header-timeout-secs", "SECS", 10*sec, "Longest time a client may take to send a request's headers.")
	s.dur(&c.Limits.BodyReadTimeout, sec, "body-read-timeout-secs", "SECS", 60*sec, "Longest time a client may take to send a whole request body.")
	s.dur(&c.Limits.WriteTimeout, sec, "client-write-timeout-secs", "SECS", 60*sec, "Longest a write to a client may block; a client that stops reading a response is disconnected.")
	s.dur(&c.Limits.IdleTimeout, sec, "idle-timeout-secs", "SECS", 120*sec, "Keep-alive connections idle this long are closed.")
	s.size(&c.Limits.MaxHeaderBytes, "max-header-bytes", "SIZE", 64<<10, "Largest request header block (HTTP/1.1 and HTTP/2).")
	s.int(&c.Limits.MaxConnections, "max-connections", "N", 10000, "Open client connections allowed per listener; more are closed at once. 0 = no cap.")
}

// validateSecurity checks the TLS, auth and limit settings.
func (c *Config) validateSecurity(p *problems) {
	p.together("tls-cert-path", "tls-key-path", c.TLS.CertPath, c.TLS.KeyPath)
	p.together("client-cert-path", "client-key-path", c.TLS.ClientCertPath, c.TLS.ClientKeyPath)
	for _, path := range c.TLS.CACertPaths {
		if strings.TrimSpace(path) == "" {
			p.add("--ca-cert-paths: empty path")
		}
	}

	p.together("jwt-issuer", "jwt-audience", c.Auth.JWTIssuer, c.Auth.JWTAudience)
	if c.Auth.JWTJWKSURI != "" && c.Auth.JWTIssuer == "" {
		p.add("--jwt-jwks-uri needs --jwt-issuer and --jwt-audience")
	}
	if v := c.Auth.JWTIssuer; v != "" {
		if err := checkHTTPURL(v); err != nil {
			p.add("--jwt-issuer %q: %v", v, err)
		}
	}
	if v := c.Auth.JWTJWKSURI; v != "" {
		if err := checkHTTPURL(v); err != nil {
			p.add("--jwt-jwks-uri %q: %v", v, err)
		}
	}
	if c.Auth.JWTEnabled() {
		if strings.TrimSpace(c.Auth.JWTRoleClaim) == "" {
			p.add("--jwt-role-claim must not be empty")
		}
		if strings.TrimSpace(c.Auth.JWTAdminRole) == "" {
			p.add("--jwt-admin-role must not be empty")
		}
	}
	for _, o := range c.Auth.CORSAllowedOrigins {
		if err := checkOrigin(o); err != nil {
			p.add("--cors-allowed-origins %q: %v", o, err)
		}
	}

	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"read-header-timeout-secs", c.Limits.ReadHeaderTimeout},
		{"body-read-timeout-secs", c.Limits.BodyReadTimeout},
		{"client-write-timeout-secs", c.Limits.WriteTimeout},
		{"idle-timeout-secs", c.Limits.IdleTimeout},
	} {
		if d.v <= 0 {
			p.add("--%s must be positive, got %v", d.name, d.v)
		}
	}
	if n := c.Limits.MaxHeaderBytes; n < 4<<10 || n > 64<<20 {
		p.add("--max-header-bytes must be between 4KiB and 64MiB, got %d", n)
	}
	if c.Limits.MaxConnections < 0 {
		p.add("--max-connections must not be negative, got %d", c.Limits.MaxConnections)
	}
}

// checkHTTPURL accepts an absolute http(s) URL with a host and no fragment.
func checkHTTPURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return errors.New("not a URL")
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return fmt.Errorf("scheme %q not supported (want https, or http for local testing)", u.Scheme)
	}
	if u.Hostname() == "" {
		return errors.New("missing host")
	}
	if u.Fragment != "" || u.User != nil {
		return errors.New("no fragment or user info allowed")
	}
	return nil
}

// checkOrigin accepts "*" or a browser origin: scheme://host[:port], nothing
// after it.
func checkOrigin(s string) error {
	if s == "*" {
		return nil
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return errors.New("want scheme://host[:port] or *")
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return errors.New("an origin has no path, query, fragment or user info")
	}
	return nil
}

// commaListValue is a repeatable flag whose values may also list several
// items separated by commas; surrounding spaces are dropped.
type commaListValue struct{ p *[]string }

func (v commaListValue) String() string {
	if v.p == nil {
		return ""
	}
	return strings.Join(*v.p, ",")
}

func (v commaListValue) Set(s string) error {
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return fmt.Errorf("empty item in %q", s)
		}
		*v.p = append(*v.p, item)
	}
	return nil
}
