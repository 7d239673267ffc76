package admin

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/internal/cluster"
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
	// Without cluster coordination the budgets are this gateway's alone, enforced whole, and the live
	// change is version 1 over the flags' 0.
	if st := resp.GetState(); st.GetVersion() != 1 || st.GetFleet() || st.GetDefaultShare() != 1 || len(st.GetShares()) != 0 {
		t.Fatalf("state after one live change: %v", st)
	}
	_, err = s.SetTenantBudgets(ctx, &adminv1.SetTenantBudgetsRequest{Budgets: &adminv1.TenantBudgets{
		Tenants: map[string]*adminv1.TenantBudget{"a": {TokensPerMinute: -1}}}})
	refusedParam(t, err, "budgets.tenants[a]")
	_, err = s.SetTenantBudgets(ctx, &adminv1.SetTenantBudgetsRequest{Budgets: &adminv1.TenantBudgets{
		Tenants: map[string]*adminv1.TenantBudget{"": {}}}})
	refusedParam(t, err, "budgets.tenants")
	got, _ := s.GetTenantBudgets(ctx, &adminv1.GetTenantBudgetsRequest{})
	if got.GetBudgets().GetTenants()["a"].GetRequestsPerMinute() != 7 || got.GetState().GetVersion() != 1 {
		t.Fatalf("a refused set changed the budgets: %v", got)
	}
	// In a fleet the state says so and names this replica's shares.
	s.d.Cluster = func() *cluster.Status { return &cluster.Status{} }
	s.d.Budgets.SetShares(0.5, map[string]float64{"a": 0.9})
	got, _ = s.GetTenantBudgets(ctx, &adminv1.GetTenantBudgetsRequest{})
	if st := got.GetState(); !st.GetFleet() || st.GetDefaultShare() != 0.5 || st.GetShares()["a"] != 0.9 {
		t.Fatalf("state in a fleet: %v", st)
	}
}
