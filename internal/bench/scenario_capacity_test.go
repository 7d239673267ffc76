package bench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCapacityScenarioSmoke runs the short form of capacity: four phases served requests, the table
// has a row per phase with the truth from the simulator's parameters, the gateway's recommendation
// was sampled, and the plot exists. Not the tracking criterion (seconds cannot settle): the full run
// reports that.
func TestCapacityScenarioSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts simulators and a gateway")
	}
	dir := t.TempDir()
	res, err := RunScenario(context.Background(), "capacity", ScenarioOptions{OutDir: dir, Short: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res.Markdown())
	if got := len(res.Table) - 1; got != 4 {
		t.Fatalf("%d table rows, want 4:\n%s", got, res.Markdown())
	}
	// Truth by hand: 2x is 20 req/s of 1024-token prompts at 8000 tokens/s, a = 2.56 busy workers:
	// Erlang C within a 1 s TTFT SLO asks for 3; 0.3x (a = 0.38) for 1.
	if row := res.Table[2]; row[0] != "2x" || row[3] != "3" {
		t.Errorf("2x row %v, want prefill truth 3", row)
	}
	if row := res.Table[1]; row[3] != "1" || row[4] != "1" {
		t.Errorf("0.3x row %v, want truth 1 and 1", row)
	}
	for _, run := range res.Runs {
		if run.Summary.Succeeded == 0 {
			t.Errorf("run %s served nothing: %+v", run.Label, run.Summary)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "capacity-recommendation.svg"))
	if err != nil || strings.Count(string(b), "<polyline") != 4 {
		t.Errorf("plot: %v (want 4 lines: truth and recommendation per role)", err)
	}
}

func TestReversals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		xs   []int
		want int
	}{
		{[]int{1, 1, 2, 3, 3}, 0},
		{[]int{1, 3, 2, 2}, 1},    // overshoot and its correction
		{[]int{1, 3, 2, 3, 2}, 3}, // flapping
		{nil, 0},
	} {
		if got := reversals(tc.xs); got != tc.want {
			t.Errorf("reversals(%v) = %d, want %d", tc.xs, got, tc.want)
		}
	}
}
