package admission_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
)

func TestTokenBudgetBoundsTokensInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newFeatureMetrics(1000)
		p := newPlacement(map[string][]string{"m": {"A"}})
		c := mustNew(t, tokenBudget(1000, 10), admission.Deps{Metrics: m})
		if !c.Settings().Enabled() {
			t.Fatal("a token budget alone must turn admission on")
		}
		r1 := mustAdmit(t, "r1", goAcquireNow(c, tok(p.req("m", "r1", ""), 400)))
		r2 := mustAdmit(t, "r2", goAcquireNow(c, tok(p.req("m", "r2", ""), 600)))
		w := goAcquire(bg, c, tok(p.req("m", "w", ""), 1))
		synctest.Wait()
		mustWait(t, "w (1000 of 1000 tokens held)", w)
		if got := c.Status().InflightTokens["A"]; got != 1000 {
			t.Errorf("tokens in flight = %d, want 1000", got)
		}
		r1.Release(admission.ReleaseCompleted)
		synctest.Wait()
		s := mustAdmit(t, "w", w)
		if got := c.Status().InflightTokens["A"]; got != 601 {
			t.Errorf("tokens in flight = %d, want 601", got)
		}
		s.Release(admission.ReleaseCompleted)
		r2.Release(admission.ReleaseCompleted)
		if got := c.Status(); got.InflightTokens["A"] != 0 || got.Inflight["A"] != 0 {
			t.Errorf("at the end: %d tokens, %d slots, want 0 and 0", got.InflightTokens["A"], got.Inflight["A"])
		}
		if v := m.fsnap().violations; len(v) > 0 {
			t.Error(v)
		}
	})
}

// goAcquireNow runs Acquire in the bubble and lets it settle.
func goAcquireNow(c *admission.Controller, r admission.Request) <-chan result {
	ch := goAcquire(bg, c, r)
	synctest.Wait()
	return ch
}

func TestOversizeRequestRunsAloneOnIdleWorkerAndIsNotOvertaken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newFeatureMetrics(1000)
		p := newPlacement(map[string][]string{"m": {"A"}})
		c := mustNew(t, tokenBudget(1000, 10), admission.Deps{Metrics: m})

		small := mustAdmit(t, "small", goAcquireNow(c, tok(p.req("m", "small", ""), 100)))
		big := goAcquireNow(c, tok(p.req("m", "big", ""), 5000))
		mustWait(t, "big (worker busy)", big)
		// Room for a newcomer of 100 tokens, but it must not overtake the head.
		late := goAcquireNow(c, tok(p.req("m", "late", ""), 100))
		mustWait(t, "late", late)
		if calls := p.callsOf("late"); calls != 1 {
			t.Errorf("late selected %d times, want 1 (the availability probe)", calls)
		}
		small.Release(admission.ReleaseCompleted)
		synctest.Wait()
		b := mustAdmit(t, "big (worker idle)", big)
		mustWait(t, "late (behind the oversize request)", late)
		if got := c.Status().InflightTokens["A"]; got != 5000 {
			t.Errorf("tokens in flight = %d, want 5000 (the oversize request alone)", got)
		}
		b.Release(admission.ReleaseCompleted)
		synctest.Wait()
		mustAdmit(t, "late", late).Release(admission.ReleaseCompleted)
		if v := m.fsnap().violations; len(v) > 0 {
			t.Error(v)
		}
	})
}

func TestTokenBudgetWithRequestLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPlacement(map[string][]string{"m": {"A"}})
		s := tokenBudget(1000, 10)
		s.MaxInflightPerWorker = 2
		c := mustNew(t, s, admission.Deps{})
		a := mustAdmit(t, "a", goAcquireNow(c, tok(p.req("m", "a", ""), 10)))
		b := mustAdmit(t, "b", goAcquireNow(c, tok(p.req("m", "b", ""), 10)))
		w := goAcquireNow(c, tok(p.req("m", "w", ""), 10))
		mustWait(t, "w (request limit 2 reached, tokens to spare)", w)
		a.Release(admission.ReleaseCompleted)
		synctest.Wait()
		mustAdmit(t, "w", w).Release(admission.ReleaseCompleted)
		b.Release(admission.ReleaseCompleted)
	})
}

