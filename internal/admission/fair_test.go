package admission_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
)

// tenantReq is p.req for queue "m" with a tenant.
func tenantReq(p *placement, id, tenant string) admission.Request {
	r := p.req("m", id, "")
	r.Tenant = tenant
	return r
}

// grantOrder holds W's one slot, queues the (id, tenant) pairs in order,
// then releases one slot at a time and returns the ids in the order they
// were admitted (the holder "hold" excluded).
func grantOrder(t *testing.T, s admission.Settings, queued [][2]string) []string {
	t.Helper()
	p := newPlacement(map[string][]string{"m": {"W"}})
	c := mustNew(t, s, admission.Deps{})
	hold, err := c.Acquire(bg, tenantReq(p, "hold", "x"))
	if err != nil {
		t.Fatal(err)
	}
	chs := make([]<-chan result, len(queued))
	for i, q := range queued {
		chs[i] = goAcquire(bg, c, tenantReq(p, q[0], q[1]))
		synctest.Wait()
	}
	hold.Release(admission.ReleaseCompleted)
	releaseInTurn(t, chs)
	return slices.DeleteFunc(p.pickIDs(), func(id string) bool { return id == "hold" })
}

// releaseInTurn waits for each grant among chs (one slot: one at a time)
// and releases it, which admits the next; every caller must be admitted.
func releaseInTurn(t *testing.T, chs []<-chan result) {
	t.Helper()
	chs = slices.Clone(chs)
	for range chs {
		synctest.Wait()
		var granted *admission.Slot
		for i, ch := range chs {
			if ch == nil {
				continue
			}
			if r, ok := done(ch); ok {
				if r.err != nil {
					t.Fatalf("caller %d: %v", i, r.err)
				}
				granted, chs[i] = r.slot, nil
			}
		}
		if granted == nil {
			t.Fatal("a release admitted nobody")
		}
		granted.Release(admission.ReleaseCompleted)
	}
}

func fair(weights map[string]int) admission.Settings {
	s := on(1, 100)
	s.Tenants = admission.TenantSettings{Fair: true, Weights: weights}
	return s
}

var floodThenQuiet = [][2]string{
	{"a1", "a"}, {"a2", "a"}, {"a3", "a"}, {"a4", "a"}, {"a5", "a"},
	{"b1", "b"}, {"b2", "b"}, {"c1", "c"},
}

// A flood queued first delays a quiet tenant by one turn, not by its size.
func TestTenantFairRoundRobin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		got := grantOrder(t, fair(nil), floodThenQuiet)
		want := []string{"a1", "b1", "c1", "a2", "b2", "a3", "a4", "a5"}
		if !slices.Equal(got, want) {
			t.Fatalf("grant order %v, want %v", got, want)
		}
	})
}

// A tenant of weight 2 gets two grants per turn.
func TestTenantFairWeights(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		got := grantOrder(t, fair(map[string]int{"a": 2}), floodThenQuiet)
		want := []string{"a1", "a2", "b1", "c1", "a3", "a4", "b2", "a5"}
		if !slices.Equal(got, want) {
			t.Fatalf("grant order %v, want %v", got, want)
		}
	})
}

// Without fairness (a tenant bound alone, or no tenancy) the queue stays one
// FIFO.
func TestTenantFairOffIsFIFO(t *testing.T) {
	for _, ts := range []admission.TenantSettings{{}, {MaxQueued: 10}, {Weights: map[string]int{"b": 5}}} {
		synctest.Test(t, func(t *testing.T) {
			s := on(1, 100)
			s.Tenants = ts
			got := grantOrder(t, s, floodThenQuiet)
			want := []string{"a1", "a2", "a3", "a4", "a5", "b1", "b2", "c1"}
			if !slices.Equal(got, want) {
				t.Fatalf("%+v: grant order %v, want %v", ts, got, want)
			}
		})
	}
}

