package telemetry_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicegw/sluice/internal/telemetry"
)

func TestAdmissionFeatureMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := telemetry.NewMetrics(reg)
	m.SetInflightTokens("http://a", 4096)
	m.SetBandQueued("high", 2)
	m.SetBandQueued("low", 5)
	m.ObserveBandWait("low", 1500*time.Millisecond)
	const want = `
# HELP sluice_pd_prefill_admission_inflight_tokens Estimated prompt tokens of the prefill admission slots held per prefill worker.
# TYPE sluice_pd_prefill_admission_inflight_tokens gauge
sluice_pd_prefill_admission_inflight_tokens{worker="http://a"} 4096
# HELP sluice_pd_prefill_admission_band_queued Requests waiting for a prefill admission slot, per priority band.
# TYPE sluice_pd_prefill_admission_band_queued gauge
sluice_pd_prefill_admission_band_queued{band="high"} 2
sluice_pd_prefill_admission_band_queued{band="low"} 5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_pd_prefill_admission_inflight_tokens", "sluice_pd_prefill_admission_band_queued"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg, "sluice_pd_prefill_admission_band_wait_seconds"); err != nil || n != 1 {
		t.Errorf("band wait series = %d (%v), want 1", n, err)
	}
	m.DeleteWorker("http://a")
	if got := workerSeries(t, reg, "http://a"); len(got) != 0 {
		t.Errorf("series of the deleted worker remain: %v", got)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) != 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}
