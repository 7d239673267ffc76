package telemetry

import "github.com/prometheus/client_golang/prometheus"

// TenantMetrics count each tenant's requests: admitted, refused by reason, and tokens. The tenant
// label is bounded by the caller (internal/tenant.Labels: the configured tenants and the first N
// seen, the rest "other"), so no caller can grow the series by minting tenant names.
type TenantMetrics struct {
	admitted   *prometheus.CounterVec
	rejections *prometheus.CounterVec
	tokens     *prometheus.CounterVec
}

// NewTenantMetrics creates the instruments and registers them on reg.
func NewTenantMetrics(reg prometheus.Registerer) *TenantMetrics {
	m := &TenantMetrics{
		admitted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_tenant_admitted_total",
			Help: "Client requests of a tenant that passed its budget and admission and were answered by an engine.",
		}, []string{"tenant"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_tenant_rejections_total",
			Help: "Client requests of a tenant refused by its budget or by admission, by reason: rate_limit_exceeded (budget), else the reason of sluice_pd_prefill_admission_rejections_total (queue_full, queue_timeout, tenant_queue_full, decode_queue_full, ...).",
		}, []string{"tenant", "reason"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_tenant_tokens_total",
			Help: "Tokens of a tenant's answered requests as the engines reported them, by type (input, output).",
		}, []string{"tenant", "type"}),
	}
	reg.MustRegister(m.admitted, m.rejections, m.tokens)
	return m
}

// IncAdmitted counts one answered request of tenant.
func (m *TenantMetrics) IncAdmitted(tenant string) { m.admitted.WithLabelValues(tenant).Inc() }

// IncRejection counts one refusal of tenant's request.
func (m *TenantMetrics) IncRejection(tenant, reason string) {
	m.rejections.WithLabelValues(tenant, reason).Inc()
}

// AddTokens counts tenant's tokens as a request's usage reported them.
func (m *TenantMetrics) AddTokens(tenant string, input, output int64) {
	if input > 0 {
		m.tokens.WithLabelValues(tenant, TokenInput).Add(float64(input))
	}
	if output > 0 {
		m.tokens.WithLabelValues(tenant, TokenOutput).Add(float64(output))
	}
}
