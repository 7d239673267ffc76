package cluster

import (
	"cmp"
	"maps"
	"slices"

	"github.com/sluicegw/sluice/internal/tenant"
)

// TenantBudgets is this replica's tenant budgets as coordination sees them (internal/tenant Budgets):
// the exchange loop reports their version and demand, applies a newer version and enforces the
// tenant shares of each grant. Its methods must not block.
type TenantBudgets interface {
	// SetOrigin names this replica in the versions of its live changes.
	SetOrigin(id string)
	// Version is the version of the budgets in force; Versioned the budgets with it.
	Version() tenant.Version
	Versioned() (tenant.Version, tenant.Budget, map[string]tenant.Budget)
	// Apply makes a newer version's budgets the ones in force (an older or equal one changes nothing).
	Apply(v tenant.Version, def tenant.Budget, tenants map[string]tenant.Budget) bool
	// Demand returns the recent demand of at most k tenants, largest first, and whether it left any out.
	Demand(k int) ([]tenant.Demand, bool)
	// SetShares sets the fraction of each budget this replica enforces: per[t] for t, def for the rest.
	SetShares(def float64, per map[string]float64)
}

// MaxTenantDemand bounds the tenants a report lists and a grant shares by demand: the rest keep the
// even split, which sums to the budget too.
const MaxTenantDemand = 256

// idleFloor sets the floor of a demand-weighted share: each reporting member's demand counts
// 1/idleFloor of the mean demand more than it is, so a member that sees none of a tenant keeps
// 1/(idleFloor+1) of its even split (about 5 %) and serves the tenant's first requests at once, until
// its own demand raises its share at the next round.
const idleFloor = 20

// budgetSet is a version of the tenant budgets, with the budgets themselves when full.
type budgetSet struct {
	version tenant.Version
	full    bool
	def     tenant.Budget
	tenants map[string]tenant.Budget
}

// tenantReport is what a replica that enforces tenant shares reports about its tenants.
type tenantReport struct {
	budgets   budgetSet
	demand    []tenant.Demand // largest first
	truncated bool            // more tenants asked than demand lists
}

// tenantsReport builds this replica's tenant report: the body of its budgets only when their version
// is newer than the one its last grant named (a live change made here, or a coordinator that does not
// know it yet).
func (r *Replica) tenantsReport() *tenantReport {
	b := r.d.Budgets
	r.mu.Lock()
	ack := r.st.budgetsAck
	r.mu.Unlock()
	tr := &tenantReport{budgets: budgetSet{version: b.Version()}}
	if tr.budgets.version.Newer(ack) {
		tr.budgets.version, tr.budgets.def, tr.budgets.tenants = b.Versioned()
		tr.budgets.full = true
	}
	tr.demand, tr.truncated = b.Demand(MaxTenantDemand)
	return tr
}

// settleTenants applies what a grant says about the tenants: a newer version of the budgets, and the
// fraction of each budget to enforce (an even split over the members from a coordinator that shares
// none). When the lease ended without a new grant (fellBack) the budgets are split evenly over the
// members of the last grant. Called by the exchange loop without locks held.
func (r *Replica) settleTenants(g *grant, fellBack bool, members int) {
	b := r.d.Budgets
	if g != nil {
		if g.budgets != nil {
			if g.budgets.full {
				b.Apply(g.budgets.version, g.budgets.def, g.budgets.tenants)
			}
			r.mu.Lock()
			r.st.budgetsAck = g.budgets.version
			r.mu.Unlock()
		}
		def, per := g.defaultTenantShare, g.tenantShares
		if def <= 0 {
			def, per = 1/float64(max(members, 1)), nil
		}
		r.setTenantShares(def, per)
	} else if fellBack {
		r.setTenantShares(1/float64(max(members, 1)), nil)
	}
}

// setTenantShares hands the shares to the budgets when they changed (each change rescales every bucket).
func (r *Replica) setTenantShares(def float64, per map[string]float64) {
	r.mu.Lock()
	same := r.st.tenantsSet && def == r.st.tenantDefault && maps.Equal(per, r.st.tenantShares)
	r.st.tenantsSet, r.st.tenantDefault, r.st.tenantShares = true, def, per
	r.mu.Unlock()
	if !same {
		r.d.Budgets.SetShares(def, per)
	}
}

