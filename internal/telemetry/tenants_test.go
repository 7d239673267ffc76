package telemetry_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicegw/sluice/internal/telemetry"
)

func TestTenantMetricsRecord(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := telemetry.NewTenantMetrics(reg)
	m.IncAdmitted("a")
	m.IncAdmitted("a")
	m.IncRejection("b", "rate_limit_exceeded")
	m.AddTokens("a", 10, 0) // no output series for zero
	m.AddTokens("a", 2, 5)
	const want = `
# HELP sluice_tenant_admitted_total Client requests of a tenant that passed its budget and admission and were answered by an engine.
# TYPE sluice_tenant_admitted_total counter
sluice_tenant_admitted_total{tenant="a"} 2
# HELP sluice_tenant_rejections_total Client requests of a tenant refused by its budget or by admission, by reason: rate_limit_exceeded (budget), else the reason of sluice_pd_prefill_admission_rejections_total (queue_full, queue_timeout, tenant_queue_full, decode_queue_full, ...).
# TYPE sluice_tenant_rejections_total counter
sluice_tenant_rejections_total{reason="rate_limit_exceeded",tenant="b"} 1
# HELP sluice_tenant_tokens_total Tokens of a tenant's answered requests as the engines reported them, by type (input, output).
# TYPE sluice_tenant_tokens_total counter
sluice_tenant_tokens_total{tenant="a",type="input"} 12
sluice_tenant_tokens_total{tenant="a",type="output"} 5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) != 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}
