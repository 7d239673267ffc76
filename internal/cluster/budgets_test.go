package cluster

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/tenant"
)

func demandOf(truncated bool, ds ...tenant.Demand) *tenantReport {
	return &tenantReport{demand: ds, truncated: truncated}
}

func tok(name string, perSecond float64) tenant.Demand {
	return tenant.Demand{Tenant: name, Requests: perSecond / 100, Tokens: perSecond}
}

// sumOf sums tenant t's fractions over the reporting members, plus 1/members for each that does not.
func sumOf(fr map[string]map[string]float64, members int, t string) float64 {
	s := float64(members-len(fr)) / float64(members)
	for _, per := range fr {
		s += per[t]
	}
	return s
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestTenantFractions(t *testing.T) {
	t.Parallel()
	// All of a tenant's demand on one member of two: it gets (1 + 1/40) / (1 + 1/20), the other the
	// floor; a tenant both see equally is split evenly.
	fr := tenantFractions(2, map[string]*tenantReport{
		"a": demandOf(false, tok("busy", 1000), tok("even", 50)),
		"b": demandOf(false, tok("even", 50)),
	})
	if got, want := fr["a"]["busy"], (1+1.0/40)/(1+1.0/20); !near(got, want) || !near(fr["b"]["busy"], 1-want) {
		t.Fatalf("busy on a: a %v, b %v; want %v and the rest", got, fr["b"]["busy"], want)
	}
	if !near(fr["a"]["even"], 0.5) || !near(fr["b"]["even"], 0.5) {
		t.Fatalf("even demand: %v %v, want 0.5 each", fr["a"]["even"], fr["b"]["even"])
	}
	for _, name := range []string{"busy", "even"} {
		if s := sumOf(fr, 2, name); !near(s, 1) {
			t.Fatalf("%s: fractions sum to %v", name, s)
		}
	}

	// A member that does not report (silent, or an older version) keeps its even split, 1/3; the two
	// reporting share the other 2/3 by demand, the idle one keeping its floor.
	fr = tenantFractions(3, map[string]*tenantReport{"a": demandOf(false, tok("t", 100)), "b": demandOf(false)})
	if len(fr) != 2 || !near(sumOf(fr, 3, "t"), 1) || fr["b"]["t"] <= 0 || fr["b"]["t"] > 0.05 || fr["a"]["t"] >= 2.0/3 {
		t.Fatalf("with a member missing: %v", fr)
	}

	// A truncated report counts the tenants it left out at the demand of its last listed.
	fr = tenantFractions(2, map[string]*tenantReport{
		"a": demandOf(false, tok("t1", 100)),
		"b": demandOf(true, tok("t2", 300), tok("t3", 100)),
	})
	if !near(fr["a"]["t1"], 0.5) || !near(sumOf(fr, 2, "t1"), 1) {
		t.Fatalf("t1 left out of b's truncated report: a %v b %v, want an even split (b may ask as much)", fr["a"]["t1"], fr["b"]["t1"])
	}

	// A tenant whose requests reserve no tokens is shared by requests.
	fr = tenantFractions(2, map[string]*tenantReport{
		"a": demandOf(false, tenant.Demand{Tenant: "r", Requests: 3}),
		"b": demandOf(false, tenant.Demand{Tenant: "r", Requests: 1}),
	})
	if fr["a"]["r"] <= fr["b"]["r"] || !near(sumOf(fr, 2, "r"), 1) {
		t.Fatalf("by requests: %v", fr)
	}

	// Only the MaxTenantDemand tenants of most demand are listed; the rest keep the even split.
	var many []tenant.Demand
	for i := range MaxTenantDemand + 10 {
		many = append(many, tok(fmt.Sprintf("t%03d", i), float64(10000-i)))
	}
	fr = tenantFractions(2, map[string]*tenantReport{"a": demandOf(false, many...), "b": demandOf(false)})
	if len(fr["a"]) != MaxTenantDemand || len(fr["b"]) != MaxTenantDemand {
		t.Fatalf("top-K: %d and %d tenants listed, want %d", len(fr["a"]), len(fr["b"]), MaxTenantDemand)
	}
	if _, ok := fr["a"][fmt.Sprintf("t%03d", MaxTenantDemand)]; ok {
		t.Fatal("a tenant beyond the top K was listed")
	}

	if fr := tenantFractions(2, nil); fr != nil {
		t.Fatalf("no reports: %v", fr)
	}
}

// TestCoordinatorBudgetVersions: the coordinator keeps the newest budgets reported (counter first, then
// the greater origin), sends the body only to members whose version is older, and keeps it across a
// change of term; a report of an older version, or one without the body, rolls nothing back.
func TestCoordinatorBudgetVersions(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	peers := newPeerTable("a", clock)
	peers.setMembers([]string{"a", "b", "c"})
	c := newCoordinator("a", time.Second, 100*time.Millisecond, clock, peers)
	c.start()
	send := func(id string, v tenant.Version, full bool, rpm int64) *grant {
		t.Helper()
		bs := budgetSet{version: v, full: full}
		if full {
			bs.tenants = map[string]tenant.Budget{"x": {RequestsPerMinute: rpm}}
		}
		g, err := c.exchange(report{replica: id, incarnation: id, limit: 4, tenants: &tenantReport{budgets: bs}})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	v := func(n uint64, origin string) tenant.Version { return tenant.Version{Counter: n, Origin: origin} }

	if g := send("a", tenant.Version{}, false, 0); g.budgets == nil || g.budgets.full || g.budgets.version != (tenant.Version{}) {
		t.Fatalf("nothing set anywhere: %+v", g.budgets)
	}
	if g := send("b", v(1, "b"), true, 10); g.budgets.full || g.budgets.version != v(1, "b") {
		t.Fatalf("the reporter of the newest version got %+v, want its version without the body", g.budgets)
	}
	if g := send("a", tenant.Version{}, false, 0); !g.budgets.full || g.budgets.tenants["x"].RequestsPerMinute != 10 {
		t.Fatalf("an older member got %+v, want version 1 with its body", g.budgets)
	}
	// An equal counter from a greater origin wins; from a smaller one it loses.
	send("c", v(1, "c"), true, 20)
	send("a", v(1, "a"), true, 30)
	if g := send("b", v(1, "b"), false, 0); !g.budgets.full || g.budgets.version != v(1, "c") || g.budgets.tenants["x"].RequestsPerMinute != 20 {
		t.Fatalf("tie-break: b got %+v, want c's version 1", g.budgets)
	}
	// An older version, or a newer one named without its body, changes nothing.
	send("b", v(0, "z"), true, 40)
	send("b", v(5, "b"), false, 0)
	if g := send("a", tenant.Version{}, false, 0); g.budgets.version != v(1, "c") {
		t.Fatalf("after an older report and a bodiless newer one: %+v, want c's version 1", g.budgets)
	}
	// A new term forgets the members, not the budgets.
	c.stop()
	c.start()
	if g := send("a", tenant.Version{}, false, 0); !g.budgets.full || g.budgets.version != v(1, "c") {
		t.Fatalf("after a new term: %+v, want c's version 1", g.budgets)
	}
	// A member that enforces no tenant shares (an older version) gets nothing about them.
	g, err := c.exchange(report{replica: "c", incarnation: "c", limit: 4})
	if err != nil || g.budgets != nil || g.tenantShares != nil {
		t.Fatalf("older member: %+v %v", g, err)
	}
}
