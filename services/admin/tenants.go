package admin

import (
	"context"
	"math"
	"net/http"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/tenant"
)

// GetTenantBudgets returns the tenants' budgets; InvalidArgument (400) when the gateway has no tenant
// source (there are no tenants to budget).
func (s *Service) GetTenantBudgets(context.Context, *adminv1.GetTenantBudgetsRequest) (*adminv1.GetTenantBudgetsResponse, error) {
	if s.d.Budgets == nil {
		return nil, errNoTenants()
	}
	return &adminv1.GetTenantBudgetsResponse{Budgets: budgetsToProto(s.d.Budgets), State: s.budgetsState()}, nil
}

// SetTenantBudgets replaces the tenants' budgets: applied here at once; with cluster coordination on,
// every replica enforces them within about two exchange periods (internal/cluster, "Tenant budgets").
func (s *Service) SetTenantBudgets(_ context.Context, req *adminv1.SetTenantBudgetsRequest) (*adminv1.SetTenantBudgetsResponse, error) {
	if s.d.Budgets == nil {
		return nil, errNoTenants()
	}
	in := req.GetBudgets()
	def, err := budgetFromProto("budgets.default", in.GetDefault())
	if err != nil {
		return nil, err
	}
	per := make(map[string]tenant.Budget, len(in.GetTenants()))
	for name, b := range in.GetTenants() {
		if name == "" || len(name) > tenant.MaxNameLen {
			return nil, invalid("budgets.tenants", "budgets.tenants: a tenant name must be 1-%d characters, got %q", tenant.MaxNameLen, name)
		}
		if per[name], err = budgetFromProto("budgets.tenants["+name+"]", b); err != nil {
			return nil, err
		}
	}
	s.d.Budgets.Set(def, per)
	return &adminv1.SetTenantBudgetsResponse{Budgets: budgetsToProto(s.d.Budgets), State: s.budgetsState()}, nil
}

// budgetsState is how the budgets stand here: their version, whether cluster coordination makes them
// the fleet's, and the shares this gateway enforces.
func (s *Service) budgetsState() *adminv1.TenantBudgetsState {
	v := s.d.Budgets.Version()
	def, per := s.d.Budgets.Shares()
	return &adminv1.TenantBudgetsState{Version: uint32(min(v.Counter, math.MaxUint32)), VersionOrigin: v.Origin, Fleet: s.d.Cluster != nil,
		DefaultShare: def, Shares: per}
}

func errNoTenants() error {
	return apierror.New(http.StatusBadRequest, apierror.CodeInvalidRequest,
		"tenant budgets need a tenant source (--tenant-api-key-ids, --tenant-jwt-claim or --tenant-header)", nil).Connect()
}

func budgetFromProto(param string, b *adminv1.TenantBudget) (tenant.Budget, error) {
	if b.GetTokensPerMinute() < 0 || b.GetRequestsPerMinute() < 0 {
		return tenant.Budget{}, invalid(param, "%s: budgets must be >= 0 (0 = no limit), got %d tokens and %d requests per minute",
			param, b.GetTokensPerMinute(), b.GetRequestsPerMinute())
	}
	return tenant.Budget{TokensPerMinute: int64(b.GetTokensPerMinute()), RequestsPerMinute: int64(b.GetRequestsPerMinute())}, nil
}

func budgetsToProto(b *tenant.Budgets) *adminv1.TenantBudgets {
	def, per := b.Get()
	out := &adminv1.TenantBudgets{Default: budgetToProto(def), Tenants: make(map[string]*adminv1.TenantBudget, len(per))}
	for name, v := range per {
		out.Tenants[name] = budgetToProto(v)
	}
	return out
}

func budgetToProto(b tenant.Budget) *adminv1.TenantBudget {
	return &adminv1.TenantBudget{TokensPerMinute: clamp32(b.TokensPerMinute), RequestsPerMinute: clamp32(b.RequestsPerMinute)}
}
