package admission

import (
	"slices"
	"testing"
	"time"
)

// Early rejection's prediction in share mode is the position share mode
// then grants, for tenants under their share: behind a flood served alone
// at one grant a second (3 waiting), each arrival of a scenario is predicted
// and then granted, releasing one at a time with nothing arriving after it
// (the scenario replayed up to each arrival). Ties of rate go to the tenant
// waiting longest, so with two quiet tenants their requests alternate.
func TestSharePredictionIsTheGrantOrder(t *testing.T) {
	for name, arrivals := range map[string][]string{
		"a quiet burst behind a flood": {"q", "q", "q", "q", "q"},
		"two quiet tenants":            {"a", "a", "b", "b", "a", "b", "b"},
		"a heavier quiet tenant":       {"h", "h", "a", "h", "h", "a", "h"},
	} {
		t.Run(name, func(t *testing.T) {
			for k := range arrivals {
				predicted, got := sharePredictionRun(t, arrivals[:k+1])
				if predicted != got {
					t.Errorf("arrival %d (%s) of %v: predicted position %d, granted at %d",
						k, arrivals[k], arrivals[:k+1], predicted, got)
				}
			}
		})
	}
}

// sharePredictionRun queues the flood, then arrivals; it returns the last
// arrival's predicted position and the position it was granted at.
func sharePredictionRun(t *testing.T, arrivals []string) (predicted, got int) {
	t.Helper()
	now := time.Unix(1000, 0)
	c, err := New(Settings{MaxInflightPerWorker: 1, QueueSize: 100, QueueTimeout: time.Hour,
		Tenants: TenantSettings{Fair: true, UnderShareFirst: true, Weights: map[string]int{"h": 2}}},
		Deps{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	sel := func(hasCap func(string) bool) (string, error) {
		if hasCap("W") {
			return "W", nil
		}
		return "", ErrNoCapacity
	}
	var waiting []*waiter
	enqueue := func(tenant string) *waiter {
		c.mu.Lock()
		defer c.mu.Unlock()
		w, _ := c.enqueueLocked(Request{Queue: "m", Select: sel, Tenant: tenant})
		waiting = append(waiting, w)
		return w
	}
	held, err := c.Acquire(t.Context(), Request{Queue: "m", Select: sel, Tenant: "flood"})
	if err != nil {
		t.Fatal(err)
	}
	// next releases the held slot and returns the waiter granted it.
	next := func() *waiter {
		held.Release(ReleaseCompleted)
		for i, w := range waiting {
			if w.state == granted {
				waiting = slices.Delete(waiting, i, i+1)
				held = w.slot
				return w
			}
		}
		t.Fatal("a release granted nobody")
		return nil
	}
	enqueue("flood") // one always waits: a backlog, as in a flood
	for range 21 {
		enqueue("flood")
		now = now.Add(time.Second)
		next()
	}
	enqueue("flood")
	enqueue("flood")
	for _, tenant := range arrivals[:len(arrivals)-1] {
		enqueue(tenant)
	}
	last := arrivals[len(arrivals)-1]
	c.mu.Lock()
	predicted = c.predictedPositionLocked(c.qs.byKey["m"], 0, last)
	c.mu.Unlock()
	x := enqueue(last)
	var order []string
	for got = 1; ; got++ {
		w := next()
		order = append(order, w.tenant)
		if w == x {
			break
		}
	}
	for len(waiting) > 0 {
		next()
	}
	held.Release(ReleaseCompleted)
	if predicted != got {
		t.Logf("grant order %v", order)
	}
	return predicted, got
}

// The rates kept for an emptied queue go when another queue empties 5
// windows after their last grant, so model keys do not accumulate.
func TestKeptSharesAreForgotten(t *testing.T) {
	now := time.Unix(1000, 0)
	c, err := New(Settings{MaxInflightPerWorker: 1, QueueSize: 100, QueueTimeout: time.Hour,
		Tenants: TenantSettings{Fair: true, UnderShareFirst: true}}, Deps{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	sel := func(hasCap func(string) bool) (string, error) {
		if hasCap("W") {
			return "W", nil
		}
		return "", ErrNoCapacity
	}
	// served queues one request of model behind the held slot and grants it.
	served := func(model string) {
		held, err := c.Acquire(t.Context(), Request{Queue: model, Select: sel, Tenant: "a"})
		if err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		w, _ := c.enqueueLocked(Request{Queue: model, Select: sel, Tenant: "a"})
		c.mu.Unlock()
		held.Release(ReleaseCompleted)
		if w.state != granted {
			t.Fatalf("%s: the queued request was not granted", model)
		}
		w.slot.Release(ReleaseCompleted)
	}
	served("m1")
	if c.qs.kept["m1"] == nil {
		t.Fatal("m1's rates not kept as its queue emptied")
	}
	now = now.Add(5*shareWindow - time.Millisecond)
	served("m2")
	if c.qs.kept["m1"] == nil || c.qs.kept["m2"] == nil {
		t.Fatalf("kept %v, want m1's (granted under 5 windows ago) and m2's", c.qs.kept)
	}
	now = now.Add(2 * time.Millisecond)
	served("m2")
	if _, ok := c.qs.kept["m1"]; ok || c.qs.kept["m2"] == nil {
		t.Fatalf("kept %v, want m2's only: m1's last grant is 5 windows old", c.qs.kept)
	}
}
