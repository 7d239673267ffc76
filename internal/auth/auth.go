// Package auth decides who a caller is and whether they may use the inference or the admin API: static
// bearer keys (--api-key, --admin-api-key), keys from a file re-read when it changes (--api-keys-file),
// and JWTs from an OpenID issuer whose role claim may grant the admin API. Keys are held as SHA-256
// hashes and compared in constant time; logs, spans and audit lines name a caller by a [Principal] ID
// (a key id, "admin-key", or "jwt:" and the subject), never by its credential.
//
// # Concurrency Model
//
// An [Authenticator] is safe for concurrent use and owns no goroutine. The keys file is re-read on the
// request path at most once per check interval (one caller does it under a mutex; the others keep using
// the keys already loaded, published through an atomic pointer). JWT signing keys are fetched the same
// way, see keySet.
package auth

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// Errors, by class. A refused request's error is a [*Refusal] of class ErrUnauthenticated or
// ErrForbidden; the edge (internal/apierror) renders the class as a wire error (401, 403).
var (
	// ErrKeysFile wraps every problem of an API keys file.
	ErrKeysFile = errors.New("api keys file")
	// ErrUnauthenticated: no credential, or one that is not valid.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrForbidden: a valid credential without the admin role on the admin API.
	ErrForbidden = errors.New("forbidden")
)

// Refusal is a refused request: its class and the message the caller is shown, which never names the
// credential nor why it failed (that goes to the debug log).
type Refusal struct {
	// Class is ErrUnauthenticated or ErrForbidden.
	Class error
	// Message is safe to send to the caller.
	Message string
}

func (r *Refusal) Error() string { return r.Message }

// Unwrap returns the class.
func (r *Refusal) Unwrap() error { return r.Class }

// Authentication methods, as recorded in a Principal.
const (
	MethodAPIKey   = "api_key"
	MethodAdminKey = "admin_key"
	MethodJWT      = "jwt"
)

// Principal is an authenticated caller.
type Principal struct {
	// ID names the caller in logs and spans: a key id, "admin-key", or "jwt:<subject>".
	ID string
	// Method is MethodAPIKey, MethodAdminKey or MethodJWT.
	Method string
	// Admin reports whether the caller may use the admin API.
	Admin bool
	// Roles are a JWT's roles (nil for keys).
	Roles []string
	// Tenant is a JWT's tenant claim (JWTConfig.TenantClaim), or "".
	Tenant string
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the caller recorded in ctx, if any.
func PrincipalFrom(ctx context.Context) (*Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(*Principal)
	return p, ok && p != nil
}

// Anonymous is the principal of calls on an API that has no authentication configured.
var anonymous = &Principal{ID: "anonymous"}

// Config configures an Authenticator. Every source is optional.
type Config struct {
	// APIKey is the static inference key (--api-key).
	APIKey string
	// AdminAPIKey is the static admin key (--admin-api-key); it grants the admin API only.
	AdminAPIKey string
	// KeysFile is the --api-keys-file path.
	KeysFile string
	// JWT, when set, accepts JWT bearer tokens.
	JWT *JWTConfig
	// CheckInterval bounds how often the keys file is looked at (default 1 s).
	CheckInterval time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger receives refusals (warn for admin refusals, debug for bad credentials) and reloads.
	Logger *slog.Logger
	// OnFailure, when set, counts a refusal: api is "inference" or "admin", reason "missing",
	// "invalid" or "forbidden". It must not block.
	OnFailure func(api, reason string)
	// OnKeysReload, when set, is told the result of each reload of a changed keys file.
	OnKeysReload func(err error)
}

// Authenticator checks requests.
type Authenticator struct {
	cfg       Config
	static    []Key // --api-key, as a Key
	adminKey  []Key // --admin-api-key
	file      *keyFile
	jwt       *jwtVerifier
	inference bool // inference API requires a credential
	admin     bool // admin API requires an admin credential
}

// New builds an Authenticator; it reads the keys file once and fails when it cannot.
func New(cfg Config) (*Authenticator, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = time.Second
	}
	a := &Authenticator{cfg: cfg}
	if cfg.APIKey != "" {
		// With no admin-capable source, --api-key guards the admin API too (the Rust gateway's rule for
		// its control plane): a gateway that asks for a key never leaves its admin API open.
		alone := cfg.AdminAPIKey == "" && cfg.KeysFile == "" && cfg.JWT == nil
		a.static = []Key{NewKey("api-key", cfg.APIKey, alone)}
	}
	if cfg.AdminAPIKey != "" {
		a.adminKey = []Key{NewKey("admin-key", cfg.AdminAPIKey, true)}
	}
	if cfg.KeysFile != "" {
		f, err := loadKeyFile(cfg.KeysFile, cfg.CheckInterval, cfg.Now, cfg.Logger, cfg.OnKeysReload)
		if err != nil {
			return nil, err
		}
		a.file = f
	}
	if cfg.JWT != nil {
		a.jwt = newJWTVerifier(*cfg.JWT, cfg.Now, cfg.Logger)
	}
	a.inference = a.static != nil || a.file != nil || a.jwt != nil
	// The admin API is guarded as soon as any credential is configured.
	a.admin = a.inference || a.adminKey != nil
	return a, nil
}

