package bench

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestCapacityScenarioSmoke runs the short form of capacity: four phases served requests, the table
// has a row per phase with the formula's answer from the simulator's parameters and a well-formed
// measured truth (measured for the first phase only: one trial per role), the gateway's
// recommendation was sampled, and the plot exists. Not the tracking criterion (seconds cannot
// settle): the full run reports that.
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
	// Formula by hand: 2x is 20 req/s of 1024-token prompts at 8000 tokens/s, a = 2.56 busy workers:
	// Erlang C within a 1 s TTFT SLO asks for 3; 0.3x (a = 0.38) for 1.
	if row := res.Table[2]; row[0] != "2x" || row[5] != "3" {
		t.Errorf("2x row %v, want prefill formula 3", row)
	}
	if row := res.Table[1]; row[5] != "1" || row[6] != "1" {
		t.Errorf("0.3x row %v, want formula 1 and 1", row)
	}
	truth := regexp.MustCompile(`^(\d+|>\d+|-)$`)
	for i, row := range res.Table[1:] {
		if !truth.MatchString(row[3]) || !truth.MatchString(row[4]) || (i == 0 && (row[3] == "-" || row[4] == "-")) {
			t.Errorf("row %v: measured truth not well-formed (the first phase must be measured)", row)
		}
	}
	for _, run := range res.Runs {
		if run.Summary.Succeeded == 0 {
			t.Errorf("run %s served nothing: %+v", run.Label, run.Summary)
		}
	}
	if n := len(res.Runs); n != 4+2 {
		t.Errorf("%d runs, want the 4 phases and 2 truth trials", n)
	}
	b, err := os.ReadFile(filepath.Join(dir, "capacity-recommendation.svg"))
	if err != nil || strings.Count(string(b), "<polyline") != 4 {
		t.Errorf("plot: %v (want 4 lines: truth and recommendation per role)", err)
	}
}

// TestCapSearch: the smallest n that meets, found from a guess below, at or above it, within the
// bound and the budget.
func TestCapSearch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                   string
		need, from, hi, budget int
		want                   int
		found                  bool
		tries                  int
	}{
		{"up from below", 3, 1, 6, 6, 3, true, 3},
		{"down from above", 2, 5, 8, 6, 2, true, 4 + 1},
		{"guess is right", 3, 3, 6, 6, 3, true, 2},
		{"one meets at the floor", 1, 1, 6, 6, 1, true, 1},
		{"guess below zero", 1, -1, 6, 6, 1, true, 1},
		{"none within the bound", 9, 1, 4, 10, 5, false, 4},
		{"budget out going up", 5, 1, 9, 2, 3, false, 2},
		{"budget out going down: an upper bound", 1, 4, 9, 2, 3, true, 2},
	} {
		tries := 0
		got, found, err := capSearch(tc.from, tc.hi, tc.budget, func(n int) (bool, error) {
			tries++
			if n < 1 {
				t.Fatalf("%s: tried %d", tc.name, n)
			}
			return n >= tc.need, nil
		})
		if err != nil || got != tc.want || found != tc.found || tries != tc.tries {
			t.Errorf("%s: got %d found %v after %d tries (err %v), want %d %v after %d", tc.name, got, found, tries, err, tc.want, tc.found, tc.tries)
		}
	}
	boom := errors.New("boom")
	if _, _, err := capSearch(1, 3, 3, func(int) (bool, error) { return false, boom }); !errors.Is(err, boom) {
		t.Errorf("error not returned: %v", err)
	}
}

// TestCapTrialOf: a trial whose served requests were fast but a quarter of whose requests were
// refused (the 2x load on 2 prefill workers behind admission) does not meet; one refusal in 100 does.
func TestCapTrialOf(t *testing.T) {
	t.Parallel()
	fast := Dist{Count: 1, Mean: 200}
	for _, tc := range []struct {
		name string
		sum  Summary
		want bool
	}{
		{"quarter refused", Summary{Requests: 307, Sent: 307, Succeeded: 232, Failed: 75, TTFT: fast}, false},
		{"dropped by the client count too", Summary{Requests: 100, Sent: 90, Succeeded: 90, Dropped: 10, TTFT: fast}, false},
		{"one in a hundred", Summary{Requests: 100, Sent: 100, Succeeded: 99, Failed: 1, TTFT: fast}, true},
		{"nothing offered", Summary{}, false},
	} {
		if got := capTrialOf(1, 1, tc.sum); got.meets != tc.want {
			t.Errorf("%s: meets %v, want %v (%+v)", tc.name, got.meets, tc.want, got)
		}
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
