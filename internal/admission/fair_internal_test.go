package admission

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// The round robin's predicted position, counted from the tenants with 2
// waiters or more, is the sum over every tenant of the band as the round
// robin serves it: the newcomer's tenant's n waiters ahead, and up to
// turns*w_o of each other tenant o, turns being n/w + 1.
func TestPropertyFairPositionCountsEveryTenant(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		c, err := New(Settings{MaxInflightPerWorker: 1, QueueSize: 1000, QueueTimeout: time.Hour,
			Tenants: TenantSettings{Fair: true, Weights: map[string]int{"t0": 2, "t1": 3}}}, Deps{})
		if err != nil {
			rt.Fatal(err)
		}
		sel := func(hasCap func(string) bool) (string, error) {
			if hasCap("W") {
				return "W", nil
			}
			return "", ErrNoCapacity
		}
		held, err := c.Acquire(t.Context(), Request{Queue: "m", Select: sel})
		if err != nil {
			rt.Fatal(err)
		}
		var waiting []*waiter
		release := func() { // the head is granted the slot (the slot stays held while nobody waits)
			if len(waiting) == 0 {
				return
			}
			held.Release(ReleaseCompleted)
			for j, w := range waiting {
				if w.state == granted {
					held, waiting = w.slot, append(waiting[:j], waiting[j+1:]...)
					return
				}
			}
			rt.Fatal("a release granted nobody")
		}
		for i, op := range rapid.SliceOfN(rapid.IntRange(-1, 3), 20, 80).Draw(rt, "ops") {
			if op < 0 {
				release()
				continue
			}
			c.mu.Lock()
			w, _ := c.enqueueLocked(Request{Queue: "m", Select: sel, Tenant: fmt.Sprint("t", op)})
			waiting = append(waiting, w)
			q := c.qs.byKey["m"]
			fb := q.order.fair[0].(*roundRobin)
			for k := range 4 {
				name := fmt.Sprint("t", k)
				tq := fb.tenants[name]
				if tq == nil {
					continue // a new tenant: predicted from the fresh tenants
				}
				ts := &c.settings.Tenants
				turns := tq.waiters.Len()/ts.weight(name) + 1
				want := 1 + tq.waiters.Len()
				for o, oq := range fb.tenants {
					if o != name {
						want += min(oq.waiters.Len(), turns*ts.weight(o))
					}
				}
				if got := c.predictedPositionLocked(q, 0, name); got != want {
					c.mu.Unlock()
					rt.Fatalf("op %d: %s's newcomer predicted at %d, want %d", i, name, got, want)
				}
			}
			c.mu.Unlock()
		}
		for len(waiting) > 0 {
			release()
		}
		held.Release(ReleaseCompleted)
	})
}
