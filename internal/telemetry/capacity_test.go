package telemetry_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicegw/sluice/internal/capacity"
	"github.com/sluicegw/sluice/internal/telemetry"
)

func TestCapacityMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := telemetry.NewCapacityMetrics(reg)
	in := capacity.Inputs{ArrivalRate: 20, PromptTokens: 400, OutputTokens: 100, PrefillRate: 8000,
		ITLBase: 6 * time.Millisecond, ITLSlope: 350 * time.Microsecond, FitOK: true}
	m.SetRecommendation(&capacity.Recommendation{Model: "m", Role: capacity.RolePrefill, Current: 2, Target: 2, Recommended: 3,
		OfferedLoad: 1, PerWorker: 1, Inputs: in})
	m.SetRecommendation(&capacity.Recommendation{Model: "m", Role: capacity.RoleDecode, Current: 2, Target: 2, Recommended: 2,
		OfferedLoad: 40, PerWorker: 40, Inputs: in})
	want := `
# HELP sluice_capacity_recommended_workers Workers the load needs now, after smoothing and hysteresis (scale to this).
# TYPE sluice_capacity_recommended_workers gauge
sluice_capacity_recommended_workers{model="m",role="decode"} 2
sluice_capacity_recommended_workers{model="m",role="prefill"} 3
# HELP sluice_capacity_mean_tokens Smoothed mean tokens per answered request, by kind (prompt, output).
# TYPE sluice_capacity_mean_tokens gauge
sluice_capacity_mean_tokens{kind="output",model="m"} 100
sluice_capacity_mean_tokens{kind="prompt",model="m"} 400
# HELP sluice_capacity_itl_fit_seconds The fitted decode ITL line: base (batch 0) and slope (per sequence in the batch).
# TYPE sluice_capacity_itl_fit_seconds gauge
sluice_capacity_itl_fit_seconds{model="m",term="base"} 0.006
sluice_capacity_itl_fit_seconds{model="m",term="slope"} 0.00035
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_capacity_recommended_workers",
		"sluice_capacity_mean_tokens", "sluice_capacity_itl_fit_seconds"); err != nil {
		t.Fatal(err)
	}
	m.DeleteModel("m")
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Fatalf("after DeleteModel: %d series (%v), want none", n, err)
	}
}
