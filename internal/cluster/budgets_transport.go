package cluster

import (
	"fmt"
	"math"

	clusterv1 "github.com/sluicegw/sluice/gen/sluice/cluster/v1"
	"github.com/sluicegw/sluice/internal/tenant"
)

// The tenant budgets' part of the exchange messages (budgets.go), checked on the way in: a malformed
// one is refused (a report) or not enforced (a grant), never applied.

func validShare(s float64) bool { return s > 0 && s <= 1 }

func validRate(r float64) bool { return r >= 0 && !math.IsInf(r, 0) && !math.IsNaN(r) }

func fromTenantReport(req *clusterv1.ExchangeRequest) (*tenantReport, error) {
	tr := &tenantReport{truncated: req.GetTenantDemandTruncated()}
	if req.GetBudgets() != nil {
		bs, err := fromBudgets(req.GetBudgets())
		if err != nil {
			return nil, err
		}
		tr.budgets = bs
	}
	seen := make(map[string]bool, len(req.GetTenantDemand()))
	for _, d := range req.GetTenantDemand() {
		if d.GetTenant() == "" || seen[d.GetTenant()] || !validRate(d.GetRequestsPerSecond()) || !validRate(d.GetTokensPerSecond()) {
			return nil, fmt.Errorf("%w: tenant demand for %q: a name listed once and rates >= 0", ErrBadRequest, d.GetTenant())
		}
		seen[d.GetTenant()] = true
		if len(tr.demand) == MaxTenantDemand {
			// A report longer than this build lists is cut to what it would list itself.
			tr.truncated = true
			break
		}
		tr.demand = append(tr.demand, tenant.Demand{Tenant: d.GetTenant(), Requests: d.GetRequestsPerSecond(), Tokens: d.GetTokensPerSecond()})
	}
	return tr, nil
}

func fromBudgets(b *clusterv1.TenantBudgets) (budgetSet, error) {
	bs := budgetSet{version: tenant.Version{Counter: b.GetCounter(), Origin: b.GetOrigin()}, full: b.GetFull()}
	if !bs.full {
		return bs, nil
	}
	bs.def = fromBudget(b.GetDefault())
	bs.tenants = make(map[string]tenant.Budget, len(b.GetTenants()))
	for _, t := range b.GetTenants() {
		if t.GetTenant() == "" || len(t.GetTenant()) > tenant.MaxNameLen {
			return budgetSet{}, fmt.Errorf("%w: a tenant budget needs a name of 1-%d characters", ErrBadRequest, tenant.MaxNameLen)
		}
		if _, dup := bs.tenants[t.GetTenant()]; dup {
			return budgetSet{}, fmt.Errorf("%w: tenant budget %q listed twice", ErrBadRequest, t.GetTenant())
		}
		bs.tenants[t.GetTenant()] = fromBudget(t)
	}
	return bs, nil
}

// fromBudget reads a budget; a negative value means no limit, as 0 does.
func fromBudget(b *clusterv1.TenantBudget) tenant.Budget {
	return tenant.Budget{TokensPerMinute: max(b.GetTokensPerMinute(), 0), RequestsPerMinute: max(b.GetRequestsPerMinute(), 0)}
}

func toBudgets(bs budgetSet) *clusterv1.TenantBudgets {
	out := &clusterv1.TenantBudgets{Counter: bs.version.Counter, Origin: bs.version.Origin, Full: bs.full}
	if !bs.full {
		return out
	}
	out.Default = &clusterv1.TenantBudget{TokensPerMinute: bs.def.TokensPerMinute, RequestsPerMinute: bs.def.RequestsPerMinute}
	for name, b := range bs.tenants {
		out.Tenants = append(out.Tenants, &clusterv1.TenantBudget{Tenant: name, TokensPerMinute: b.TokensPerMinute, RequestsPerMinute: b.RequestsPerMinute})
	}
	return out
}