// learnBudgetsLocked keeps the newest budgets any member reported. The books survive a change of term:
// versions only grow, so nothing a predecessor knew can be newer than what the members report.
func (c *coordinator) learnBudgetsLocked(r report) {
	if r.tenants != nil && r.tenants.budgets.full && r.tenants.budgets.version.Newer(c.budgets.version) {
		c.budgets = r.tenants.budgets
	}
}

// budgetsForLocked is what a grant to m says about the budgets: the newest version, with the budgets
// when m's is older.
func (c *coordinator) budgetsForLocked(m *member) *budgetSet {
	if m.rep.tenants == nil {
		return nil
	}
	bs := budgetSet{version: c.budgets.version}
	if c.budgets.full && c.budgets.version.Newer(m.rep.tenants.budgets.version) {
		bs = c.budgets
	}
	return &bs
}

// planTenantsLocked sets the tenant shares of every following member that enforces them, for the
// members of this round (live).
func (c *coordinator) planTenantsLocked(live []string, following []*member) {
	reports := map[string]*tenantReport{}
	for _, m := range following {
		m.tenantShares = nil
		if m.rep.tenants != nil {
			reports[m.id] = m.rep.tenants
		}
	}
	c.tenantDefault = 0
	if len(live) > 0 {
		c.tenantDefault = 1 / float64(len(live))
	}
	for id, per := range tenantFractions(len(live), reports) {
		c.members[id].tenantShares = per
	}
}

// tenantFractions splits each tenant's budget over a fleet of members replicas, weighted by the demand
// the reporting ones (reports, by member id) see: every member that does not report (silent, unknown,
// or of a version that enforces an even split) is counted at its even split 1/members, and the rest,
// reporting/members, goes to the reporting members in proportion to their demand plus a floor of
// 1/idleFloor of the mean (fraction_i = R (d_i + e) / (sum d + n e), e = sum d / (idleFloor n)). The
// fractions of a tenant sum to 1 over the members. Demand is in tokens per second, or in requests for
// a tenant whose requests reserved no tokens anywhere. A member whose report was truncated is counted,
// for a tenant it did not list, at the demand of the last it listed (no less than what it left out).
// Only the MaxTenantDemand tenants of most demand are shared so; the others keep the even split.
func tenantFractions(members int, reports map[string]*tenantReport) map[string]map[string]float64 {
	n := len(reports)
	if n == 0 {
		return nil
	}
	members = max(members, n)
	type total struct {
		name     string
		req, tok float64
	}
	totals := map[string]*total{}
	for _, rep := range reports {
		for _, d := range rep.demand {
			t := totals[d.Tenant]
			if t == nil {
				t = &total{name: d.Tenant}
				totals[d.Tenant] = t
			}
			t.req += d.Requests
			t.tok += d.Tokens
		}
	}
	ranked := slices.SortedFunc(maps.Values(totals), func(x, y *total) int {
		return cmp.Or(cmp.Compare(y.tok, x.tok), cmp.Compare(y.req, x.req), cmp.Compare(x.name, y.name))
	})
	if len(ranked) > MaxTenantDemand {
		ranked = ranked[:MaxTenantDemand]
	}
	ids := slices.Sorted(maps.Keys(reports))
	listed := make(map[string]map[string]tenant.Demand, n)
	for _, id := range ids {
		l := make(map[string]tenant.Demand, len(reports[id].demand))
		for _, d := range reports[id].demand {
			l[d.Tenant] = d
		}
		listed[id] = l
	}
	out := make(map[string]map[string]float64, n)
	for _, id := range ids {
		out[id] = make(map[string]float64, len(ranked))
	}
	reporting := float64(n) / float64(members)
	ds := make([]float64, n)
	for _, t := range ranked {
		byTokens := t.tok > 0
		unit := func(d tenant.Demand) float64 {
			if byTokens {
				return d.Tokens
			}
			return d.Requests
		}
		sum := 0.0
		for i, id := range ids {
			rep := reports[id]
			d, ok := listed[id][t.name]
			switch {
			case ok:
				ds[i] = unit(d)
			case rep.truncated && len(rep.demand) > 0:
				ds[i] = unit(rep.demand[len(rep.demand)-1])
			default:
				ds[i] = 0
			}
			sum += ds[i]
		}
		for i, id := range ids {
			if sum <= 0 {
				out[id][t.name] = 1 / float64(members)
				continue
			}
			e := sum / (idleFloor * float64(n))
			out[id][t.name] = reporting * (ds[i] + e) / (sum + float64(n)*e)
		}
	}
	return out
}
