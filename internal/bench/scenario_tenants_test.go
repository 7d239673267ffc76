package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestTenantsScenarioSmoke runs the short form of the tenants scenario and checks the report's shape
// and sense: a row per tenant and variant (no noisy row without the noisy tenant), every tenant served,
// served and fair shares that add up to the whole, the headline ratios present, the files written.
// Not performance: the figures of a few seconds on a shared machine say nothing.
func TestTenantsScenarioSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts simulators and gateways")
	}
	dir := t.TempDir()
	res, err := RunScenario(context.Background(), "tenants", ScenarioOptions{OutDir: dir, Short: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res.Markdown())
	if got, want := len(res.Table)-1, 4+5+5+5; got != want {
		t.Fatalf("%d table rows, want %d:\n%s", got, want, res.Markdown())
	}
	p := defaultTenantsPlan(true)
	variants := p.variants()
	if len(res.Runs) != len(variants) {
		t.Fatalf("%d runs, want %d", len(res.Runs), len(variants))
	}
	for i, run := range res.Runs {
		v := variants[i]
		if run.Label != v.name {
			t.Errorf("run %d is %q, want %q", i, run.Label, v.name)
		}
		tenants := slices.Clone(p.quiet)
		if v.noisy {
			tenants = append(tenants, noisyTenant)
		}
		if _, ok := run.Extra[noisyTenant]; ok != v.noisy {
			t.Errorf("run %s: noisy tenant reported %v, want %v", run.Label, ok, v.noisy)
		}
		for _, name := range tenants {
			sum, ok := run.Extra[name].(Summary)
			if !ok || sum.Requests == 0 || sum.Succeeded == 0 {
				t.Errorf("run %s: tenant %s: %+v", run.Label, name, run.Extra[name])
			}
		}
	}
	shares := map[string][2]float64{} // variant -> served, fair
	for _, row := range res.Table[1:] {
		served, fair := parsePct(t, row[8]), parsePct(t, row[9])
		if served < 0 || served > 1 || fair < 0 || fair > 1 {
			t.Errorf("row %v: shares out of range", row)
		}
		sh := shares[row[0]]
		shares[row[0]] = [2]float64{sh[0] + served, sh[1] + fair}
		// Quiet tenants with the noisy one sending have a ratio to their baseline; nobody else has.
		wantRatio := row[0] != "noisy-absent" && row[1] != noisyTenant
		if gotRatio := strings.HasSuffix(row[6], "x"); gotRatio != wantRatio {
			t.Errorf("row %v: ratio to the noisy-absent baseline %q", row, row[6])
		}
	}
	for v, sh := range shares {
		if math.Abs(sh[0]-1) > 0.01 || math.Abs(sh[1]-1) > 0.01 {
			t.Errorf("variant %s: served shares add up to %.3f, fair shares to %.3f, want 1", v, sh[0], sh[1])
		}
	}
	for _, k := range []string{"worst_quiet_p99_over_absent_fairness-round-robin", "worst_quiet_p99_over_absent_fairness-off",
		"noisy_served_over_fair_fairness-round-robin", "noisy_served_over_fair_fairness-off", "quiet_ttft_p99_ms_noisy-absent",
		"quiet_ttft_p99_ms_alone_fairness-round-robin", "worst_quiet_p99_over_absent_fairness-share", "noisy_served_over_fair_fairness-share"} {
		if v, ok := res.Measurements[k].(float64); !ok || v <= 0 {
			t.Errorf("measurement %s = %v", k, res.Measurements[k])
		}
	}
	if len(res.Sections) != 1 || len(res.Sections[0].Table) != len(variants)+1 {
		t.Errorf("engine queue section %+v, want a row per variant", res.Sections)
	}
	for _, f := range []string{"tenants.json", "tenants.md", "tenants-ttft.svg"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
}

func parsePct(t *testing.T, s string) float64 {
	t.Helper()
	var v float64
	if _, err := fmt.Sscanf(strings.TrimSuffix(s, "%"), "%g", &v); err != nil {
		t.Fatalf("share %q: %v", s, err)
	}
	return v / 100
}

func TestSplitBehindOwn(t *testing.T) {
	recs := []Record{
		{Index: 0, Class: "a", StartMS: 0, TTFTMS: 100},
		{Index: 1, Class: "b", StartMS: 50, TTFTMS: 10},  // a's request is another tenant's
		{Index: 2, Class: "a", StartMS: 60, TTFTMS: 100}, // behind a's first
		{Index: 3, Class: "a", StartMS: 200, TTFTMS: 10}, // a's earlier ones have their first tokens
	}
	alone, behind := splitBehindOwn(recs)
	idx := func(rs []Record) (out []int64) {
		for _, r := range rs {
			out = append(out, r.Index)
		}
		return out
	}
	if got := idx(alone); !slices.Equal(got, []int64{0, 1, 3}) {
		t.Errorf("alone %v, want [0 1 3]", got)
	}
	if got := idx(behind); !slices.Equal(got, []int64{2}) {
		t.Errorf("behind %v, want [2]", got)
	}
}

func TestMaxMinFair(t *testing.T) {
	for _, tt := range []struct {
		name     string
		capacity float64
		demand   []float64
		want     []float64
	}{
		{"under capacity: every demand met", 10, []float64{1, 2, 3}, []float64{1, 2, 3}},
		{"equal split of an overload", 9, []float64{5, 5, 5}, []float64{3, 3, 3}},
		{"the scenario: quiet met, noisy gets the rest", 16, []float64{20, 3, 3, 3, 3}, []float64{4, 3, 3, 3, 3}},
		{"two above the split share the rest", 10, []float64{1, 8, 8}, []float64{1, 4.5, 4.5}},
		{"nothing to share", 0, []float64{1, 2}, []float64{0, 0}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := maxMinFair(tt.capacity, tt.demand)
			for i := range got {
				if math.Abs(got[i]-tt.want[i]) > 1e-9 {
					t.Fatalf("maxMinFair(%g, %v) = %v, want %v", tt.capacity, tt.demand, got, tt.want)
				}
			}
		})
	}
}

