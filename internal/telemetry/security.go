package telemetry

import "github.com/prometheus/client_golang/prometheus"

// SecurityMetrics count what the hardening layer does: circuit breaker transitions, refused
// credentials, client connections and certificate reloads. Per-worker series are deleted with
// DeleteWorker.
type SecurityMetrics struct {
	authFailures  *prometheus.CounterVec
	connsOpen     *prometheus.GaugeVec
	connsRejected *prometheus.CounterVec
	reloads       *prometheus.CounterVec
}

// NewSecurityMetrics creates the instruments and registers them on reg.
func NewSecurityMetrics(reg prometheus.Registerer) *SecurityMetrics {
	m := &SecurityMetrics{
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_auth_failures_total",
			Help: "Refused calls by API (inference, admin) and reason (missing, invalid, forbidden).",
		}, []string{"api", "reason"}),
		connsOpen: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_client_connections_open", Help: "Open client connections per listener.",
		}, []string{"listener"}),
		connsRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_client_connections_rejected_total",
			Help: "Client connections closed at once because the listener's --max-connections was reached.",
		}, []string{"listener"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_file_reloads_total",
			Help: "Reloads of changed credential files (tls_server, tls_client, api_keys) by result (ok, error).",
		}, []string{"file", "result"}),
	}
	reg.MustRegister(m.authFailures, m.connsOpen, m.connsRejected, m.reloads)
	return m
}

// IncAuthFailure counts one refused call.
func (m *SecurityMetrics) IncAuthFailure(api, reason string) {
	m.authFailures.WithLabelValues(api, reason).Inc()
}

// AddOpen moves a listener's open-connection gauge (server.ConnMetrics).
func (m *SecurityMetrics) AddOpen(listener string, delta int) {
	m.connsOpen.WithLabelValues(listener).Add(float64(delta))
}

// IncRejected counts a connection refused at the cap (server.ConnMetrics).
func (m *SecurityMetrics) IncRejected(listener string) {
	m.connsRejected.WithLabelValues(listener).Inc()
}

// IncReload counts one reload of a changed credential file; err nil means it loaded.
func (m *SecurityMetrics) IncReload(file string, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.reloads.WithLabelValues(file, result).Inc()
}
