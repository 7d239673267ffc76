package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/tenant"
)

// A request's tenant comes from the most trusted source configured that names one: the id of the API
// key the caller authenticated with (the keys file's ID column, or "api-key" for --api-key), then a
// JWT claim (--tenant-jwt-claim, read into [Principal.Tenant]), then a request header
// (--tenant-header), which any caller can set and is therefore trusted least: it is read only when no
// credential names the caller. A request named by no source belongs to [admission.DefaultTenant].
// The name then keys admission's fair queueing and the budgets and metrics of internal/tenant.

// ErrInvalidTenant classifies a tenant header that cannot name a tenant (the caller's error: 400).
var ErrInvalidTenant = errors.New("tenant: invalid tenant header")

// TenantSources names the sources a request's tenant is read from.
type TenantSources struct {
	// Keys makes the id of the API key a caller authenticated with its tenant.
	Keys bool
	// JWT makes a JWT's tenant claim (Principal.Tenant) its tenant.
	JWT bool
	// Header is the request header naming the tenant of callers no credential names; "" = none.
	Header string
}

// On reports whether any source is configured.
func (c TenantSources) On() bool { return c.Keys || c.JWT || c.Header != "" }

// TenantResolver finds a request's tenant. It is immutable and safe for concurrent use.
type TenantResolver struct {
	src    TenantSources
	header string // canonical form of src.Header
}

// NewTenantResolver builds a resolver. A nil *TenantResolver resolves every request to the default
// tenant.
func NewTenantResolver(src TenantSources) *TenantResolver {
	return &TenantResolver{src: src, header: http.CanonicalHeaderKey(src.Header)}
}

// Header is the configured tenant header ("" = none).
func (r *TenantResolver) Header() string {
	if r == nil {
		return ""
	}
	return r.header
}

// Of returns the tenant of a request from the principal in ctx and its headers. It fails only on a
// tenant header that is present but unusable (empty, too long, or not printable ASCII), so a caller
// never lands silently in the default tenant by a typo.
func (r *TenantResolver) Of(ctx context.Context, h http.Header) (string, error) {
	if r == nil {
		return admission.DefaultTenant, nil
	}
	if p, ok := PrincipalFrom(ctx); ok {
		switch {
		case r.src.Keys && p.Method == MethodAPIKey && tenant.ValidName(p.ID):
			return p.ID, nil
		case r.src.JWT && p.Method == MethodJWT && tenant.ValidName(p.Tenant):
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
	if len(vs) != 1 || !tenant.ValidName(vs[0]) {
		return "", fmt.Errorf("%w: %s must be given once, as 1-%d printable ASCII characters", ErrInvalidTenant, r.header, tenant.MaxNameLen)
	}
	return vs[0], nil
}