// TestTenantsPlanOptions: --prompts sets equal or lognormal prompt lengths (the capacity follows their
// mean), --variants picks variants by name, and bad values are configuration errors.
func TestTenantsPlanOptions(t *testing.T) {
	for _, c := range []struct {
		spec               string
		prompt, lo, hi     int
		meanAbove, meanMax float64
	}{
		{"1024", 1024, 0, 0, 1023.9, 1024},
		{"256-4096", 1024, 256, 4096, 1200, 1350}, // a lognormal's mean is above its median
		{"1004-1044", 1024, 1004, 1044, 1023, 1026},
	} {
		p := defaultTenantsPlan(false)
		if err := p.setPrompts(c.spec); err != nil {
			t.Fatalf("%s: %v", c.spec, err)
		}
		if p.prompt != c.prompt || p.promptMin != c.lo || p.promptMax != c.hi {
			t.Errorf("%s: prompt %d in [%d, %d], want %d in [%d, %d]", c.spec, p.prompt, p.promptMin, p.promptMax, c.prompt, c.lo, c.hi)
		}
		if m := p.class("x", 1).MeanPromptTokens(); m <= c.meanAbove || m > c.meanMax {
			t.Errorf("%s: mean prompt %.1f, want in (%.1f, %.1f]", c.spec, m, c.meanAbove, c.meanMax)
		}
	}
	for _, bad := range []string{"", "0", "x", "10-5", "5-", "-5"} {
		p := defaultTenantsPlan(false)
		if err := p.setPrompts(bad); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("prompts %q: %v, want ErrInvalidConfig", bad, err)
		}
	}
	p := defaultTenantsPlan(false)
	vs, err := p.chosen([]string{"fairness-share", "noisy-absent"})
	if err != nil || len(vs) != 2 || vs[0].name != "fairness-share" || vs[1].name != "noisy-absent" {
		t.Errorf("chosen: %v, %v", vs, err)
	}
	if all, _ := p.chosen(nil); len(all) != 4 {
		t.Errorf("no names chose %d variants, want 4", len(all))
	}
	if _, err := p.chosen([]string{"fairness-on"}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("unknown variant: %v", err)
	}
}
