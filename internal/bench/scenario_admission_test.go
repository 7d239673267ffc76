package bench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAdmissionScenarioSmoke runs the short version of the admission scenarios and checks that they
// produce sane output: every run served requests, the per-class and per-phase breakdowns exist, the
// plots are written, and the features did something (rejections where expected). Not performance.
func TestAdmissionScenarioSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts simulators and gateways")
	}
	for _, tt := range []struct {
		name  string
		rows  int // table rows after the header
		plots []string
		check func(t *testing.T, res *ScenarioResult)
	}{
		{name: "tokens", rows: 3, plots: []string{"tokens-short-ttft.svg"}, check: func(t *testing.T, res *ScenarioResult) {
			for _, run := range res.Runs {
				short, ok := run.Extra["short"].(Summary)
				if !ok || short.Requests == 0 || short.Succeeded == 0 {
					t.Errorf("run %s: short class %+v", run.Label, run.Extra["short"])
				}
			}
		}},
		{name: "priority", rows: 6, plots: []string{"priority-ttft.svg"}, check: func(t *testing.T, res *ScenarioResult) {
			if _, ok := res.Measurements["high_p99_over_unloaded_bands-2x"]; !ok {
				t.Errorf("no high-band ratio in %v", res.Measurements)
			}
		}},
		{name: "early-rejection", rows: 3, plots: []string{"early-rejection.svg", "early-rejection-429.svg"}, check: func(t *testing.T, res *ScenarioResult) {
			last := res.Runs[len(res.Runs)-1]
			if n, _ := last.Extra["predicted_timeout_rejections"].(uint64); n == 0 {
				t.Errorf("the deadline variant rejected nothing early: %+v", last.Extra)
			}
		}},
		{name: "adaptive", rows: 3, plots: []string{"adaptive-after-ttft.svg"}, check: func(t *testing.T, res *ScenarioResult) {
			for _, run := range res.Runs {
				before, _ := run.Extra["before"].(Summary)
				after, _ := run.Extra["after"].(Summary)
				if before.Requests == 0 || after.Requests == 0 {
					t.Errorf("run %s: a phase without requests: %d / %d", run.Label, before.Requests, after.Requests)
				}
			}
			if _, ok := res.Measurements["adaptive_over_best_fixed_after"]; !ok {
				t.Errorf("no comparison with the best fixed limit: %v", res.Measurements)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			res, err := RunScenario(context.Background(), tt.name, ScenarioOptions{OutDir: dir, Short: true, InProcess: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Table) != tt.rows+1 {
				t.Fatalf("%d table rows, want %d:\n%s", len(res.Table)-1, tt.rows, res.Markdown())
			}
			for _, run := range res.Runs {
				if run.Summary.Requests == 0 || run.Summary.Succeeded == 0 {
					t.Fatalf("run %s: summary %+v", run.Label, run.Summary)
				}
			}
			for _, p := range tt.plots {
				b, err := os.ReadFile(filepath.Join(dir, p))
				if err != nil || !strings.Contains(string(b), "<polyline") {
					t.Errorf("plot %s: %v", p, err)
				}
			}
			tt.check(t, res)
		})
	}
}