// A tenant at its queue bound gets tenant_queue_full; other tenants still
// queue, and its own room comes back as its waiters leave.
func TestTenantMaxQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPlacement(map[string][]string{"m": {"W"}})
		s := on(1, 100)
		s.Tenants = admission.TenantSettings{Fair: true, MaxQueued: 2}
		m := newFakeMetrics()
		c := mustNew(t, s, admission.Deps{Metrics: m})
		hold, err := c.Acquire(bg, tenantReq(p, "hold", "a"))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(bg)
		a1 := goAcquire(ctx, c, tenantReq(p, "a1", "a"))
		a2 := goAcquire(bg, c, tenantReq(p, "a2", "a"))
		synctest.Wait()
		_, err = c.Acquire(bg, tenantReq(p, "a3", "a"))
		if !errors.Is(err, admission.ErrTenantQueueFull) || !errors.Is(err, admission.ErrRejected) ||
			admission.OutcomeOf(err) != admission.TenantQueueFull {
			t.Fatalf("a3: err = %v, want a tenant_queue_full rejection", err)
		}
		b1 := goAcquire(bg, c, tenantReq(p, "b1", "b"))
		synctest.Wait()
		mustWait(t, "b1", b1)
		if got := c.Status().QueuedByTenant; !maps.Equal(got, map[string]int{"a": 2, "b": 1}) {
			t.Fatalf("queued by tenant %v, want a:2 b:1", got)
		}
		cancel()
		synctest.Wait()
		if r := mustDone(t, "a1", a1); admission.OutcomeOf(r.err) != admission.Cancelled {
			t.Fatalf("a1: err = %v, want cancelled", r.err)
		}
		a4 := goAcquire(bg, c, tenantReq(p, "a4", "a")) // room again
		synctest.Wait()
		mustWait(t, "a4", a4)
		if got := m.snapshot().rejections[admission.TenantQueueFull]; got != 1 {
			t.Fatalf("tenant_queue_full rejections = %d, want 1", got)
		}
		hold.Release(admission.ReleaseCompleted)
		releaseInTurn(t, []<-chan result{a2, b1, a4})
		if got, want := p.pickIDs(), []string{"hold", "a2", "b1", "a4"}; !slices.Equal(got, want) {
			t.Fatalf("grant order %v, want %v", got, want)
		}
		if st := c.Status(); st.QueuedTotal != 0 {
			t.Fatalf("queued %d at the end", st.QueuedTotal)
		}
	})
}

// A head that leaves without a grant (cancelled) does not spend its
// tenant's turn: the tenant's next waiter is the head.
func TestTenantFairCancelledHeadKeepsTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPlacement(map[string][]string{"m": {"W"}})
		c := mustNew(t, fair(nil), admission.Deps{})
		hold, err := c.Acquire(bg, tenantReq(p, "hold", "x"))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(bg)
		a1 := goAcquire(ctx, c, tenantReq(p, "a1", "a"))
		synctest.Wait()
		a2 := goAcquire(bg, c, tenantReq(p, "a2", "a"))
		synctest.Wait()
		b1 := goAcquire(bg, c, tenantReq(p, "b1", "b"))
		synctest.Wait()
		cancel()
		synctest.Wait()
		mustDone(t, "a1", a1)
		hold.Release(admission.ReleaseCompleted)
		synctest.Wait()
		mustAdmit(t, "a2", a2).Release(admission.ReleaseCompleted)
		synctest.Wait()
		mustAdmit(t, "b1", b1).Release(admission.ReleaseCompleted)
	})
}

// Turning fairness on live reorders the waiters already queued.
func TestTenantFairTurnedOnLive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPlacement(map[string][]string{"m": {"W"}})
		c := mustNew(t, on(1, 100), admission.Deps{})
		hold, err := c.Acquire(bg, tenantReq(p, "hold", "x"))
		if err != nil {
			t.Fatal(err)
		}
		var chs []<-chan result
		for _, q := range floodThenQuiet {
			chs = append(chs, goAcquire(bg, c, tenantReq(p, q[0], q[1])))
			synctest.Wait()
		}
		if err := c.Update(fair(nil)); err != nil {
			t.Fatal(err)
		}
		hold.Release(admission.ReleaseCompleted)
		releaseInTurn(t, chs)
		got := slices.DeleteFunc(p.pickIDs(), func(id string) bool { return id == "hold" })
		if want := []string{"a1", "b1", "c1", "a2", "b2", "a3", "a4", "a5"}; !slices.Equal(got, want) {
			t.Fatalf("grant order %v, want %v", got, want)
		}
	})
}

