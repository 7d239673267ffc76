package app

import (
	"maps"
	"slices"

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

// tenantBudgets are the configured budgets whenever a tenant source is on (so that the admin API can
// set them live), or nil (no cost on the request path) without one.
func tenantBudgets(t config.TenantsConfig) *tenant.Budgets {
	if !t.On() {
		return nil
	}
	per := make(map[string]tenant.Budget, len(t.Budgets))
	for name, b := range t.Budgets {
		per[name] = tenant.Budget{TokensPerMinute: b.TokensPerMinute, RequestsPerMinute: b.RequestsPerMinute}
	}
	return tenant.NewBudgets(tenant.BudgetConfig{
		Default: tenant.Budget{TokensPerMinute: t.TokensPerMinute, RequestsPerMinute: t.RequestsPerMinute}, Tenants: per})
}

// routingKeyHeaders are the headers read for a request's routing key: --routing-key-headers, then
// the session header, so an explicit routing key wins over a session.
func routingKeyHeaders(cfg *config.Config) []string {
	if cfg.Tenants.SessionHeader == "" {
		return cfg.SMG.RoutingKeyHeaders
	}
	return append(slices.Clone(cfg.SMG.RoutingKeyHeaders), cfg.Tenants.SessionHeader)
}
