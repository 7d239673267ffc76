package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
)

// signingAlgs are the JWT algorithms accepted: asymmetric only. HMAC ("HS256") would make the public
// JWKS a shared secret, and "none" is never acceptable.
var signingAlgs = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512, jose.EdDSA,
}

// JWTConfig configures JWT bearer tokens.
type JWTConfig struct {
	// Issuer must equal the token's iss claim.
	Issuer string
	// Audience must be in the token's aud claim.
	Audience string
	// JWKSURI is where signing keys are fetched; empty = discovered from the issuer.
	JWKSURI string
	// RoleClaim is the claim (dotted path) holding the roles; AdminRole among them grants admin.
	RoleClaim string
	AdminRole string
	// TenantClaim, when set, is the claim (dotted path) holding the caller's tenant, a string
	// (Principal.Tenant); absent or not a string means none.
	TenantClaim string
	// HTTP fetches discovery and keys; nil means a client with a 10 s timeout.
	HTTP *http.Client
	// MinRefreshInterval is the least time between two fetches of the keys, whatever tokens arrive
	// (default 30 s): a flood of tokens naming unknown key ids must not become a flood of requests to
	// the identity provider.
	MinRefreshInterval time.Duration
	// MaxKeyAge is how long fetched keys are used before they are fetched again (default 10 min), so
	// that a key removed from the JWKS stops being accepted.
	MaxKeyAge time.Duration
}

// jwtVerifier checks tokens with go-oidc (signature algorithm allow-list, iss, aud, exp, nbf) against
// signing keys held by a keySet.
type jwtVerifier struct {
	v         *oidc.IDTokenVerifier
	keys      *keySet
	roleClaim []string
	adminRole string
	tenant    []string // nil: no tenant claim
}

func newJWTVerifier(cfg JWTConfig, now func() time.Time, logger *slog.Logger) *jwtVerifier {
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.MinRefreshInterval <= 0 {
		cfg.MinRefreshInterval = 30 * time.Second
	}
	if cfg.MaxKeyAge <= 0 {
		cfg.MaxKeyAge = 10 * time.Minute
	}
	ks := &keySet{cfg: cfg, now: now, logger: logger}
	algs := make([]string, len(signingAlgs))
	for i, a := range signingAlgs {
		algs[i] = string(a)
	}
	return &jwtVerifier{
		keys: ks,
		v: oidc.NewVerifier(cfg.Issuer, ks, &oidc.Config{
			ClientID: cfg.Audience, SupportedSigningAlgs: algs, Now: now,
		}),
		roleClaim: strings.Split(cfg.RoleClaim, "."),
		adminRole: cfg.AdminRole,
		tenant:    tenantPath(cfg.TenantClaim),
	}
}

func tenantPath(claim string) []string {
	if claim == "" {
		return nil
	}
	return strings.Split(claim, ".")
}

// looksLikeJWT reports whether token has the three dot-separated parts of a compact JWS.
func looksLikeJWT(token string) bool { return strings.Count(token, ".") == 2 }

// verify validates token and returns its principal.
func (j *jwtVerifier) verify(ctx context.Context, token string) (*Principal, error) {
	tok, err := j.v.Verify(ctx, token)
	if err != nil {
		return nil, err
	}
	var claims map[string]any
	if err := tok.Claims(&claims); err != nil {
		return nil, err
	}
	roles := rolesAt(claims, j.roleClaim)
	sub := tok.Subject
	if sub == "" {
		sub = "-"
	}
	p := &Principal{ID: "jwt:" + sub, Method: MethodJWT, Roles: roles}
	if j.tenant != nil {
		p.Tenant = stringAt(claims, j.tenant)
	}
	for _, r := range roles {
		if r == j.adminRole {
			p.Admin = true
		}
	}
	return p, nil
}

// stringAt reads the string at a dotted claim path; "" when absent or not a string.
func stringAt(claims map[string]any, path []string) string {
	var cur any = claims
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		cur = m[p]
	}
	s, _ := cur.(string)
	return s
}