func TestTenantSettingsValidate(t *testing.T) {
	for _, ts := range []admission.TenantSettings{
		{MaxQueued: -1},
		{Fair: true, Weights: map[string]int{"a": 0}},
		{Fair: true, Weights: map[string]int{"": 2}},
		{Fair: true, Weights: map[string]int{"a": 1001}},
		{Fair: true, Burst: -1},
		{Fair: true, Burst: 1001},
	} {
		s := on(1, 10)
		s.Tenants = ts
		if err := s.Validate(); err == nil {
			t.Errorf("%+v: valid, want an error", ts)
		}
	}
}

// With fairness, early rejection predicts a quiet tenant's wait from its round-robin turn, not
// from the flood queued ahead of it: the flood's newcomers are rejected, the quiet tenant's queue.
func TestTenantFairEarlyRejection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPlacement(map[string][]string{"m": {"A"}})
		s := early(3500 * time.Millisecond)
		s.Tenants = admission.TenantSettings{Fair: true}
		c := mustNew(t, s, admission.Deps{})
		warmRate(t, c, p, 21) // about 1 release/s
		held := mustAdmit(t, "holder", goAcquireNow(c, tenantReq(p, "holder", "x")))
		ctx, cancel := context.WithCancel(bg)
		defer cancel()
		var waiting []<-chan result
		for i := range 3 { // positions 1..3: within 3.5 s
			ch := goAcquire(ctx, c, tenantReq(p, fmt.Sprint("flood", i), "flood"))
			synctest.Wait()
			mustWait(t, "flood within the bound", ch)
			waiting = append(waiting, ch)
		}
		if _, err := c.Acquire(bg, tenantReq(p, "flood3", "flood")); !errors.Is(err, admission.ErrPredictedTimeout) {
			t.Fatalf("flood's 4th: %v, want a predicted timeout", err)
		}
		// The quiet tenant is second in line whatever the flood's length.
		ch := goAcquire(ctx, c, tenantReq(p, "quiet", "quiet"))
		synctest.Wait()
		mustWait(t, "quiet", ch)
		waiting = append(waiting, ch)
		cancel()
		for _, ch := range waiting {
			<-ch
		}
		held.Release(admission.ReleaseCompleted)
	})
}

// A tenant arriving with nothing waiting takes a turn that has not granted
// yet (a sparse tenant waits about one grant, not a round), and the tenant
// it put off goes next; one that comes back while it still has its place in
// the ring is not new and waits for that place, so it gets no more than one
// turn per round. Without this, d1 would wait for a2, b2 and c2.
func TestTenantFairNewTenantGoesNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPlacement(map[string][]string{"m": {"W"}})
		c := mustNew(t, fair(nil), admission.Deps{})
		hold, err := c.Acquire(bg, tenantReq(p, "hold", "x"))
		if err != nil {
			t.Fatal(err)
		}
		waiting := map[string]<-chan result{}
		arrive := func(id, tenant string) {
			waiting[id] = goAcquire(bg, c, tenantReq(p, id, tenant))
			synctest.Wait()
		}
		// next releases s and returns the one caller that release admitted.
		next := func(s *admission.Slot) (string, *admission.Slot) {
			t.Helper()
			s.Release(admission.ReleaseCompleted)
			synctest.Wait()
			for id, ch := range waiting {
				if r, ok := done(ch); ok {
					if r.err != nil {
						t.Fatalf("%s: %v", id, r.err)
					}
					delete(waiting, id)
					return id, r.slot
				}
			}
			t.Fatal("a release admitted nobody")
			return "", nil
		}
		for _, tenant := range []string{"a", "b", "c"} {
			for i := 1; i <= 3; i++ {
				arrive(fmt.Sprint(tenant, i), tenant)
			}
		}
		var got []string
		cur := hold
		for len(waiting) > 0 {
			var id string
			id, cur = next(cur)
			got = append(got, id)
			switch id {
			case "c1":
				arrive("d1", "d") // new: before a, whose turn has granted nothing yet
			case "d1":
				arrive("d2", "d") // d still has its place before a: not new
			}
		}
		cur.Release(admission.ReleaseCompleted)
		want := []string{"a1", "b1", "c1", "d1", "a2", "b2", "c2", "d2", "a3", "b3", "c3"}
		if !slices.Equal(got, want) {
			t.Fatalf("grant order %v, want %v", got, want)
		}
	})
}

