package cluster

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicegw/sluice/internal/tenant"
)

// TestTenantBudgetSharesFollowMembers: three replicas split each tenant budget by the members of their
// grants (Deps.OnMembers -> Budgets.SetReplicas), so the fleet-wide token rate of a tenant whose traffic
// is spread over them holds within 5 % of its budget; when one replica dies the other two re-share and
// the rate holds again.
func TestTenantBudgetSharesFollowMembers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const tpm = 120000
		var mu sync.Mutex
		members := map[string]int{}
		budgets := map[string]*tenant.Budgets{}
		// A long period: the test runs minutes of fake time, and only membership matters here.
		cfg := Config{Mode: ModeStatic, Period: time.Second, Lease: 4 * time.Second}
		f := newFleet(t, 3, cfg)
		for _, id := range f.ids {
			budgets[id] = tenant.NewBudgets(tenant.BudgetConfig{Default: tenant.Budget{TokensPerMinute: tpm}})
		}
		f.onMembers = func(id string) func(int) {
			return func(n int) {
				mu.Lock()
				members[id] = n
				mu.Unlock()
				budgets[id].SetReplicas(n)
			}
		}
		defer f.stopAll()
		for i := range 3 {
			f.start(i, 8, w1)
		}
		waitMembers := func(live []string, want int) {
			t.Helper()
			for range 100 {
				mu.Lock()
				ok := true
				for _, id := range live {
					ok = ok && members[id] == want
				}
				mu.Unlock()
				if ok {
					return
				}
				step(cfg.Period)
			}
			t.Fatalf("members %v, want %d on each of %v", members, want, live)
		}
		// run spends the live replicas' buckets, then offers each a 1000-token request every 200 ms (7.5x
		// the budget) for a minute and returns the fleet's tokens granted.
		run := func(live []string) float64 {
			for _, id := range live {
				for {
					if _, _, err := budgets[id].Reserve("a", 1000); err != nil {
						break
					}
				}
			}
			var granted int64
			for range 300 {
				step(200 * time.Millisecond)
				for _, id := range live {
					if res, _, err := budgets[id].Reserve("a", 1000); err == nil {
						granted += 1000
						res.Settle(1000)
					}
				}
			}
			return float64(granted)
		}
		waitMembers(f.ids, 3)
		if got := run(f.ids); got < 0.95*tpm || got > 1.05*tpm {
			t.Fatalf("3 replicas granted %.0f tokens per minute, want %d ± 5%%", got, tpm)
		}
		f.kill(2)
		live := f.ids[:2]
		waitMembers(live, 2)
		if got := run(live); got < 0.95*tpm || got > 1.05*tpm {
			t.Fatalf("2 replicas after one died granted %.0f tokens per minute, want %d ± 5%%", got, tpm)
		}
	})
}