// InferenceProtected reports whether the inference API needs a credential.
func (a *Authenticator) InferenceProtected() bool { return a.inference }

// AdminProtected reports whether the admin API needs an admin credential.
func (a *Authenticator) AdminProtected() bool { return a.admin }

// bearer extracts the bearer token; the scheme is case-insensitive (RFC 7235).
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// identify finds the principal for a token: static and file keys first (cheap), then JWT.
func (a *Authenticator) identify(ctx context.Context, token string, admin bool) (*Principal, error) {
	if admin {
		if k, ok := Lookup(a.adminKey, token); ok {
			return &Principal{ID: k.ID, Method: MethodAdminKey, Admin: true}, nil
		}
	}
	if k, ok := Lookup(a.static, token); ok {
		return &Principal{ID: k.ID, Method: MethodAPIKey, Admin: k.Admin}, nil
	}
	if a.file != nil {
		if k, ok := Lookup(a.file.current(), token); ok {
			return &Principal{ID: k.ID, Method: MethodAPIKey, Admin: k.Admin}, nil
		}
	}
	if a.jwt != nil && looksLikeJWT(token) {
		return a.jwt.verify(ctx, token)
	}
	return nil, ErrUnauthenticated
}

// Inference authenticates a call to the inference API. It returns the request's context carrying the
// principal, or a [*Refusal] of class ErrUnauthenticated.
func (a *Authenticator) Inference(r *http.Request) (context.Context, error) {
	if !a.inference {
		return WithPrincipal(r.Context(), anonymous), nil
	}
	return a.check(r, "inference", false)
}

// Admin authenticates a call to the admin API: a [*Refusal] of class ErrUnauthenticated without a valid
// credential, of class ErrForbidden with one that lacks the admin role (logged, with the caller's id).
func (a *Authenticator) Admin(r *http.Request) (context.Context, error) {
	if !a.admin {
		return WithPrincipal(r.Context(), anonymous), nil
	}
	ctx, err := a.check(r, "admin", true)
	if err != nil {
		return nil, err
	}
	p, _ := PrincipalFrom(ctx)
	if !p.Admin {
		a.fail("admin", "forbidden")
		a.cfg.Logger.Warn("admin API refused: credential lacks the admin role",
			"principal", p.ID, "method", p.Method, "roles", p.Roles, "http.method", r.Method, "path", r.URL.Path)
		return nil, &Refusal{Class: ErrForbidden, Message: "this credential does not grant the admin API"}
	}
	return ctx, nil
}

func (a *Authenticator) check(r *http.Request, api string, admin bool) (context.Context, error) {
	token, ok := bearer(r)
	what := "API key or token"
	if admin {
		what = "admin API key or token"
	}
	if !ok {
		a.fail(api, "missing")
		return nil, &Refusal{Class: ErrUnauthenticated, Message: "missing " + what + " (Authorization: Bearer <key>)"}
	}
	p, err := a.identify(r.Context(), token, admin)
	if err != nil {
		a.fail(api, "invalid")
		// The cause (expired, wrong audience, bad signature) goes to the debug log, not to the client.
		a.cfg.Logger.Debug("credential refused", "api", api, "path", r.URL.Path, "err", err)
		return nil, &Refusal{Class: ErrUnauthenticated, Message: "invalid " + what}
	}
	return WithPrincipal(r.Context(), p), nil
}

func (a *Authenticator) fail(api, reason string) {
	if a.cfg.OnFailure != nil {
		a.cfg.OnFailure(api, reason)
	}
}