// A tenant back from idle is granted its burst of up to Burst back to back,
// before the backlogged tenants' next turns, and its surplus over its weight
// is a debt: its Burst+1-th request waits its turn and then the turns the
// debt repays. The flood's own first turns are bursts too (a and b are new
// when they queue), repaid the same way.
func TestTenantFairBurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPlacement(map[string][]string{"m": {"W"}})
		s := fair(nil)
		s.Tenants.Burst = 3
		c := mustNew(t, s, admission.Deps{})
		hold, err := c.Acquire(bg, tenantReq(p, "hold", "x"))
		if err != nil {
			t.Fatal(err)
		}
		waiting := map[string]<-chan result{}
		arrive := func(id, tenant string) {
			waiting[id] = goAcquire(bg, c, tenantReq(p, id, tenant))
			synctest.Wait()
		}
		for _, tenant := range []string{"a", "b"} {
			for i := 1; i <= 6; i++ {
				arrive(fmt.Sprint(tenant, i), tenant)
			}
		}
		var got []string
		cur := hold
		for len(waiting) > 0 {
			cur.Release(admission.ReleaseCompleted)
			synctest.Wait()
			var id string
			for k, ch := range waiting {
				if r, ok := done(ch); ok {
					if r.err != nil {
						t.Fatalf("%s: %v", k, r.err)
					}
					id, cur = k, r.slot
				}
			}
			if id == "" {
				t.Fatal("a release admitted nobody")
			}
			delete(waiting, id)
			got = append(got, id)
			if id == "a4" { // d is new, b's turn has granted nothing yet: d takes it
				for i := 1; i <= 4; i++ {
					arrive(fmt.Sprint("d", i), "d")
				}
			}
		}
		cur.Release(admission.ReleaseCompleted)
		want := []string{
			"a1", "a2", "a3", "b1", "b2", "b3", // first turns: bursts of 3, debts of 2
			"a4",             // a and b repaid 2 turns each
			"d1", "d2", "d3", // d's burst goes before the backlogged b and a
			"b4", "a5", "b5", "a6", "b6", // d repays its 2 turns
			"d4",
		}
		if !slices.Equal(got, want) {
			t.Fatalf("grant order %v, want %v", got, want)
		}
	})
}

