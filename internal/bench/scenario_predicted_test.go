package bench

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// Request n is the same in every variant, and the mix is the one the scenario states: about
// plLongShare long unique prompts, the rest one of plPrefixes shared prefixes plus a question.
func TestPredictedLatencyRequests(t *testing.T) {
	if !slices.Equal(plRequest(42), plRequest(42)) {
		t.Fatal("request 42 differs between two calls")
	}
	long, prefixes := 0, map[[4]byte]bool{}
	const n = 4000
	for i := range int64(n) {
		w := plRequest(i)
		switch {
		case len(w) >= plLongMin && len(w) <= plLongMax:
			long++
		case len(w) == plPrefixTokens+plQuestionTokens:
			prefixes[w[0]] = true
		default:
			t.Fatalf("request %d: %d words", i, len(w))
		}
	}
	if share := float64(long) / n; share < plLongShare-0.03 || share > plLongShare+0.03 {
		t.Errorf("long share %.3f, want %.2f ± 0.03", share, plLongShare)
	}
	if len(prefixes) != plPrefixes {
		t.Errorf("%d distinct prefixes, want %d", len(prefixes), plPrefixes)
	}
	text, ids := string(plBody(plRequest(1), false)), string(plBody(plRequest(1), true))
	if !strings.Contains(text, `"prompt":"`) || !strings.Contains(ids, `"prompt":[`) {
		t.Errorf("bodies: text %.60s..., ids %.60s...", text, ids)
	}
}

// TestPredictedLatencyScenarioSmoke runs the short form: a row per policy with served requests, the
// ratios and the goal's measurement. Not performance.
func TestPredictedLatencyScenarioSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts simulators and gateways")
	}
	res, err := RunScenario(context.Background(), "predicted-latency", ScenarioOptions{OutDir: t.TempDir(), Short: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Table) != 5 || len(res.Runs) != 4 {
		t.Fatalf("%d table rows, %d runs:\n%s", len(res.Table), len(res.Runs), res.Markdown())
	}
	for _, run := range res.Runs {
		if run.Summary.Succeeded == 0 || run.Summary.Failed > 0 {
			t.Errorf("run %s: summary %+v", run.Label, run.Summary)
		}
	}
	if res.Table[1][6] != "1.00x" {
		t.Errorf("predicted_latency's own p99 ratio %q, want 1.00x", res.Table[1][6])
	}
	if _, ok := res.Measurements["p99_reduction_vs_best_other_12rps"]; !ok {
		t.Errorf("no goal measurement in %v", res.Measurements)
	}
}
