package tenant_test

import (
	"math"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/tenant"
)

// TestBudgetSetSharesMovesBuckets: SetShares rescales each bucket proportionally (the same fraction of
// its capacity full), per tenant, and a tenant not named keeps the default share.
func TestBudgetSetSharesMovesBuckets(t *testing.T) {
	t.Parallel()
	clk := newClock()
	b := tenant.NewBudgets(tenant.BudgetConfig{Default: tenant.Budget{RequestsPerMinute: 100}, Now: clk.now})
	b.SetShares(0.5, nil) // 50 a minute here
	for range 25 {
		if _, _, err := b.Reserve("a", 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := b.Reserve("b", 0); err != nil { // b's bucket: 49 of 50 left
		t.Fatal(err)
	}
	b.SetShares(0.25, map[string]float64{"a": 0.8}) // a: half full of 80; b: 49/50 of 25
	if _, q, _ := b.Reserve("a", 0); q.RemainingRequests != 39 {
		t.Fatalf("a after its share rose to 0.8: %d left, want 39 (half of 80, less one)", q.RemainingRequests)
	}
	if _, q, _ := b.Reserve("b", 0); q.RemainingRequests != 23 {
		t.Fatalf("b on the default share 0.25: %d left, want 23 (24.5, less one)", q.RemainingRequests)
	}
	def, per := b.Shares()
	if def != 0.25 || per["a"] != 0.8 || len(per) != 1 {
		t.Fatalf("Shares() = %v %v", def, per)
	}
	// A share of 0 would mean no limit: it is clamped to a small positive one.
	b.SetShares(0, nil)
	if _, _, err := b.Reserve("c", 0); err != nil {
		t.Fatal(err) // a full bucket lets one through
	}
	if _, _, err := b.Reserve("c", 0); err == nil {
		t.Fatal("a share of 0 lifted the limit")
	}
}

// TestBudgetDemandWeightedShareServesWholeBudget: a tenant whose traffic all lands on one replica of
// two is served within 5 % of its whole budget over a simulated minute under the demand-weighted
// share (what cluster coordination grants it: (1 + 1/40) / (1 + 1/20)), against half under the even
// split.
func TestBudgetDemandWeightedShareServesWholeBudget(t *testing.T) {
	t.Parallel()
	const rpm = 600
	served := func(share map[string]float64) int {
		clk := newClock()
		b := tenant.NewBudgets(tenant.BudgetConfig{Default: tenant.Budget{RequestsPerMinute: rpm}, Now: clk.now})
		b.SetShares(0.5, share)
		for {
			if _, _, err := b.Reserve("a", 0); err != nil {
				break
			}
		}
		n := 0
		for range 6000 { // 100 a second, 10x the budget, for a minute
			clk.add(10 * time.Millisecond)
			if _, _, err := b.Reserve("a", 0); err == nil {
				n++
			}
		}
		return n
	}
	if n := served(nil); n < 0.45*rpm || n > 0.55*rpm {
		t.Fatalf("even split: %d served in a minute, want about half of %d", n, rpm)
	}
	if n := served(map[string]float64{"a": (1 + 1.0/40) / (1 + 1.0/20)}); n < 0.95*rpm || n > 1.05*rpm {
		t.Fatalf("demand-weighted share: %d served in a minute, want %d ± 5%%", n, rpm)
	}
}

// TestBudgetDemand: the demand reads a steady stream's rate, refused requests included, decays when
// the tenant stops, and lists only tenants with a budget, the largest first, at most k.
func TestBudgetDemand(t *testing.T) {
	t.Parallel()
	clk := newClock()
	b := tenant.NewBudgets(tenant.BudgetConfig{Tenants: map[string]tenant.Budget{"a": {RequestsPerMinute: 60}, "b": {TokensPerMinute: 1e6}}, Now: clk.now})
	for range 30 * 10 { // 10 a second for 30 s; a is refused most of them
		clk.add(100 * time.Millisecond)
		b.Reserve("a", 50)
		b.Reserve("b", 10)
		b.Reserve("free", 10) // no budget: not listed
	}
	top, truncated := b.Demand(10)
	if len(top) != 2 || truncated || top[0].Tenant != "a" || math.Abs(top[0].Requests-10) > 0.5 || math.Abs(top[0].Tokens-500) > 25 {
		t.Fatalf("demand %+v, want a at ~10 requests and ~500 tokens a second first, then b", top)
	}
	if top, truncated := b.Demand(1); len(top) != 1 || !truncated || top[0].Tenant != "a" {
		t.Fatalf("Demand(1) = %+v %v, want a only, truncated", top, truncated)
	}
	clk.add(10 * tenant.DemandWindow)
	if top, _ := b.Demand(10); len(top) != 0 {
		t.Fatalf("demand after ten windows idle: %+v, want none", top)
	}
}

// TestBudgetVersions: a live change takes the next counter under this replica's origin; Apply takes
// only a newer version (counter first, then the greater origin) and keeps what tenants used.
func TestBudgetVersions(t *testing.T) {
	t.Parallel()
	clk := newClock()
	b := tenant.NewBudgets(tenant.BudgetConfig{Default: tenant.Budget{RequestsPerMinute: 10}, Now: clk.now})
	if v := b.Version(); v != (tenant.Version{}) {
		t.Fatalf("the flags' budgets are version %+v, want 0", v)
	}
	b.SetOrigin("http://b")
	b.Set(tenant.Budget{RequestsPerMinute: 10}, nil)
	if v := b.Version(); v != (tenant.Version{Counter: 1, Origin: "http://b"}) {
		t.Fatalf("after a live change: %+v", v)
	}
	for range 5 {
		b.Reserve("a", 0)
	}
	if b.Apply(tenant.Version{Counter: 1, Origin: "http://a"}, tenant.Budget{RequestsPerMinute: 99}, nil) {
		t.Fatal("an equal counter from a smaller origin was applied")
	}
	if b.Apply(tenant.Version{}, tenant.Budget{RequestsPerMinute: 99}, nil) {
		t.Fatal("an older version was applied")
	}
	if !b.Apply(tenant.Version{Counter: 1, Origin: "http://c"}, tenant.Budget{RequestsPerMinute: 20}, map[string]tenant.Budget{"x": {}}) {
		t.Fatal("an equal counter from a greater origin was not applied")
	}
	v, def, per := b.Versioned()
	if v.Origin != "http://c" || def.RequestsPerMinute != 20 || len(per) != 1 {
		t.Fatalf("Versioned() = %+v %+v %v", v, def, per)
	}
	// a used 5 of 10; the raise to 20 adds 10 at once: 15 left, 14 after this one.
	if _, q, _ := b.Reserve("a", 0); q.RemainingRequests != 14 {
		t.Fatalf("after the applied raise: %d left, want 14", q.RemainingRequests)
	}
	b.Set(def, per) // the next live change here follows the newest counter known
	if v := b.Version(); v != (tenant.Version{Counter: 2, Origin: "http://b"}) {
		t.Fatalf("a live change after applying version 1: %+v, want 2", v)
	}
}
