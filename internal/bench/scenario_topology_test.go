package bench

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// parsePairs sums a distance's samples over revisions and refuses what it cannot read.
func TestParsePairs(t *testing.T) {
	good := `# HELP sluice_pd_pairs_total PD pairs formed
# TYPE sluice_pd_pairs_total counter
sluice_pd_pairs_total{distance="node",revision=""} 7
sluice_pd_pairs_total{distance="node",revision="v2"} 3
sluice_pd_pairs_total{distance="cross_zone",revision=""} 2
sluice_pd_pairs_total_other{distance="zone"} 9
`
	got, err := parsePairs(bufio.NewScanner(strings.NewReader(good)))
	if err != nil || len(got) != 2 || got["node"] != 10 || got["cross_zone"] != 2 {
		t.Fatalf("got %v, %v", got, err)
	}
	for _, bad := range []string{
		"sluice_requests_total 3\n",                          // no pairs at all
		`sluice_pd_pairs_total{revision=""} 3` + "\n",        // no distance
		`sluice_pd_pairs_total{distance="node"} many` + "\n", // no number
	} {
		if got, err := parsePairs(bufio.NewScanner(strings.NewReader(bad))); err == nil {
			t.Errorf("%q: got %v, want an error", bad, got)
		}
	}
}

// The usage names every scenario (it is built from Scenarios()).
func TestUsageNamesScenarios(t *testing.T) {
	var out bytes.Buffer
	if code := Main(context.Background(), []string{"help"}, &out, &out); code != 0 {
		t.Fatalf("help: exit %d", code)
	}
	for name := range Scenarios() {
		if !strings.Contains(out.String(), name+"|") {
			t.Errorf("usage does not name %s:\n%s", name, out.String())
		}
	}
}

// TestTopologyScenarioSmoke runs the short form: a row per variant with served requests and pairs
// read from the gateway's metrics, the engines' delayed transfers matching the metric's pairs off
// their node, and no cross-zone pair when zones are forbidden, penalties or not (a promise, not
// performance).
func TestTopologyScenarioSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts simulators and gateways")
	}
	dir := t.TempDir()
	res, err := RunScenario(context.Background(), "topology", ScenarioOptions{OutDir: dir, Short: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res.Markdown())
	if len(res.Table) != 1+len(topoVariants) || len(res.Runs) != len(topoVariants) {
		t.Fatalf("%d table rows, %d runs:\n%s", len(res.Table), len(res.Runs), res.Markdown())
	}
	for _, run := range res.Runs {
		pairs, _ := run.Extra["pairs"].(map[string]int64)
		total := int64(0)
		for _, n := range pairs {
			total += n
		}
		if run.Summary.Succeeded == 0 || run.Summary.Failed > 0 || total < int64(run.Summary.Succeeded) {
			t.Errorf("run %s: %d pairs, summary %+v", run.Label, total, run.Summary)
		}
		if off := total - pairs["node"]; run.Extra["delayed_transfers"] != off {
			t.Errorf("run %s: engines delayed %v transfers, the metric has %d pairs off their node", run.Label, run.Extra["delayed_transfers"], off)
		}
	}
	for _, v := range topoForbidding {
		if n, ok := res.Measurements[v+"_cross_zone_pairs_0.5x"]; !ok || n != int64(0) {
			t.Errorf("%s: cross-zone pairs %v (present %v), want 0", v, n, ok)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "topology-0.5x-ttft.svg")); err != nil || !strings.Contains(string(b), "<polyline") {
		t.Errorf("plot: %v", err)
	}
}
