package bench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDecodeBoundScenarioSmoke runs the short form of decode-bound: every "off" run served requests and
// counted the decode's queue, the table has a row per run, the plots exist. The "on" runs either ran
// (a gateway with the decode gate) or are rows marked "not run" with the gateway's reason in a note.
// Not performance.
func TestDecodeBoundScenarioSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts simulators and gateways")
	}
	dir := t.TempDir()
	res, err := RunScenario(context.Background(), "decode-bound", ScenarioOptions{OutDir: dir, Short: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res.Markdown())
	if got, want := len(res.Table)-1, 2*3*2; got != want {
		t.Fatalf("%d table rows, want %d:\n%s", got, want, res.Markdown())
	}
	off := 0
	for _, run := range res.Runs {
		if run.Summary.Requests == 0 || run.Summary.Succeeded == 0 {
			t.Errorf("run %s: summary %+v", run.Label, run.Summary)
		}
		if run.Extra["gate"] == "off" {
			off++
		}
	}
	if off != 6 {
		t.Errorf("%d runs with the gate off, want 6", off)
	}
	for _, row := range res.Table[1:] {
		if row[4] == "not run" && !strings.Contains(strings.Join(res.Notes, "\n"), row[0]+"-"+row[1]+"-"+row[2]+": not run") {
			t.Errorf("row %v not run, and no note says why", row)
		}
	}
	if _, ok := res.Measurements["decode_capacity_req_per_sec"]; !ok {
		t.Errorf("no decode capacity in %v", res.Measurements)
	}
	for _, p := range []string{"decode-bound-decode-2x-ttft.svg", "decode-bound-prefill-2x-ttft.svg", "decode-bound-decode-0.7x-ttft.svg"} {
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil || !strings.Contains(string(b), "<polyline") {
			t.Errorf("plot %s: %v", p, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "decode-bound.md")); err != nil || !strings.Contains(string(b), "max decode waiting") {
		t.Errorf("decode-bound.md: %v", err)
	}
}
