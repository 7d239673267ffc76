package auth_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"go.uber.org/goleak"

	"github.com/sluicegw/sluice/internal/auth"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseKeys(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    []string // "id" or "id admin"
		wantErr string
	}{
		{"empty", "", nil, ""},
		{"comments and blanks", "# team keys\n\n   \n", nil, ""},
		{"bare key", "sk-abc\n", []string{auth.KeyID("sk-abc")}, ""},
		{"named", "team-a sk-aaa\nops\tsk-bbb admin\nci sk-ccc inference\r\n", []string{"team-a", "ops admin", "ci"}, ""},
		{"bad role", "x sk-1 root", nil, "line 1: role must be inference or admin"},
		{"too many fields", "a b c d", nil, "line 1: want KEY"},
		{"duplicate id", "a sk-1\na sk-2", nil, `line 2: key id "a" already used on line 1`},
		{"duplicate key", "a sk-1\nb sk-1", nil, "line 2: same key as line 1"},
		{"not utf-8", "a \xff\xfe", nil, "not UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keys, err := auth.ParseKeys([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				if !errors.Is(err, auth.ErrKeysFile) {
					t.Errorf("err %v does not wrap ErrKeysFile", err)
				}
				for _, secret := range []string{"sk-1", "sk-2", "\xff"} {
					if strings.Contains(err.Error(), secret) {
						t.Errorf("error %q repeats key material", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, k := range keys {
				s := k.ID
				if k.Admin {
					s += " admin"
				}
				got = append(got, s)
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("keys = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestLookup(t *testing.T) {
	t.Parallel()
	keys, err := auth.ParseKeys([]byte("a sk-aaaa\nb sk-bbbb admin\n"))
	if err != nil {
		t.Fatal(err)
	}
	if k, ok := auth.Lookup(keys, "sk-bbbb"); !ok || k.ID != "b" || !k.Admin {
		t.Errorf("Lookup(sk-bbbb) = %+v, %v", k, ok)
	}
	for _, bad := range []string{"", "sk-aaa", "sk-aaaaa", "SK-AAAA", "a"} {
		if k, ok := auth.Lookup(keys, bad); ok {
			t.Errorf("Lookup(%q) matched %s", bad, k.ID)
		}
	}
}

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func request(token string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	return r
}

// status returns the HTTP status the edge renders an Authenticator error's class as (200 for none)
// and the principal's id.
func status(ctx context.Context, err error) (int, string) {
	if err != nil {
		var r *auth.Refusal
		switch {
		case !errors.As(err, &r):
			return -1, err.Error()
		case errors.Is(err, auth.ErrForbidden):
			return 403, ""
		case errors.Is(err, auth.ErrUnauthenticated):
			return 401, ""
		}
		return -1, err.Error()
	}
	p, _ := auth.PrincipalFrom(ctx)
	return 200, p.ID
}

func TestKeysFileReload(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(path, []byte("team-a sk-team-a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	clk := &clock{now: time.Unix(0, 0)}
	var reloads atomic.Int32
	a, err := auth.New(auth.Config{KeysFile: path, Now: clk.Now, CheckInterval: time.Second,
		OnKeysReload: func(error) { reloads.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	if code, id := status(a.Inference(request("sk-team-a"))); code != 200 || id != "team-a" {
		t.Fatalf("team-a: %d %q", code, id)
	}
	write := func(s string) {
		if err := os.WriteFile(path+".tmp", []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
		clk.Add(time.Second)
	}
	write("team-b sk-team-b\n")
	if code, _ := status(a.Inference(request("sk-team-a"))); code != 401 {
		t.Errorf("removed key: status %d, want 401", code)
	}
	if code, id := status(a.Inference(request("sk-team-b"))); code != 200 || id != "team-b" {
		t.Errorf("added key: %d %q", code, id)
	}
	write("team-b sk-team-b extra fields here\n") // broken: keeps team-b
	if code, _ := status(a.Inference(request("sk-team-b"))); code != 200 {
		t.Errorf("broken file: team-b status %d, want the loaded keys kept", code)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Second)
	if code, _ := status(a.Inference(request("sk-team-b"))); code != 200 {
		t.Errorf("deleted file: team-b status %d, want the loaded keys kept", code)
	}
	if n := reloads.Load(); n != 3 {
		t.Errorf("%d reload reports, want 3 (one ok, one parse error, one read error)", n)
	}

	if _, err := auth.New(auth.Config{KeysFile: path}); err == nil {
		t.Error("New with a missing keys file succeeded")
	}
}

func TestStaticKeysAndRoles(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(path, []byte("user sk-user\nops sk-ops admin\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := auth.New(auth.Config{APIKey: "sk-static", AdminAPIKey: "sk-admin", KeysFile: path})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		token         string
		inference     int
		admin         int
		inferenceUser string
	}{
		{"", 401, 401, ""},
		{"sk-static", 200, 403, "api-key"},
		{"sk-user", 200, 403, "user"},
		{"sk-ops", 200, 200, "ops"},
		{"sk-admin", 401, 200, ""}, // the admin key grants the admin API only, as before
		{"nope", 401, 401, ""},
	}
	for _, tt := range tests {
		code, id := status(a.Inference(request(tt.token)))
		if code != tt.inference || id != tt.inferenceUser {
			t.Errorf("inference %q: %d %q, want %d %q", tt.token, code, id, tt.inference, tt.inferenceUser)
		}
		if code, _ := status(a.Admin(request(tt.token))); code != tt.admin {
			t.Errorf("admin %q: %d, want %d", tt.token, code, tt.admin)
		}
	}
	r := request("")
	r.Header.Set("Authorization", "bearer   sk-ops ")
	if code, id := status(a.Admin(r)); code != 200 || id != "ops" {
		t.Errorf("lower-case scheme: %d %q", code, id)
	}
	r.Header.Set("Authorization", "Basic sk-ops")
	if code, _ := status(a.Admin(r)); code != 401 {
		t.Errorf("Basic scheme: %d, want 401", code)
	}

	// --api-key alone guards the admin API too; once an admin credential exists it grants inference only.
	alone, err := auth.New(auth.Config{APIKey: "sk-static"})
	if err != nil {
		t.Fatal(err)
	}
	if !alone.AdminProtected() || !alone.InferenceProtected() {
		t.Errorf("--api-key alone: admin protected %v, inference protected %v; want both", alone.AdminProtected(), alone.InferenceProtected())
	}
	if code, _ := status(alone.Admin(request(""))); code != 401 {
		t.Errorf("--api-key alone, admin call without a key: %d, want 401", code)
	}
	if code, id := status(alone.Admin(request("sk-static"))); code != 200 || id != "api-key" {
		t.Errorf("--api-key alone, admin call with it: %d %q, want 200 api-key", code, id)
	}
	both, err := auth.New(auth.Config{APIKey: "sk-static", AdminAPIKey: "sk-admin"})
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := status(both.Admin(request("sk-static"))); code != 403 {
		t.Errorf("--api-key with --admin-api-key, admin call with the inference key: %d, want 403", code)
	}
}

// idp is a local identity provider: a discovery document and a JWKS on a loopback server, with keys
// generated by the test.
type idp struct {
	srv       *httptest.Server
	mu        sync.Mutex
	keys      []jose.JSONWebKey // public keys served
	signers   map[string]jose.Signer
	jwksCalls atomic.Int32
}

func newIDP(t *testing.T) *idp {
	p := &idp{signers: map[string]jose.Signer{}}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/.well-known/openid-configuration":
			_ = json.NewEncoder(w).Encode(map[string]string{"issuer": p.srv.URL, "jwks_uri": p.srv.URL + "/keys"})
		case "/keys":
			p.jwksCalls.Add(1)
			p.mu.Lock()
			set := jose.JSONWebKeySet{Keys: p.keys}
			p.mu.Unlock()
			_ = json.NewEncoder(w).Encode(set)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// addKey generates a key pair with id kid, publishes the public half and keeps a signer.
func (p *idp) addKey(t *testing.T, kid string, rsaKey bool) {
	t.Helper()
	var priv any
	alg := jose.ES256
	if rsaKey {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		priv, alg = k, jose.RS256
	} else {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		priv = k
	}
	jwk := jose.JSONWebKey{Key: priv, KeyID: kid, Algorithm: string(alg), Use: "sig"}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: jwk}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.keys = append(p.keys, jwk.Public())
	p.signers[kid] = s
	p.mu.Unlock()
}

type claims struct {
	jwt.Claims
	Roles any `json:"roles,omitempty"`
	Realm any `json:"realm_access,omitempty"`
}

func (p *idp) token(t *testing.T, kid string, c claims) string {
	t.Helper()
	p.mu.Lock()
	s := p.signers[kid]
	p.mu.Unlock()
	tok, err := jwt.Signed(s).Claims(c).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestJWT(t *testing.T) {
	t.Parallel()
	p := newIDP(t)
	p.addKey(t, "k1", false)
	p.addKey(t, "k2", true)
	clk := &clock{now: time.Now()}
	a, err := auth.New(auth.Config{
		Now: clk.Now,
		JWT: &auth.JWTConfig{Issuer: p.srv.URL, Audience: "sluice", RoleClaim: "roles", AdminRole: "admin",
			MinRefreshInterval: time.Minute},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	base := func() claims {
		return claims{Claims: jwt.Claims{
			Issuer: p.srv.URL, Subject: "alice", Audience: jwt.Audience{"sluice"},
			Expiry: jwt.NewNumericDate(clk.Now().Add(time.Hour)), IssuedAt: jwt.NewNumericDate(clk.Now()),
		}}
	}
	with := func(f func(*claims)) claims { c := base(); f(&c); return c }

	tests := []struct {
		name             string
		token            string
		inference, admin int
	}{
		{"valid, no roles", p.token(t, "k1", base()), 200, 403},
		{"admin role list", p.token(t, "k1", with(func(c *claims) { c.Roles = []string{"user", "admin"} })), 200, 200},
		{"admin role string", p.token(t, "k2", with(func(c *claims) { c.Roles = "user admin" })), 200, 200},
		{"other roles", p.token(t, "k2", with(func(c *claims) { c.Roles = []string{"administrator"} })), 200, 403},
		{"expired", p.token(t, "k1", with(func(c *claims) { c.Expiry = jwt.NewNumericDate(clk.Now().Add(-time.Minute)) })), 401, 401},
		{"no expiry", p.token(t, "k1", with(func(c *claims) { c.Expiry = nil })), 401, 401},
		{"wrong audience", p.token(t, "k1", with(func(c *claims) { c.Audience = jwt.Audience{"other"} })), 401, 401},
		{"wrong issuer", p.token(t, "k1", with(func(c *claims) { c.Issuer = "https://evil.example" })), 401, 401},
		{"tampered payload", tamper(p.token(t, "k1", with(func(c *claims) { c.Roles = "user" }))), 401, 401},
		{"alg none", unsigned(t, with(func(c *claims) { c.Roles = "admin" })), 401, 401},
		{"garbage", "a.b.c", 401, 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if code, _ := status(a.Inference(request(tt.token))); code != tt.inference {
				t.Errorf("inference: %d, want %d", code, tt.inference)
			}
			if code, _ := status(a.Admin(request(tt.token))); code != tt.admin {
				t.Errorf("admin: %d, want %d", code, tt.admin)
			}
		})
	}
	if _, id := status(a.Inference(request(p.token(t, "k1", base())))); id != "jwt:alice" {
		t.Errorf("principal id %q, want jwt:alice", id)
	}

	// Key rotation: a token signed by a key published after the last fetch is accepted once the
	// refresh interval allows a new fetch, and unknown key ids never cause more than one fetch per
	// interval.
	calls := p.jwksCalls.Load()
	p.addKey(t, "k3", false)
	rotated := p.token(t, "k3", base())
	for range 20 {
		if code, _ := status(a.Inference(request(rotated))); code != 401 {
			t.Fatalf("token of an unfetched key: %d before the refresh interval passed", code)
		}
	}
	if got := p.jwksCalls.Load() - calls; got > 1 {
		t.Errorf("%d JWKS fetches for 20 tokens with an unknown key id, want at most 1", got)
	}
	clk.Add(time.Minute)
	if code, _ := status(a.Inference(request(rotated))); code != 200 {
		t.Errorf("rotated key after the refresh interval: %d, want 200", code)
	}
}

func TestJWTRoleClaimPath(t *testing.T) {
	t.Parallel()
	p := newIDP(t)
	p.addKey(t, "k1", false)
	a, err := auth.New(auth.Config{JWT: &auth.JWTConfig{
		Issuer: p.srv.URL, Audience: "sluice", JWKSURI: p.srv.URL + "/keys",
		RoleClaim: "realm_access.roles", AdminRole: "sluice-admin",
	}})
	if err != nil {
		t.Fatal(err)
	}
	c := claims{Claims: jwt.Claims{Issuer: p.srv.URL, Subject: "bob", Audience: jwt.Audience{"sluice"},
		Expiry: jwt.NewNumericDate(time.Now().Add(time.Hour))},
		Realm: map[string]any{"roles": []string{"sluice-admin"}}}
	if code, _ := status(a.Admin(request(p.token(t, "k1", c)))); code != 200 {
		t.Errorf("nested role claim: admin %d, want 200", code)
	}
}

func TestJWTUnreachableIssuer(t *testing.T) {
	t.Parallel()
	p := newIDP(t)
	p.addKey(t, "k1", false)
	tok := p.token(t, "k1", claims{Claims: jwt.Claims{Issuer: "http://127.0.0.1:1", Subject: "x",
		Audience: jwt.Audience{"sluice"}, Expiry: jwt.NewNumericDate(time.Now().Add(time.Hour))}})
	a, err := auth.New(auth.Config{JWT: &auth.JWTConfig{Issuer: "http://127.0.0.1:1", Audience: "sluice", RoleClaim: "roles", AdminRole: "admin"}})
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := status(a.Inference(request(tok))); code != 401 {
		t.Errorf("issuer unreachable: %d, want 401", code)
	}
}

// tamper flips the payload to claim the admin role while keeping the original signature.
func tamper(tok string) string {
	parts := strings.Split(tok, ".")
	var c map[string]any
	b, _ := base64.RawURLEncoding.DecodeString(parts[1])
	_ = json.Unmarshal(b, &c)
	c["roles"] = "admin"
	nb, _ := json.Marshal(c)
	parts[1] = base64.RawURLEncoding.EncodeToString(nb)
	return strings.Join(parts, ".")
}

func unsigned(t *testing.T, c claims) string {
	t.Helper()
	hdr := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`))
	body, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return hdr + "." + base64.RawURLEncoding.EncodeToString(body) + "."
}

// The tenant claim is read at a dotted path; a claim that is not a string gives no tenant.
func TestJWTTenantClaim(t *testing.T) {
	t.Parallel()
	p := newIDP(t)
	p.addKey(t, "k1", false)
	a, err := auth.New(auth.Config{JWT: &auth.JWTConfig{
		Issuer: p.srv.URL, Audience: "sluice", RoleClaim: "roles", AdminRole: "admin", TenantClaim: "realm_access.org",
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		realm any
		want  string
	}{
		{map[string]any{"org": "acme"}, "acme"},
		{map[string]any{"org": 42}, ""},
		{nil, ""},
	} {
		c := claims{Claims: jwt.Claims{Issuer: p.srv.URL, Subject: "bob", Audience: jwt.Audience{"sluice"},
			Expiry: jwt.NewNumericDate(time.Now().Add(time.Hour))}, Realm: tt.realm}
		ctx, err := a.Inference(request(p.token(t, "k1", c)))
		if err != nil {
			t.Fatalf("%v: %v", tt.realm, err)
		}
		if pr, _ := auth.PrincipalFrom(ctx); pr.Tenant != tt.want {
			t.Errorf("%v: tenant %q, want %q", tt.realm, pr.Tenant, tt.want)
		}
	}
}