// rolesAt reads the roles at a dotted claim path: a string (space-separated, as OAuth scopes are) or a
// list of strings; anything else is no roles.
func rolesAt(claims map[string]any, path []string) []string {
	var cur any = claims
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	switch v := cur.(type) {
	case string:
		return strings.Fields(v)
	case []any:
		out := make([]string, 0, len(v))
		for _, e := range v {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// keySet holds the issuer's signing keys for go-oidc. It fetches them on first use, again when they
// are older than MaxKeyAge, and when a token names a key id it does not know (key rotation) — never
// more often than MinRefreshInterval. While a refresh runs, other tokens are checked against the keys
// already held; only when there are none do they wait for it. go-oidc's own RemoteKeySet refetches on
// every token whose signature fails, which lets forged tokens drive requests to the identity provider.
type keySet struct {
	cfg    JWTConfig
	now    func() time.Time
	logger *slog.Logger

	cur         atomic.Pointer[cachedKeys]
	fetchMu     sync.Mutex // one fetch at a time
	lastAttempt time.Time  // under fetchMu
	jwksURI     string     // resolved (configured or discovered), under fetchMu
}

type cachedKeys struct {
	keys    []jose.JSONWebKey
	fetched time.Time
}

func (c *cachedKeys) has(kid string) bool {
	for _, k := range c.keys {
		if kid == "" || k.KeyID == kid {
			return true
		}
	}
	return false
}

// VerifySignature implements oidc.KeySet.
func (s *keySet) VerifySignature(ctx context.Context, raw string) ([]byte, error) {
	jws, err := jose.ParseSignedCompact(raw, signingAlgs)
	if err != nil {
		return nil, fmt.Errorf("malformed jwt: %w", err)
	}
	if len(jws.Signatures) != 1 {
		return nil, errors.New("jwt must have exactly one signature")
	}
	hdr := jws.Signatures[0].Header
	c := s.cur.Load()
	if c == nil || s.now().Sub(c.fetched) >= s.cfg.MaxKeyAge || !c.has(hdr.KeyID) {
		c = s.refresh(ctx, c)
	}
	if c == nil {
		return nil, errors.New("signing keys unavailable")
	}
	for i := range c.keys {
		k := &c.keys[i]
		if hdr.KeyID != "" && k.KeyID != hdr.KeyID {
			continue
		}
		if k.Algorithm != "" && k.Algorithm != hdr.Algorithm {
			continue // a key pinned to another algorithm is never used for this one
		}
		if payload, err := jws.Verify(k); err == nil {
			return payload, nil
		}
	}
	return nil, errors.New("jwt signature does not verify with any known key")
}

// refresh fetches the keys unless a fetch is running (then it returns old, or waits when there is no
// old) or one was attempted less than MinRefreshInterval ago.
func (s *keySet) refresh(ctx context.Context, old *cachedKeys) *cachedKeys {
	if !s.fetchMu.TryLock() {
		if old != nil {
			return old
		}
		s.fetchMu.Lock()
	}
	defer s.fetchMu.Unlock()
	if c := s.cur.Load(); c != old {
		return c // another caller refreshed while this one waited
	}
	now := s.now()
	if !s.lastAttempt.IsZero() && now.Sub(s.lastAttempt) < s.cfg.MinRefreshInterval {
		return old
	}
	s.lastAttempt = now
	// The fetch outlives a cancelled request (others wait for it) but not its own timeout.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	keys, err := s.fetch(fctx)
	if err != nil {
		s.logger.Warn("jwt: cannot fetch signing keys; keeping the ones held", "err", err, "held", old != nil)
		return old
	}
	c := &cachedKeys{keys: keys, fetched: now}
	s.cur.Store(c)
	s.logger.Info("jwt: signing keys fetched", "keys", len(keys), "jwks_uri", s.jwksURI)
	return c
}

func (s *keySet) fetch(ctx context.Context) ([]jose.JSONWebKey, error) {
	if s.jwksURI == "" {
		s.jwksURI = s.cfg.JWKSURI
	}
	if s.jwksURI == "" {
		uri, err := s.discover(ctx)
		if err != nil {
			return nil, err
		}
		s.jwksURI = uri
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := s.getJSON(ctx, s.jwksURI, &set); err != nil {
		return nil, err
	}
	var keys []jose.JSONWebKey
	for _, raw := range set.Keys {
		var k jose.JSONWebKey
		// Keys of types go-jose cannot use are skipped, as RFC 7517 §5 says; so are private and
		// symmetric keys, which have no place in a published key set.
		if err := k.UnmarshalJSON(raw); err != nil || !k.Valid() || !k.IsPublic() || k.Use == "enc" {
			continue
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("key set holds no usable signing key")
	}
	return keys, nil
}

// discover reads jwks_uri from the issuer's OpenID configuration, which must name the same issuer.
func (s *keySet) discover(ctx context.Context) (string, error) {
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	u := strings.TrimSuffix(s.cfg.Issuer, "/") + "/.well-known/openid-configuration"
	if err := s.getJSON(ctx, u, &doc); err != nil {
		return "", fmt.Errorf("discovery: %w", err)
	}
	if doc.Issuer != s.cfg.Issuer {
		return "", fmt.Errorf("discovery: document names issuer %q, want %q", doc.Issuer, s.cfg.Issuer)
	}
	if doc.JWKSURI == "" {
		return "", errors.New("discovery: no jwks_uri")
	}
	return doc.JWKSURI, nil
}

func (s *keySet) getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.cfg.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	return json.Unmarshal(body, v)
}