// A tenant that sends a burst's worth each time it has been served, against
// a backlogged one, gets no more than its share plus one burst: each burst is
// a debt it repays before it can be new again. Without the debt it would get
// Burst grants to the other's one, round after round.
func TestTenantFairBurstRepaid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const burst = 4
		p := newPlacement(map[string][]string{"m": {"W"}})
		s := fair(nil)
		s.Tenants.Burst = burst
		c := mustNew(t, s, admission.Deps{})
		cur, err := c.Acquire(bg, tenantReq(p, "hold", "h"))
		if err != nil {
			t.Fatal(err)
		}
		type pending struct {
			id, tenant string
			ch         <-chan result
		}
		var waiting []pending
		var grants []string
		var backlogged []map[string]bool
		var emptied []bool
		arrive := func(id, tenant string) {
			waiting = append(waiting, pending{id, tenant, goAcquire(bg, c, tenantReq(p, id, tenant))})
			synctest.Wait()
		}
		release := func() {
			t.Helper()
			queued := map[string]bool{}
			for _, w := range waiting {
				queued[w.tenant] = true
			}
			cur.Release(admission.ReleaseCompleted)
			synctest.Wait()
			for i, w := range waiting {
				if r, ok := done(w.ch); ok {
					if r.err != nil {
						t.Fatalf("%s: %v", w.id, r.err)
					}
					cur, waiting = r.slot, slices.Delete(waiting, i, i+1)
					grants, backlogged = append(grants, w.tenant), append(backlogged, queued)
					emptied = append(emptied, len(waiting) == 0)
					return
				}
			}
			t.Fatal("a release admitted nobody")
		}
		for i := range 40 {
			arrive(fmt.Sprint("y", i), "y")
		}
		for g := range 5 {
			for k := range burst {
				arrive(fmt.Sprint("x", g, ".", k), "x")
			}
			for slices.ContainsFunc(waiting, func(w pending) bool { return w.tenant == "x" }) {
				release()
			}
			release() // x is dropped from the ring now unless it owes
		}
		for len(waiting) > 0 {
			release()
		}
		cur.Release(admission.ReleaseCompleted)
		if msg := shareBoundViolation(grants, backlogged, emptied, map[string]int{"x": 1, "y": 1}, burst); msg != "" {
			t.Fatal(msg)
		}
	})
}

// TestNewTenantHeadSelectsAtOnce: a tenant that takes the head of a queue
// with waiters (the round robin's new-tenant turn, or share mode's
// under-share head) selects at once, without waiting for a release or its
// first poll, when a worker is free: the old head waits only because its
// strict target is full. Found by TestPropertyTenantInvariants (the
// newcomer waited a poll interval while W2 had capacity).
func TestNewTenantHeadSelectsAtOnce(t *testing.T) {
	for _, share := range []bool{false, true} {
		t.Run(fmt.Sprintf("share=%v", share), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := newPlacement(map[string][]string{"m": {"W1", "W2"}})
				c := mustNew(t, admission.Settings{MaxInflightPerWorker: 1, QueueSize: 10, QueueTimeout: time.Hour,
					Tenants: admission.TenantSettings{Fair: true, UnderShareFirst: share}}, admission.Deps{})
				strict := func(id string) admission.Request {
					r := p.req("m", id, "W1")
					r.Tenant = "a"
					return r
				}
				held, err := c.Acquire(bg, strict("a1"))
				if err != nil {
					t.Fatal(err)
				}
				// a is served once from the queue and still has a waiter (a
				// backlogged tenant, not a new one), which waits for W1 while W2
				// stays free.
				second := goAcquire(bg, c, strict("a2"))
				synctest.Wait()
				waiting := goAcquire(bg, c, strict("a3"))
				synctest.Wait()
				held.Release(admission.ReleaseCompleted)
				synctest.Wait()
				r2, ok := done(second)
				if !ok || r2.err != nil {
					t.Fatalf("a2 after the release: %v %v", ok, r2.err)
				}
				held = r2.slot
				if _, ok := done(waiting); ok {
					t.Fatal("a3 was admitted past W1's limit")
				}
				newcomer := goAcquire(bg, c, tenantReq(p, "b1", "b"))
				synctest.Wait() // no time passes: no poll, no release
				r, ok := done(newcomer)
				if !ok {
					t.Fatal("the new tenant's request, now the head, waits while W2 is free")
				}
				if r.err != nil || r.slot.Worker() != "W2" {
					t.Fatalf("b1: %v on %v, want W2", r.err, r.slot)
				}
				r.slot.Release(admission.ReleaseCompleted)
				synctest.Wait()
				if _, ok := done(waiting); ok {
					t.Fatal("a3 was admitted past W1's limit")
				}
				held.Release(admission.ReleaseCompleted)
				synctest.Wait()
				if r, ok := done(waiting); !ok || r.err != nil {
					t.Fatalf("a3 after W1 freed: %v %v", ok, r.err)
				} else {
					r.slot.Release(admission.ReleaseCompleted)
				}
			})
		})
	}
}
