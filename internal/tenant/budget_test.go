package tenant_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/tenant"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time      { return c.t }
func (c *fakeClock) add(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *fakeClock               { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }
func denied(err error) (*tenant.Denied, bool) {
	var d *tenant.Denied
	ok := errors.As(err, &d)
	return d, ok
}

func TestBudgetRequests(t *testing.T) {
	clk := newClock()
	b := tenant.NewBudgets(tenant.BudgetConfig{Default: tenant.Budget{RequestsPerMinute: 60}, Now: clk.now})
	for i := range 60 {
		if _, q, err := b.Reserve("a", 0); err != nil || q.RemainingRequests != int64(59-i) {
			t.Fatalf("request %d: %v, remaining %d", i, err, q.RemainingRequests)
		}
	}
	_, _, err := b.Reserve("a", 0)
	d, ok := denied(err)
	if !ok || !errors.Is(err, tenant.ErrRateLimited) || d.Tokens || d.RetryAfter != time.Second {
		t.Fatalf("61st request: %v (%+v), want denied for 1s by the request budget", err, d)
	}
	if _, _, err := b.Reserve("b", 0); err != nil {
		t.Fatalf("another tenant: %v", err)
	}
	clk.add(time.Second)
	if _, _, err := b.Reserve("a", 0); err != nil {
		t.Fatalf("after the refill: %v", err)
	}
}

func TestBudgetTokensSettle(t *testing.T) {
	clk := newClock()
	b := tenant.NewBudgets(tenant.BudgetConfig{Tenants: map[string]tenant.Budget{"a": {TokensPerMinute: 1000}}, Now: clk.now})
	r, _, err := b.Reserve("a", 600)
	if err != nil {
		t.Fatal(err)
	}
	_, q, err := b.Reserve("a", 600)
	d, ok := denied(err)
	if !ok || !d.Tokens || d.RetryAfter != 12*time.Second || q.RemainingTokens != 400 {
		t.Fatalf("over the token budget: %v (%+v), want a 12s token denial with 400 left", err, d)
	}
	r.Settle(100) // it used far less than reserved: the rest comes back
	r.Settle(0)   // only the first settle counts
	if _, q, err := b.Reserve("a", 600); err != nil || q.RemainingTokens != 300 {
		t.Fatalf("after settling: %v, remaining %d, want 300", err, q.RemainingTokens)
	}
	if _, _, err := b.Reserve("untracked", 1<<40); err != nil {
		t.Fatalf("a tenant without a budget: %v", err)
	}
}

// A request larger than the whole budget waits for a full bucket, then passes.
func TestBudgetLargeRequest(t *testing.T) {
	clk := newClock()
	b := tenant.NewBudgets(tenant.BudgetConfig{Default: tenant.Budget{TokensPerMinute: 1000}, Now: clk.now})
	if _, _, err := b.Reserve("a", 5000); err != nil {
		t.Fatalf("large request on a full bucket: %v", err)
	}
	_, _, err := b.Reserve("a", 10)
	if d, ok := denied(err); !ok || d.RetryAfter <= 4*time.Minute {
		t.Fatalf("after a 5x request: %v, want a denial of over 4 minutes", err)
	}
}

// Over a steady minute the tokens granted stay within 5 % of the budget, whatever the demand.
func TestBudgetHoldsOverAMinute(t *testing.T) {
	clk := newClock()
	const tpm = 6000
	b := tenant.NewBudgets(tenant.BudgetConfig{Default: tenant.Budget{TokensPerMinute: tpm, RequestsPerMinute: 100000}, Now: clk.now})
	var granted int64
	for step := range 24000 { // 4 minutes of a request every 10 ms, 5x the budget
		if step == 12000 {
			granted = 0 // measure the last two minutes: the first holds the initial burst
		}
		if r, _, err := b.Reserve("a", 25); err == nil {
			granted += 25
			r.Settle(25)
		}
		clk.add(10 * time.Millisecond)
	}
	if perMinute := float64(granted) / 2; perMinute < 0.95*tpm || perMinute > 1.05*tpm {
		t.Fatalf("granted %.0f tokens per minute, want %d ± 5%%", perMinute, tpm)
	}
}

func TestQuotaHeader(t *testing.T) {
	q := tenant.Quota{Budget: tenant.Budget{TokensPerMinute: 1000, RequestsPerMinute: 10},
		RemainingTokens: 400, RemainingRequests: 3, ResetTokens: 36 * time.Second, ResetRequests: 1500 * time.Microsecond}
	h := q.Header()
	for k, want := range map[string]string{
		"x-ratelimit-limit-tokens": "1000", "x-ratelimit-remaining-tokens": "400", "x-ratelimit-reset-tokens": "36s",
		"x-ratelimit-limit-requests": "10", "x-ratelimit-remaining-requests": "3", "x-ratelimit-reset-requests": "2ms",
	} {
		if got := h.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if h := (tenant.Quota{Budget: tenant.Budget{RequestsPerMinute: 1}}).Header(); h.Get("x-ratelimit-limit-tokens") != "" {
		t.Errorf("a kind without a limit has headers: %v", h)
	}
}

// A budget raised live helps at once; one lowered caps what is left.
func TestBudgetSetLive(t *testing.T) {
	clk := newClock()
	b := tenant.NewBudgets(tenant.BudgetConfig{Default: tenant.Budget{RequestsPerMinute: 2}, Now: clk.now})
	for range 2 {
		if _, _, err := b.Reserve("a", 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := b.Reserve("a", 0); err == nil {
		t.Fatal("third request within a budget of 2")
	}
	b.Set(tenant.Budget{RequestsPerMinute: 10}, nil)
	if _, q, err := b.Reserve("a", 0); err != nil || q.RemainingRequests != 7 {
		t.Fatalf("after raising to 10: %v, remaining %d, want 7", err, q.RemainingRequests)
	}
	b.Set(tenant.Budget{RequestsPerMinute: 3}, map[string]tenant.Budget{"b": {TokensPerMinute: 5}})
	if _, q, err := b.Reserve("a", 0); err != nil || q.RemainingRequests != 2 {
		t.Fatalf("after lowering to 3: %v, remaining %d, want 2", err, q.RemainingRequests)
	}
	if def, per := b.Get(); def.RequestsPerMinute != 3 || per["b"].TokensPerMinute != 5 {
		t.Fatalf("Get = %+v, %+v", def, per)
	}
}

// Three replicas enforcing their shares grant a fleet-wide rate within 5 % of the budget, and so do
// the two left when one goes and they re-share; a share below one request a minute still serves.
func TestBudgetSharesAcrossReplicas(t *testing.T) {
	clk := newClock()
	const tpm, rpm = 6000, 1000
	fleet := make([]*tenant.Budgets, 3)
	for i := range fleet {
		fleet[i] = tenant.NewBudgets(tenant.BudgetConfig{Default: tenant.Budget{TokensPerMinute: tpm, RequestsPerMinute: rpm}, Now: clk.now})
		fleet[i].SetReplicas(len(fleet))
	}
	// run offers each live replica a 25-token request every 10 ms (at least 5x the token budget)
	// for two minutes and returns the tokens granted per minute over the second.
	run := func(live []*tenant.Budgets) float64 {
		var granted int64
		for step := range 12000 {
			if step == 6000 {
				granted = 0 // the first minute holds the buckets' initial burst
			}
			for _, r := range live {
				if res, _, err := r.Reserve("a", 25); err == nil {
					granted += 25
					res.Settle(25)
				}
			}
			clk.add(10 * time.Millisecond)
		}
		return float64(granted)
	}
	if got := run(fleet); got < 0.95*tpm || got > 1.05*tpm {
		t.Fatalf("3 replicas granted %.0f tokens per minute, want %d ± 5%%", got, tpm)
	}
	fleet = fleet[:2]
	for _, r := range fleet {
		r.SetReplicas(len(fleet))
	}
	if got := run(fleet); got < 0.95*tpm || got > 1.05*tpm {
		t.Fatalf("2 replicas after one left granted %.0f tokens per minute, want %d ± 5%%", got, tpm)
	}

	// 2 requests a minute over 3 replicas: each replica's share is 2/3, one request on a full bucket.
	small := tenant.NewBudgets(tenant.BudgetConfig{Default: tenant.Budget{RequestsPerMinute: 2}, Now: clk.now})
	small.SetReplicas(3)
	if _, q, err := small.Reserve("a", 0); err != nil || q.RequestsPerMinute != 2 {
		t.Fatalf("a share below one request: %v, limit %d (want the whole budget named)", err, q.RequestsPerMinute)
	}
	_, _, err := small.Reserve("a", 0)
	if d, ok := denied(err); !ok || d.RetryAfter != 90*time.Second {
		t.Fatalf("second request on a 2/3-per-minute share: %v, want a 90 s denial", err)
	}
}
