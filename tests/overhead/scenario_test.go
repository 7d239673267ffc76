package overhead

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/bench"
)

// TestOverheadScenarioShort runs `sluice-bench scenario overhead --short` in process (CI's form of
// the overhead scenario; the full one is in docs/benchmarks.md): every target gets its loads and
// answers them, and the per-request and memory tables have a row for each. It checks that the
// measurement works, never what it measured. (It replaced the overhead case of internal/bench's
// TestScenarioSmoke, which ran the same short scenario.)
func TestOverheadScenarioShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts simulators, baselines and gateways")
	}
	res, err := bench.RunScenario(context.Background(), "overhead",
		bench.ScenarioOptions{OutDir: t.TempDir(), Short: true, InProcess: true, NoNginx: true})
	if err != nil {
		t.Fatal(err)
	}
	// On a loaded machine a short window can see a stall of a second (every target alike), so what
	// must hold is per target: it answered, and it never failed a request it was sent. (A request the
	// generator could not send in time, dropped, is the machine's business.)
	succeeded := map[string]int{}
	for _, r := range res.Runs {
		target := r.Label[strings.LastIndex(r.Label, "-")+1:] // labels are r<round>-<load>-<target>
		// Targets with dashes in their names, the longest suffix last.
		for _, pd := range []string{"bare-pd", "sluice-pd", "sluice-pd-grpc"} {
			if strings.HasSuffix(r.Label, "-"+pd) {
				target = pd
			}
		}
		succeeded[target] += r.Summary.Succeeded
		if r.Summary.Failed > 0 {
			t.Errorf("run %s: %d of %d requests failed", r.Label, r.Summary.Failed, r.Summary.Sent)
		}
	}
	for _, load := range []string{"pd-json-paired", "spaced-paired"} {
		if !ranLoad(res, load) {
			t.Errorf("no run of the paired load %s", load)
		}
	}
	for _, target := range []string{"direct", "reverseproxy", "sluice", "bare-pd", "sluice-pd", "sluice-pd-grpc"} {
		if succeeded[target] == 0 {
			t.Errorf("%s answered no request: %v", target, succeeded)
		}
	}
	rows := func(table [][]string, col int) []string {
		var out []string
		for _, row := range table[min(1, len(table)):] {
			out = append(out, row[col])
		}
		return out
	}
	perRequest := rows(res.Table, 1)
	for _, target := range []string{"direct", "reverseproxy", "sluice", "bare-pd", "sluice-pd", "sluice-pd-grpc"} {
		if !slices.Contains(perRequest, target) {
			t.Errorf("per-request table has no %s row: %v", target, res.Table)
		}
	}
	sections := map[string][][]string{}
	for _, s := range res.Sections {
		sections[strings.SplitN(s.Title, ":", 2)[0]] = s.Table
	}
	// In process the proxies' CPU is not measured, so the per-frame table has only its header.
	if _, ok := sections["Gateway CPU per relayed frame"]; !ok {
		t.Errorf("no per-frame section: %v", res.Sections)
	}
	memory := rows(sections["Memory per open stream"], 0)
	for _, target := range []string{"reverseproxy", "sluice"} {
		if !slices.Contains(memory, target) {
			t.Errorf("memory table has no %s row: %v", target, memory)
		}
	}
}

// ranLoad reports whether some run of res was of load (labels are r<round>-<load>-<target>).
func ranLoad(res *bench.ScenarioResult, load string) bool {
	for _, r := range res.Runs {
		if strings.Contains(r.Label, "-"+load+"-") {
			return true
		}
	}
	return false
}
