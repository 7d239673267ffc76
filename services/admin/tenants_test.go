package admin

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/internal/tenant"
)

func TestTenantBudgets(t *testing.T) {
	s, _ := newTestService(t, true)
	ctx := context.Background()
	if _, err := s.GetTenantBudgets(ctx, &adminv1.GetTenantBudgetsRequest{}); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("without a tenant source: %v, want InvalidArgument", err)
	}
	s.d.Budgets = tenant.NewBudgets(tenant.BudgetConfig{Default: tenant.Budget{RequestsPerMinute: 5}})
	resp, err := s.SetTenantBudgets(ctx, &adminv1.SetTenantBudgetsRequest{Budgets: &adminv1.TenantBudgets{
		Default: &adminv1.TenantBudget{TokensPerMinute: 100},
		Tenants: map[string]*adminv1.TenantBudget{"a": {RequestsPerMinute: 7}}}})
	if err != nil {
		t.Fatal(err)
	}
	if b := resp.GetBudgets(); b.GetDefault().GetTokensPerMinute() != 100 || b.GetDefault().GetRequestsPerMinute() != 0 ||
		b.GetTenants()["a"].GetRequestsPerMinute() != 7 {
		t.Fatalf("budgets now %v", b)
	}
	_, err = s.SetTenantBudgets(ctx, &adminv1.SetTenantBudgetsRequest{Budgets: &adminv1.TenantBudgets{
		Tenants: map[string]*adminv1.TenantBudget{"a": {TokensPerMinute: -1}}}})
	refusedParam(t, err, "budgets.tenants[a]")
	_, err = s.SetTenantBudgets(ctx, &adminv1.SetTenantBudgetsRequest{Budgets: &adminv1.TenantBudgets{
		Tenants: map[string]*adminv1.TenantBudget{"": {}}}})
	refusedParam(t, err, "budgets.tenants")
	if got, _ := s.GetTenantBudgets(ctx, &adminv1.GetTenantBudgetsRequest{}); got.GetBudgets().GetTenants()["a"].GetRequestsPerMinute() != 7 {
		t.Fatalf("a refused set changed the budgets: %v", got)
	}
}