func TestCachedPrefixIsNotCharged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPlacement(map[string][]string{"m": {"A", "B"}})
		c := mustNew(t, tokenBudget(1000, 10), admission.Deps{})
		r := tok(p.req("m", "r", ""), 800)
		var asked []string
		r.CachedTokens = func(w string) int64 {
			asked = append(asked, w)
			if w == "A" {
				return 600
			}
			return 0
		}
		s := mustAdmit(t, "r", goAcquireNow(c, r))
		if s.Worker() != "A" {
			t.Fatalf("on %s, want A", s.Worker())
		}
		if got := c.Status().InflightTokens["A"]; got != 200 {
			t.Errorf("tokens charged on A = %d, want 800 - 600 cached", got)
		}
		// A hook that claims more than the request never makes it free.
		r2 := tok(p.req("m", "r2", "B"), 10)
		r2.CachedTokens = func(string) int64 { return 1 << 40 }
		s2 := mustAdmit(t, "r2", goAcquireNow(c, r2))
		if got := c.Status().InflightTokens["B"]; got != 1 {
			t.Errorf("tokens charged on B = %d, want the floor of 1", got)
		}
		// A panicking hook counts as nothing cached.
		r3 := tok(p.req("m", "r3", "B"), 10)
		r3.CachedTokens = func(string) int64 { panic("hook bug") }
		s3 := mustAdmit(t, "r3", goAcquireNow(c, r3))
		if got := c.Status().InflightTokens["B"]; got != 11 {
			t.Errorf("tokens on B = %d, want 11", got)
		}
		for _, x := range []*admission.Slot{s, s2, s3} {
			x.Release(admission.ReleaseCompleted)
		}
		if len(asked) == 0 {
			t.Error("the hook was never asked")
		}
		// Without a budget the hook is not consulted (it costs a prefix match).
		asked = nil
		c2 := mustNew(t, on(4, 10), admission.Deps{})
		r.CachedTokens = func(w string) int64 { asked = append(asked, w); return 0 }
		mustAdmit(t, "r", goAcquireNow(c2, r)).Release(admission.ReleaseCompleted)
		if len(asked) != 0 {
			t.Errorf("hook asked %v without a token budget", asked)
		}
	})
}

// A stateful policy records the prompt for the worker it picks while it
// selects; the charge is the one the capacity check saw, not what the hook
// says afterwards.
func TestChargeIsFixedAtTheCapacityCheck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := mustNew(t, tokenBudget(1000, 10), admission.Deps{})
		cached := map[string]int64{}
		r := admission.Request{Queue: "m", Tokens: 800, CachedTokens: func(w string) int64 { return cached[w] },
			Select: func(hasCap func(string) bool) (string, error) {
				if !hasCap("A") {
					return "", admission.ErrNoCapacity
				}
				cached["A"] = 800 // the policy inserts the prompt for its pick
				return "A", nil
			}}
		s := mustAdmit(t, "r", goAcquireNow(c, r))
		if got := c.Status().InflightTokens["A"]; got != 800 {
			t.Errorf("charged %d, want the 800 tokens seen at the capacity check", got)
		}
		s.Release(admission.ReleaseCompleted)
	})
}

func TestTokenBudgetLiveUpdate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPlacement(map[string][]string{"m": {"A"}})
		c := mustNew(t, tokenBudget(500, 10), admission.Deps{})
		a := mustAdmit(t, "a", goAcquireNow(c, tok(p.req("m", "a", ""), 400)))
		w := goAcquireNow(c, tok(p.req("m", "w", ""), 400))
		mustWait(t, "w", w)
		if err := c.Update(tokenBudget(1000, 10)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		b := mustAdmit(t, "w after raising the budget", w)
		// Turning the budget off (and no request limit) turns admission off.
		if err := c.Update(admission.Settings{QueueSize: 10, QueueTimeout: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if c.Settings().Enabled() {
			t.Error("admission still on without any limit")
		}
		a.Release(admission.ReleaseCompleted)
		b.Release(admission.ReleaseCompleted)
		if got := c.Status().InflightTokens["A"]; got != 0 {
			t.Errorf("tokens at the end = %d", got)
		}
	})
}

func TestTokensWithoutEstimateCountOne(t *testing.T) {
	p := newPlacement(map[string][]string{"m": {"A"}})
	c := mustNew(t, tokenBudget(2, 0), admission.Deps{})
	a, err := c.Acquire(bg, p.req("m", "a", ""))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Acquire(bg, p.req("m", "b", ""))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(bg, p.req("m", "c", "")); !errors.Is(err, admission.ErrQueueFull) {
		t.Errorf("third request without estimate: %v, want queue full (2 tokens held)", err)
	}
	a.Release(admission.ReleaseCompleted)
	b.Release(admission.ReleaseCompleted)
}
