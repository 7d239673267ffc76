package tenant

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/auth"
)

// ErrInvalidTenant classifies a tenant header that cannot name a tenant (the caller's error: 400).
var ErrInvalidTenant = errors.New("tenant: invalid tenant header")

// MaxNameLen bounds a tenant name, from any source.
const MaxNameLen = 64

// Config names the tenant sources.
type Config struct {
	// Keys makes the id of the API key a caller authenticated with its tenant.
	Keys bool
	// JWT makes a JWT's tenant claim (auth.Principal.Tenant) its tenant.
	JWT bool
	// Header is the request header naming the tenant of callers no credential names; "" = none.
	Header string
}

// On reports whether any source is configured.
func (c Config) On() bool { return c.Keys || c.JWT || c.Header != "" }

// Resolver finds a request's tenant.
type Resolver struct {
	cfg    Config
	header string // canonical form of cfg.Header
}

// New builds a resolver. A nil *Resolver resolves every request to the default tenant.
func New(cfg Config) *Resolver {
	return &Resolver{cfg: cfg, header: http.CanonicalHeaderKey(cfg.Header)}
}

// Header is the configured tenant header ("" = none).
func (r *Resolver) Header() string {
	if r == nil {
		return ""
	}
	return r.header
}

// Of returns the tenant of a request from the principal in ctx and its headers. It fails only on a
// tenant header that is present but unusable (empty, too long, or not printable ASCII), so a caller
// never lands silently in the default tenant by a typo.
func (r *Resolver) Of(ctx context.Context, h http.Header) (string, error) {
	if r == nil {
		return admission.DefaultTenant, nil
	}
	if p, ok := auth.PrincipalFrom(ctx); ok {
		switch {
		case r.cfg.Keys && p.Method == auth.MethodAPIKey && validName(p.ID):
			return p.ID, nil
		case r.cfg.JWT && p.Method == auth.MethodJWT && validName(p.Tenant):
			return p.Tenant, nil
		}
	}
	if r.header == "" {
		return admission.DefaultTenant, nil
	}
	vs, ok := h[r.header]
	if !ok {
		return admission.DefaultTenant, nil
	}
	if len(vs) != 1 || !validName(vs[0]) {
		return "", fmt.Errorf("%w: %s must be given once, as 1-%d printable ASCII characters", ErrInvalidTenant, r.header, MaxNameLen)
	}
	return vs[0], nil
}

func validName(s string) bool {
	if s == "" || len(s) > MaxNameLen {
		return false
	}
	for i := range len(s) {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
