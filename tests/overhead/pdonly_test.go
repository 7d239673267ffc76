package overhead

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/bench"
)

// TestOverheadScenarioPDOnly runs the short overhead scenario with --pd-only in process: only the PD
// targets run (the four of them, each answering, streams included), and only they have rows in the per-request table.
// Like TestOverheadScenarioShort, it checks the measurement, never what it measured.
func TestOverheadScenarioPDOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("starts simulators, baselines and gateways")
	}
	res, err := bench.RunScenario(context.Background(), "overhead",
		bench.ScenarioOptions{OutDir: t.TempDir(), Short: true, InProcess: true, PDOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	pdTargets := []string{"sluice-pd-seats", "sluice-pd-grpc", "sluice-pd", "bare-pd"} // longest suffix first
	succeeded := map[string]int{}
	for _, r := range res.Runs {
		i := slices.IndexFunc(pdTargets, func(tg string) bool { return strings.HasSuffix(r.Label, "-"+tg) })
		if i < 0 {
			t.Errorf("run %s is not of a PD target", r.Label)
			continue
		}
		succeeded[pdTargets[i]] += r.Summary.Succeeded
		if r.Summary.Failed > 0 {
			t.Errorf("run %s: %d of %d requests failed", r.Label, r.Summary.Failed, r.Summary.Sent)
		}
	}
	for _, tg := range pdTargets {
		if succeeded[tg] == 0 {
			t.Errorf("%s answered no request: %v", tg, succeeded)
		}
	}
	// The paired load ran sluice-pd and bare-pd side by side, and both answered.
	for _, tg := range []string{"sluice-pd", "bare-pd"} {
		i := slices.IndexFunc(res.Runs, func(r bench.RunRef) bool { return r.Label == "r1-pd-json-paired-"+tg })
		if i < 0 || res.Runs[i].Summary.Succeeded == 0 {
			t.Errorf("the paired load has no answered run on %s", tg)
		}
	}
	var perRequest []string
	for _, row := range res.Table[min(1, len(res.Table)):] {
		perRequest = append(perRequest, row[1])
	}
	for _, tg := range pdTargets {
		if !slices.Contains(perRequest, tg) {
			t.Errorf("per-request table has no %s row: %v", tg, res.Table)
		}
	}
	for _, tg := range []string{"direct", "reverseproxy", "sluice", "nginx"} {
		if slices.Contains(perRequest, tg) {
			t.Errorf("per-request table has a %s row with --pd-only: %v", tg, res.Table)
		}
	}
}

// TestOverheadScenarioPairedOnly runs the short overhead scenario with --paired-only in process: the
// paired loads' runs (PD JSON on sluice-pd and bare-pd, spaced streams on sluice and reverseproxy)
// are the only runs, all answered, and the per-request table has their rows and no other.
func TestOverheadScenarioPairedOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("starts simulators, baselines and gateways")
	}
	res, err := bench.RunScenario(context.Background(), "overhead",
		bench.ScenarioOptions{OutDir: t.TempDir(), Short: true, InProcess: true, PairedOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var labels []string
	for _, r := range res.Runs {
		labels = append(labels, r.Label)
		if r.Summary.Succeeded == 0 || r.Summary.Failed > 0 {
			t.Errorf("run %s: %d succeeded, %d failed", r.Label, r.Summary.Succeeded, r.Summary.Failed)
		}
	}
	slices.Sort(labels)
	if want := []string{"r1-pd-json-paired-bare-pd", "r1-pd-json-paired-sluice-pd",
		"r1-spaced-paired-reverseproxy", "r1-spaced-paired-sluice"}; !slices.Equal(labels, want) {
		t.Errorf("runs %v, want %v", labels, want)
	}
	var rows []string
	for _, row := range res.Table[min(1, len(res.Table)):] {
		rows = append(rows, row[0]+" "+row[1])
	}
	slices.Sort(rows)
	if want := []string{"pd-json-paired bare-pd", "pd-json-paired sluice-pd", "spaced-paired reverseproxy",
		"spaced-paired sluice"}; !slices.Equal(rows, want) {
		t.Errorf("per-request rows %v, want %v", rows, want)
	}
}
