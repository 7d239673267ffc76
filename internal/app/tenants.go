package app

import (
	"maps"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/auth"
	"github.com/sluicegw/sluice/internal/cluster"
	"github.com/sluicegw/sluice/internal/config"
	"github.com/sluicegw/sluice/internal/dispatch"
	"github.com/sluicegw/sluice/internal/telemetry"
	"github.com/sluicegw/sluice/internal/tenant"
)

// withTenants adds the configured tenancy to admission's settings: off without a tenant source.
func withTenants(s admission.Settings, t config.TenantsConfig) admission.Settings {
	if !t.On() {
		return s
	}
	s.Tenants = t.Admission()
	return s
}

// tenantResolver is the resolver of the configured sources, or nil (every request in the default
// tenant, at no cost) without one.
func tenantResolver(t config.TenantsConfig) *auth.TenantResolver {
	if !t.On() {
		return nil
	}
	return auth.NewTenantResolver(auth.TenantSources{Keys: t.APIKeyIDs, JWT: t.JWTClaim != "", Header: t.Header})
}

// tenantBudgets are the configured budgets whenever a tenant source is on (so that the admin API can
// set them live), or nil (no cost on the request path) without one. With cluster coordination they
// are the cluster's Deps.Budgets (a.budgets is set before the cluster is built): live changes reach
// every replica and each enforces its demand-weighted share of every budget. With static coordination
// they start split evenly over the listed peers, until the first grant.
func tenantBudgets(t config.TenantsConfig, cc config.ClusterConfig) *tenant.Budgets {
	if !t.On() {
		return nil
	}
	per := make(map[string]tenant.Budget, len(t.Budgets))
	for name, b := range t.Budgets {
		per[name] = tenant.Budget{TokensPerMinute: b.TokensPerMinute, RequestsPerMinute: b.RequestsPerMinute}
	}
	b := tenant.NewBudgets(tenant.BudgetConfig{
		Default: tenant.Budget{TokensPerMinute: t.TokensPerMinute, RequestsPerMinute: t.RequestsPerMinute}, Tenants: per})
	if cc.Mode == config.CoordinationStatic {
		if peers, err := cluster.ParsePeers(cc.Peers); err == nil {
			b.SetReplicas(len(peers))
		}
	}
	return b
}

// tenantMetrics records each tenant's requests under a bounded label (tenant.Labels): the tenants
// the configuration names (weights, budgets), then the first --tenant-metrics-max-tenants seen.
type tenantMetrics struct {
	m      *telemetry.TenantMetrics
	labels *tenant.Labels
}

// newTenantMetrics registers the per-tenant instruments, or returns nil without a tenant source.
func newTenantMetrics(reg prometheus.Registerer, t config.TenantsConfig) *tenantMetrics {
	if !t.On() {
		return nil
	}
	known := slices.Sorted(maps.Keys(t.Weights))
	for name := range t.Budgets {
		if _, ok := t.Weights[name]; !ok {
			known = append(known, name)
		}
	}
	return &tenantMetrics{m: telemetry.NewTenantMetrics(reg), labels: tenant.NewLabels(t.MetricsMaxTenants, known...)}
}

// observe records one finished request: a refusal by its reason, an answer with its tokens. A
// request that failed otherwise (an engine's error, the client gone) is neither.
func (tm *tenantMetrics) observe(s *dispatch.RequestStats) {
	if tm == nil || s.Tenant == "" {
		return
	}
	switch {
	case s.Rejection != "":
		tm.m.IncRejection(tm.labels.Label(s.Tenant), s.Rejection)
	case s.Worker != "":
		label := tm.labels.Label(s.Tenant)
		tm.m.IncAdmitted(label)
		if s.HasUsage {
			tm.m.AddTokens(label, s.Usage.Prompt, s.Usage.Completion)
		}
	}
}

// routingKeyHeaders are the headers read for a request's routing key: --routing-key-headers, then
// the session header, so an explicit routing key wins over a session.
func routingKeyHeaders(cfg *config.Config) []string {
	if cfg.Tenants.SessionHeader == "" {
		return cfg.Placement.RoutingKeyHeaders
	}
	return append(slices.Clone(cfg.Placement.RoutingKeyHeaders), cfg.Tenants.SessionHeader)
}
