package app

import (
	"maps"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/config"
	"github.com/sluicegw/sluice/internal/tenant"
)

// withTenants adds the configured tenancy to admission's settings: off without a tenant source.
func withTenants(s admission.Settings, t config.TenantsConfig) admission.Settings {
	if !t.On() {
		return s
	}
	s.Tenants = admission.TenantSettings{Fair: t.Fair(), Weights: maps.Clone(t.Weights), MaxQueued: t.MaxQueued}
	return s
}

// tenantResolver is the resolver of the configured sources, or nil (every request in the default
// tenant, at no cost) without one.
func tenantResolver(t config.TenantsConfig) *tenant.Resolver {
	if !t.On() {
		return nil
	}
	return tenant.New(tenant.Config{Keys: t.APIKeyIDs, JWT: t.JWTClaim != "", Header: t.Header})
}
