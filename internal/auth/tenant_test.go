package auth_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/auth"
	"github.com/sluicegw/sluice/internal/tenant"
)

func TestTenantResolverOrderOfTrust(t *testing.T) {
	t.Parallel()
	key := auth.WithPrincipal(context.Background(), &auth.Principal{ID: "team-a", Method: auth.MethodAPIKey})
	jwt := auth.WithPrincipal(context.Background(), &auth.Principal{ID: "jwt:bob", Method: auth.MethodJWT, Tenant: "acme"})
	jwtNoClaim := auth.WithPrincipal(context.Background(), &auth.Principal{ID: "jwt:bob", Method: auth.MethodJWT})
	anon := context.Background()
	hdr := http.Header{"X-Tenant": {"from-header"}}
	all := auth.NewTenantResolver(auth.TenantSources{Keys: true, JWT: true, Header: "x-tenant"})
	for _, tt := range []struct {
		name string
		r    *auth.TenantResolver
		ctx  context.Context
		h    http.Header
		want string
	}{
		{"key beats header", all, key, hdr, "team-a"},
		{"jwt claim beats header", all, jwt, hdr, "acme"},
		{"jwt without claim falls to header", all, jwtNoClaim, hdr, "from-header"},
		{"anonymous reads header", all, anon, hdr, "from-header"},
		{"nothing names it", all, anon, http.Header{}, "default"},
		{"keys not a source", auth.NewTenantResolver(auth.TenantSources{Header: "X-Tenant"}), key, hdr, "from-header"},
		{"nil resolver", nil, key, hdr, "default"},
	} {
		got, err := tt.r.Of(tt.ctx, tt.h)
		if err != nil || got != tt.want {
			t.Errorf("%s: Of = %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
}

func TestTenantResolverBadHeader(t *testing.T) {
	t.Parallel()
	r := auth.NewTenantResolver(auth.TenantSources{Header: "X-Tenant"})
	for _, vs := range [][]string{{""}, {strings.Repeat("a", tenant.MaxNameLen+1)}, {"two words"}, {"é"}, {"a", "b"}} {
		if _, err := r.Of(context.Background(), http.Header{"X-Tenant": vs}); !errors.Is(err, auth.ErrInvalidTenant) {
			t.Errorf("%q: err = %v, want ErrInvalidTenant", vs, err)
		}
	}
}
