package admission_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/admission"
)

var bg = context.Background()

func TestOneClientRequestUsesOneSlotWhateverTheGuards(t *testing.T) {
	m := newFakeMetrics()
	p := newPlacement(map[string][]string{"m": {"A"}})
	c := mustNew(t, on(1, 0), admission.Deps{Metrics: m})

	slot, err := c.Acquire(bg, p.req("m", "r1", ""))
	if err != nil {
		t.Fatal(err)
	}
	guards := []*admission.Guard{slot.Guard(), slot.Guard(), slot.Guard()} // n = 3 sub-requests
	if got := c.Status().Inflight["A"]; got != 1 {
		t.Fatalf("in-flight with 3 guards = %d, want 1", got)
	}
	slot.Release(admission.ReleaseCompleted)
	guards[0].Release(admission.ReleaseCompleted)
	guards[0].Release(admission.ReleaseCompleted) // exactly-once: no effect
	guards[1].Release(admission.ReleaseFailed)
	if got := c.Status().Inflight["A"]; got != 1 {
		t.Fatalf("in-flight with one guard left = %d, want 1", got)
	}
	if _, err := c.Acquire(bg, p.req("m", "r2", "")); !errors.Is(err, admission.ErrQueueFull) {
		t.Fatalf("second request while the slot is held: err = %v, want ErrQueueFull", err)
	}
	// The last holder releases from a panicking sub-request.
	func() {
		defer func() { _ = recover() }()
		defer guards[2].Release(admission.ReleaseFailed)
		panic("sub-request crashed")
	}()
	slot.Release(admission.ReleaseCompleted)
	guards[2].Release(admission.ReleaseCompleted)
	var nilGuard *admission.Guard
	nilGuard.Release(admission.ReleaseCompleted) // nil-safe

	if got := c.Status().Inflight["A"]; got != 0 {
		t.Fatalf("in-flight after the last release = %d, want 0", got)
	}
	snap := m.snapshot()
	if diff := cmp.Diff([]string{"A=1", "A=0"}, snap.setCalls); diff != "" {
		t.Errorf("SetInflight calls (-want +got):\n%s", diff)
	}
	// A guard taken after the slot was freed is inert.
	late := slot.Guard()
	late.Release(admission.ReleaseCompleted)
	if got := m.snapshot().setCalls; len(got) != 2 {
		t.Errorf("late guard changed the gauge: %v", got)
	}
}

func TestQueueSizeZeroRejectsAtCapacity(t *testing.T) {
	m := newFakeMetrics()
	p := newPlacement(map[string][]string{"m": {"A", "B"}})
	c := mustNew(t, on(1, 0), admission.Deps{Metrics: m})

	var held []*admission.Slot
	for _, id := range []string{"r1", "r2"} {
		s, err := c.Acquire(bg, p.req("m", id, ""))
		if err != nil {
			t.Fatalf("%s: %v, want admitted below capacity", id, err)
		}
		held = append(held, s)
	}
	_, err := c.Acquire(bg, p.req("m", "r3", ""))
	if !errors.Is(err, admission.ErrQueueFull) || !errors.Is(err, admission.ErrRejected) {
		t.Fatalf("at capacity: err = %v, want ErrRejected+ErrQueueFull", err)
	}
	if got := admission.OutcomeOf(err); got != admission.QueueFull {
		t.Errorf("OutcomeOf = %v, want queue_full", got)
	}
	if got := m.snapshot().rejections[admission.QueueFull]; got != 1 {
		t.Errorf("queue_full rejections = %d, want 1", got)
	}
	held[0].Release(admission.ReleaseCompleted)
	s, err := c.Acquire(bg, p.req("m", "r4", ""))
	if err != nil {
		t.Fatalf("after a release: %v, want admitted", err)
	}
	s.Release(admission.ReleaseCompleted)
	held[1].Release(admission.ReleaseCompleted)
}

func TestFullQueueRejectsWithoutSelectingOrBypassingWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPlacement(map[string][]string{"m": {"A", "B"}})
		c := mustNew(t, on(1, 1), admission.Deps{})
		onB, err := c.Acquire(bg, p.req("m", "holder", "B"))
		if err != nil {
			t.Fatal(err)
		}
		w1 := goAcquire(bg, c, p.req("m", "w1", "B")) // strict target: waits for B
		synctest.Wait()
		mustWait(t, "w1", w1)

		// A is free, but the newcomer may not overtake w1 and the queue is full.
		_, err = c.Acquire(bg, p.req("m", "late", ""))
		if !errors.Is(err, admission.ErrQueueFull) {
			t.Fatalf("newcomer: err = %v, want ErrQueueFull", err)
		}
		p.mu.Lock()
		saw, calls := p.sawCapacity["late"], p.calls["late"]
		p.mu.Unlock()
		if saw {
			t.Error("newcomer's Select was offered capacity: the policy ran for selection")
		}
		if calls != 1 {
			t.Errorf("newcomer's Select calls = %d, want 1 (the availability probe)", calls)
		}
		if got := c.Status().Inflight["A"]; got != 0 {
			t.Errorf("in-flight on A = %d, want 0", got)
		}
		mustWait(t, "w1", w1)
		if got := c.Status().QueuedTotal; got != 1 {
			t.Errorf("queued = %d, want 1 (waiter undisturbed)", got)
		}
		onB.Release(admission.ReleaseCompleted)
		synctest.Wait()
		s := mustAdmit(t, "w1", w1)
		if s.Worker() != "B" {
			t.Errorf("w1 on %s, want B", s.Worker())
		}
		s.Release(admission.ReleaseCompleted)
	})
}

func TestStrictFIFOOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPlacement(map[string][]string{"m": {"A"}})
		c := mustNew(t, on(1, 10), admission.Deps{})
		held, err := c.Acquire(bg, p.req("m", "holder", ""))
		if err != nil {
			t.Fatal(err)
		}
		ids := []string{"w0", "w1", "w2", "w3", "w4"}
		var chans []<-chan result
		for _, id := range ids {
			chans = append(chans, goAcquire(bg, c, p.req("m", id, "")))
			synctest.Wait()
		}
		for i := range ids {
			held.Release(admission.ReleaseCompleted)
			synctest.Wait()
			held = mustAdmit(t, ids[i], chans[i])
			for j := i + 1; j < len(ids); j++ {
				mustWait(t, ids[j], chans[j])
			}
		}
		held.Release(admission.ReleaseCompleted)
		if diff := cmp.Diff(append([]string{"holder"}, ids...), p.pickIDs()); diff != "" {
			t.Errorf("admission order (-want +got):\n%s", diff)
		}
	})
}

func TestAdmittedHeadWakesNextHead(t *testing.T) {
	t.Run("one event frees two workers", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := newPlacement(map[string][]string{"m": {"A", "B"}})
			p.open["A"], p.open["B"] = true, true
			c := mustNew(t, on(1, 10), admission.Deps{})
			w1 := goAcquire(bg, c, p.req("m", "w1", ""))
			synctest.Wait()
			w2 := goAcquire(bg, c, p.req("m", "w2", ""))
			synctest.Wait()
			w3 := goAcquire(bg, c, p.req("m", "w3", ""))
			synctest.Wait()

			p.set(func(p *placement) { p.open["A"], p.open["B"] = false, false })
			c.Wake()
			synctest.Wait()
			s1, s2 := mustAdmit(t, "w1", w1), mustAdmit(t, "w2", w2)
			mustWait(t, "w3", w3)
			if s1.Worker() == s2.Worker() {
				t.Errorf("w1 and w2 both on %s", s1.Worker())
			}
			s1.Release(admission.ReleaseCompleted)
			synctest.Wait()
			mustAdmit(t, "w3", w3).Release(admission.ReleaseCompleted)
			s2.Release(admission.ReleaseCompleted)
		})
	})
	t.Run("release of 2 slots admits 2 waiters", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := newPlacement(map[string][]string{"m": {"A"}})
			c := mustNew(t, on(2, 10), admission.Deps{})
			h1, _ := c.Acquire(bg, p.req("m", "h1", ""))
			h2, _ := c.Acquire(bg, p.req("m", "h2", ""))
			var chans []<-chan result
			for _, id := range []string{"w1", "w2", "w3"} {
				chans = append(chans, goAcquire(bg, c, p.req("m", id, "")))
				synctest.Wait()
			}
			h1.Release(admission.ReleaseCompleted)
			h2.Release(admission.ReleaseCompleted)
			synctest.Wait()
			s1, s2 := mustAdmit(t, "w1", chans[0]), mustAdmit(t, "w2", chans[1])
			mustWait(t, "w3", chans[2])
			s1.Release(admission.ReleaseCompleted)
			synctest.Wait()
			mustAdmit(t, "w3", chans[2]).Release(admission.ReleaseCompleted)
			s2.Release(admission.ReleaseCompleted)
		})
	})
}

func TestQueuedRequestTimesOutAndLeavesQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newFakeMetrics()
		p := newPlacement(map[string][]string{"m": {"A"}})
		c := mustNew(t, admission.Settings{MaxInflightPerWorker: 1, QueueSize: 5, QueueTimeout: 5 * time.Second},
			admission.Deps{Metrics: m})
		held, _ := c.Acquire(bg, p.req("m", "holder", ""))
		w1 := goAcquire(bg, c, p.req("m", "w1", ""))
		synctest.Wait()
		time.Sleep(time.Second)
		w2 := goAcquire(bg, c, p.req("m", "w2", ""))
		synctest.Wait()
		if got := m.snapshot().queued; got != 2 {
			t.Fatalf("queued gauge = %d, want 2", got)
		}

		time.Sleep(4*time.Second + time.Millisecond)
		synctest.Wait()
		r := mustDone(t, "w1", w1)
		if !errors.Is(r.err, admission.ErrQueueTimeout) || !errors.Is(r.err, admission.ErrRejected) {
			t.Fatalf("w1: err = %v, want ErrRejected+ErrQueueTimeout", r.err)
		}
		mustWait(t, "w2", w2)
		snap := m.snapshot()
		if snap.queued != 1 || c.Status().QueuedTotal != 1 {
			t.Errorf("queued gauge = %d, status = %d, want 1", snap.queued, c.Status().QueuedTotal)
		}
		if snap.rejections[admission.QueueTimeout] != 1 {
			t.Errorf("queue_timeout rejections = %d, want 1", snap.rejections[admission.QueueTimeout])
		}
		if !containsDuration(snap.waits, 5*time.Second) {
			t.Errorf("waits = %v, want w1's 5s observed", snap.waits)
		}

		held.Release(admission.ReleaseCompleted)
		synctest.Wait()
		mustAdmit(t, "w2", w2).Release(admission.ReleaseCompleted)
		snap = m.snapshot()
		if snap.queued != 0 || snap.queuedBy["m"] != 0 {
			t.Errorf("queued gauge at the end = %d (queue m: %d), want 0", snap.queued, snap.queuedBy["m"])
		}
		// Each wait is labelled with its queue and the worker whose slot ended it: the holder's at
		// once and w2's on A, w1's timeout on none.
		if diff := cmp.Diff([]string{"m/A", "m/", "m/A"}, snap.waitLabels); diff != "" {
			t.Errorf("wait labels (-want +got):\n%s", diff)
		}
		if len(snap.violations) != 0 {
			t.Errorf("violations: %v", snap.violations)
		}
	})
}

func containsDuration(ds []time.Duration, d time.Duration) bool {
	for _, x := range ds {
		if x == d {
			return true
		}
	}
	return false
}

func TestReleasedCapacityIsVisibleToNextSelection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPlacement(map[string][]string{"m": {"A"}})
		c := mustNew(t, on(1, 10), admission.Deps{})
		s, err := c.Acquire(bg, p.req("m", "r1", ""))
		if err != nil {
			t.Fatal(err)
		}
		s.Release(admission.ReleaseCompleted)
		// Fast path: the next selection sees A free again.
		s, err = c.Acquire(bg, p.req("m", "r2", ""))
		if err != nil || s.Worker() != "A" {
			t.Fatalf("after release: (%v, %v), want a slot on A", s, err)
		}
		// Queued path: the release itself hands A to the head.
		w := goAcquire(bg, c, p.req("m", "r3", ""))
		synctest.Wait()
		mustWait(t, "r3", w)
		s.Release(admission.ReleaseCompleted)
		synctest.Wait()
		mustAdmit(t, "r3", w).Release(admission.ReleaseCompleted)
	})
}

func TestHeadSeesBreakerRecoveryWithoutEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPlacement(map[string][]string{"m": {"A"}})
		p.open["A"] = true // breaker open: Select reports no capacity
		c := mustNew(t, on(1, 10), admission.Deps{})
		head := goAcquire(bg, c, p.req("m", "head", ""))
		synctest.Wait()
		second := goAcquire(bg, c, p.req("m", "second", ""))
		synctest.Wait()

		time.Sleep(3500 * time.Millisecond)
		synctest.Wait()
		mustWait(t, "head", head)
		// 1 on arrival + polls at 1s, 2s, 3s; only the head polls.
		if got := p.callsOf("head"); got != 4 {
			t.Errorf("head Select calls after 3.5s = %d, want 4", got)
		}
		if got := p.callsOf("second"); got != 1 {
			t.Errorf("second Select calls after 3.5s = %d, want 1 (the arrival probe): only the head polls", got)
		}

		// The breaker turns half-open lazily: no event, no Wake.
		p.set(func(p *placement) { p.open["A"] = false })
		synctest.Wait()
		mustWait(t, "head", head)
		time.Sleep(time.Second)
		synctest.Wait()
		s := mustAdmit(t, "head", head)
		mustWait(t, "second", second)
		s.Release(admission.ReleaseCompleted)
		synctest.Wait()
		mustAdmit(t, "second", second).Release(admission.ReleaseCompleted)
	})
}

func TestNewHeadTakesOverPolling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPlacement(map[string][]string{"m": {"A"}})
		p.open["A"] = true
		c := mustNew(t, on(1, 10), admission.Deps{})
		ctx, cancel := context.WithCancel(bg)
		defer cancel()
		first := goAcquire(ctx, c, p.req("m", "first", ""))
		synctest.Wait()
		second := goAcquire(bg, c, p.req("m", "second", ""))
		synctest.Wait()
		cancel() // the head leaves; second becomes head
		synctest.Wait()
		mustDone(t, "first", first)
		p.set(func(p *placement) { p.open["A"] = false }) // no event
		synctest.Wait()
		mustWait(t, "second", second)
		time.Sleep(time.Second + time.Millisecond)
		synctest.Wait()
		mustAdmit(t, "second", second).Release(admission.ReleaseCompleted)
	})
}

func TestWakeMakesHeadReselectAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPlacement(map[string][]string{"m": {"A", "B"}})
		c := mustNew(t, on(1, 10), admission.Deps{})
		a, _ := c.Acquire(bg, p.req("m", "holder", ""))
		p.set(func(p *placement) { p.down["B"] = true })
		w := goAcquire(bg, c, p.req("m", "w", ""))
		synctest.Wait()
		mustWait(t, "w", w)
		p.set(func(p *placement) { p.down["B"] = false }) // worker added
		c.Wake()
		synctest.Wait() // no time passes: not the poll
		s := mustAdmit(t, "w", w)
		if s.Worker() != "B" {
			t.Errorf("w on %s, want B", s.Worker())
		}
		s.Release(admission.ReleaseCompleted)
		a.Release(admission.ReleaseCompleted)
	})
}

func TestCancelledWaitersAreRemovedWithoutBlockingFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newFakeMetrics()
		p := newPlacement(map[string][]string{"m": {"A"}})
		c := mustNew(t, on(1, 10), admission.Deps{Metrics: m})
		held, _ := c.Acquire(bg, p.req("m", "holder", ""))

		ctx1, cancel1 := context.WithCancel(bg)
		defer cancel1()
		errGone := errors.New("client went away")
		ctx2, cancel2 := context.WithCancelCause(bg)
		defer cancel2(nil)
		w1 := goAcquire(ctx1, c, p.req("m", "w1", ""))
		synctest.Wait()
		w2 := goAcquire(ctx2, c, p.req("m", "w2", ""))
		synctest.Wait()
		w3 := goAcquire(bg, c, p.req("m", "w3", ""))
		synctest.Wait()

		cancel2(errGone) // a waiter in the middle
		synctest.Wait()
		r := mustDone(t, "w2", w2)
		for _, want := range []error{admission.ErrCancelled, context.Canceled, errGone} {
			if !errors.Is(r.err, want) {
				t.Errorf("w2: err = %v, want it to match %v", r.err, want)
			}
		}
		cancel1() // the head
		synctest.Wait()
		if r := mustDone(t, "w1", w1); admission.OutcomeOf(r.err) != admission.Cancelled {
			t.Errorf("w1: outcome %v, want cancelled", admission.OutcomeOf(r.err))
		}
		if got := c.Status(); got.QueuedTotal != 1 || got.Cancelled != 2 {
			t.Errorf("queued = %d, cancelled = %d, want 1 and 2", got.QueuedTotal, got.Cancelled)
		}
		if got := m.snapshot().rejections[admission.Cancelled]; got != 0 {
			t.Errorf("cancellations counted as rejections: %d", got)
		}
		held.Release(admission.ReleaseCompleted)
		synctest.Wait()
		mustAdmit(t, "w3", w3).Release(admission.ReleaseCompleted)
		if got := c.Status().Inflight["A"]; got != 0 {
			t.Errorf("in-flight at the end = %d, want 0", got)
		}
	})
}

func TestHeadLeavingWakesNext(t *testing.T) {
	for _, why := range []admission.Outcome{admission.Cancelled, admission.QueueTimeout} {
		t.Run(why.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := newPlacement(map[string][]string{"m": {"A", "B"}})
				c := mustNew(t, admission.Settings{MaxInflightPerWorker: 1, QueueSize: 5, QueueTimeout: 5 * time.Second}, admission.Deps{})
				onA, _ := c.Acquire(bg, p.req("m", "holder", "A"))
				ctx, cancel := context.WithCancel(bg)
				defer cancel()
				head := goAcquire(ctx, c, p.req("m", "head", "A")) // holds the queue, B free
				synctest.Wait()
				time.Sleep(time.Second)
				next := goAcquire(bg, c, p.req("m", "next", ""))
				synctest.Wait()
				mustWait(t, "next", next)
				if why == admission.Cancelled {
					cancel()
				} else {
					time.Sleep(4 * time.Second)
				}
				synctest.Wait()
				if r := mustDone(t, "head", head); admission.OutcomeOf(r.err) != why {
					t.Fatalf("head: err = %v, want %v", r.err, why)
				}
				s := mustAdmit(t, "next", next) // at once, not at its next poll
				if s.Worker() != "B" {
					t.Errorf("next on %s, want B", s.Worker())
				}
				s.Release(admission.ReleaseCompleted)
				onA.Release(admission.ReleaseCompleted)
			})
		})
	}
}

func TestAlreadyCancelledContextIsNotAdmitted(t *testing.T) {
	p := newPlacement(map[string][]string{"m": {"A"}})
	for _, s := range []admission.Settings{on(1, 10), on(0, 10)} {
		c := mustNew(t, s, admission.Deps{})
		ctx, cancel := context.WithCancel(bg)
		cancel()
		if _, err := c.Acquire(ctx, p.req("m", "r", "")); !errors.Is(err, context.Canceled) {
			t.Errorf("limit %d: err = %v, want context.Canceled", s.MaxInflightPerWorker, err)
		}
		if got := c.Status().Inflight["A"]; got != 0 {
			t.Errorf("limit %d: in-flight = %d, want 0", s.MaxInflightPerWorker, got)
		}
	}
}

func TestQueuedRequestIsNotBoundToWorker(t *testing.T) {
	for _, freed := range []string{"A", "B"} {
		t.Run("free "+freed, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := newPlacement(map[string][]string{"m": {"A", "B"}})
				c := mustNew(t, on(1, 10), admission.Deps{})
				held := map[string]*admission.Slot{}
				for _, w := range []string{"A", "B"} {
					s, err := c.Acquire(bg, p.req("m", "h"+w, w))
					if err != nil {
						t.Fatal(err)
					}
					held[w] = s
				}
				w := goAcquire(bg, c, p.req("m", "w", ""))
				synctest.Wait()
				held[freed].Release(admission.ReleaseCompleted)
				synctest.Wait()
				s := mustAdmit(t, "w", w)
				if s.Worker() != freed {
					t.Errorf("waiter got %s, want %s (the first to free)", s.Worker(), freed)
				}
				s.Release(admission.ReleaseCompleted)
				for _, h := range held {
					h.Release(admission.ReleaseCompleted)
				}
			})
		})
	}
}

func TestUnavailableHeadLetsNextWaiterThrough(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPlacement(map[string][]string{"m": {"A", "B"}})
		c := mustNew(t, on(1, 10), admission.Deps{})
		onB, _ := c.Acquire(bg, p.req("m", "holder", "B"))
		head := goAcquire(bg, c, p.req("m", "head", "B")) // waits for B
		synctest.Wait()
		next := goAcquire(bg, c, p.req("m", "next", "")) // behind it, though A is free
		synctest.Wait()
		mustWait(t, "next", next)

		p.set(func(p *placement) { p.down["B"] = true }) // B removed
		c.RemoveWorker("B")
		c.Wake()
		synctest.Wait()
		r := mustDone(t, "head", head)
		if !errors.Is(r.err, errNoWorkers) || admission.OutcomeOf(r.err) != admission.Unavailable {
			t.Fatalf("head: err = %v, want the placement's error, outcome unavailable", r.err)
		}
		s := mustAdmit(t, "next", next)
		if s.Worker() != "A" {
			t.Errorf("next on %s, want A", s.Worker())
		}
		s.Release(admission.ReleaseCompleted)
		onB.Release(admission.ReleaseCompleted) // on a removed worker: harmless
		if got := c.Status().Inflight; len(got) != 1 || got["A"] != 0 {
			t.Errorf("in-flight = %v, want only A=0", got)
		}
	})
}

func TestUnavailableIsNeverQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPlacement(map[string][]string{"m": {"A", "B"}, "gone": {"Z"}})
		p.down["Z"] = true
		c := mustNew(t, on(1, 1), admission.Deps{})

		// Empty queue: answered at once.
		if _, err := c.Acquire(bg, p.req("gone", "r0", "")); !errors.Is(err, errNoWorkers) {
			t.Fatalf("no worker for the model: err = %v, want errNoWorkers", err)
		}
		// Full queue with a waiter: still 503, not 429.
		onA, _ := c.Acquire(bg, p.req("m", "holder", "A"))
		w := goAcquire(bg, c, p.req("m", "w", "A"))
		synctest.Wait()
		_, err := c.Acquire(bg, p.req("m", "r1", "C")) // target not in the pool
		if !errors.Is(err, errNoWorkers) || errors.Is(err, admission.ErrRejected) {
			t.Fatalf("unavailable behind waiters: err = %v, want errNoWorkers", err)
		}
		if got := c.Status(); got.QueuedTotal != 1 || got.Rejections["queue_full"] != 0 {
			t.Errorf("queued = %d, queue_full = %d, want 1 and 0", got.QueuedTotal, got.Rejections["queue_full"])
		}
		onA.Release(admission.ReleaseCompleted)
		synctest.Wait()
		mustAdmit(t, "w", w).Release(admission.ReleaseCompleted)
	})
}

func TestStrictTargetWorkerWaitsForItsWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPlacement(map[string][]string{"m": {"A", "B"}})
		c := mustNew(t, on(1, 10), admission.Deps{})
		onA, _ := c.Acquire(bg, p.req("m", "holder", "A"))
		w := goAcquire(bg, c, p.req("m", "w", "A"))
		synctest.Wait()
		time.Sleep(2500 * time.Millisecond) // polls see B free; w does not move
		synctest.Wait()
		mustWait(t, "w", w)
		if got := c.Status().Inflight["B"]; got != 0 {
			t.Errorf("in-flight on B = %d, want 0", got)
		}
		onA.Release(admission.ReleaseCompleted)
		synctest.Wait()
		s := mustAdmit(t, "w", w)
		if s.Worker() != "A" {
			t.Errorf("w on %s, want A", s.Worker())
		}
		s.Release(admission.ReleaseCompleted)
	})
}

func TestRemoveWorkerDeletesGaugeSeries(t *testing.T) {
	m := newFakeMetrics()
	p := newPlacement(map[string][]string{"m": {"A"}})
	c := mustNew(t, on(2, 0), admission.Deps{Metrics: m})
	old, _ := c.Acquire(bg, p.req("m", "r1", ""))
	c.RemoveWorker("A")
	if _, ok := c.Status().Inflight["A"]; ok {
		t.Error("A still in Status after RemoveWorker")
	}
	// Re-added under the same URL: counts from zero; the old slot's release
	// must neither resurrect the series nor decrement the new counter.
	fresh, _ := c.Acquire(bg, p.req("m", "r2", ""))
	old.Release(admission.ReleaseCompleted)
	if got := c.Status().Inflight["A"]; got != 1 {
		t.Errorf("in-flight on re-added A = %d, want 1", got)
	}
	fresh.Release(admission.ReleaseCompleted)
	snap := m.snapshot()
	if diff := cmp.Diff([]string{"A"}, snap.deleted); diff != "" {
		t.Errorf("DeleteWorker calls (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"A=1", "A=1", "A=0"}, snap.setCalls); diff != "" {
		t.Errorf("SetInflight calls (-want +got):\n%s", diff)
	}
}

func TestUpdateRaisingLimitAdmitsHeadAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPlacement(map[string][]string{"m": {"A"}})
		c := mustNew(t, on(1, 10), admission.Deps{})
		held, _ := c.Acquire(bg, p.req("m", "holder", ""))
		w1 := goAcquire(bg, c, p.req("m", "w1", ""))
		synctest.Wait()
		w2 := goAcquire(bg, c, p.req("m", "w2", ""))
		synctest.Wait()
		if err := c.Update(on(2, 10)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // no time passes
		s1 := mustAdmit(t, "w1", w1)
		mustWait(t, "w2", w2)
		if err := c.Update(on(3, 10)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		s2 := mustAdmit(t, "w2", w2)
		if got := c.Settings().MaxInflightPerWorker; got != 3 {
			t.Errorf("Settings().MaxInflightPerWorker = %d, want 3", got)
		}
		for _, s := range []*admission.Slot{held, s1, s2} {
			s.Release(admission.ReleaseCompleted)
		}
	})
}

func TestUpdateLoweringLimitDoesNotRevoke(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPlacement(map[string][]string{"m": {"A"}})
		c := mustNew(t, on(2, 10), admission.Deps{})
		h1, _ := c.Acquire(bg, p.req("m", "h1", ""))
		h2, _ := c.Acquire(bg, p.req("m", "h2", ""))
		if err := c.Update(on(1, 10)); err != nil {
			t.Fatal(err)
		}
		if got := c.Status().Inflight["A"]; got != 2 {
			t.Fatalf("in-flight after lowering = %d, want 2 (granted slots kept)", got)
		}
		w := goAcquire(bg, c, p.req("m", "w", ""))
		synctest.Wait()
		h1.Release(admission.ReleaseCompleted)
		synctest.Wait()
		mustWait(t, "w", w) // 1 in flight = the new limit
		h2.Release(admission.ReleaseCompleted)
		synctest.Wait()
		mustAdmit(t, "w", w).Release(admission.ReleaseCompleted)
	})
}

func TestUpdateLoweringQueueSizeKeepsWaitersRejectsNewcomers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPlacement(map[string][]string{"m": {"A"}})
		c := mustNew(t, on(1, 3), admission.Deps{})
		held, _ := c.Acquire(bg, p.req("m", "holder", ""))
		w1 := goAcquire(bg, c, p.req("m", "w1", ""))
		synctest.Wait()
		w2 := goAcquire(bg, c, p.req("m", "w2", ""))
		synctest.Wait()
		if err := c.Update(on(1, 1)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		mustWait(t, "w1", w1)
		mustWait(t, "w2", w2)
		if _, err := c.Acquire(bg, p.req("m", "late", "")); !errors.Is(err, admission.ErrQueueFull) {
			t.Fatalf("newcomer: err = %v, want ErrQueueFull", err)
		}
		held.Release(admission.ReleaseCompleted)
		synctest.Wait()
		s1 := mustAdmit(t, "w1", w1)
		s1.Release(admission.ReleaseCompleted)
		synctest.Wait()
		mustAdmit(t, "w2", w2).Release(admission.ReleaseCompleted)
	})
}

func TestUpdateTurningOffAdmitsAllWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newFakeMetrics()
		p := newPlacement(map[string][]string{"m": {"A"}, "n": {"A"}})
		c := mustNew(t, on(1, 10), admission.Deps{Metrics: m})
		held, _ := c.Acquire(bg, p.req("m", "holder", ""))
		var chans []<-chan result
		for i, q := range []string{"m", "n", "m"} {
			chans = append(chans, goAcquire(bg, c, p.req(q, "w"+fmt.Sprint(i), "")))
			synctest.Wait()
		}
		if err := c.Update(on(0, 10)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		for i, ch := range chans {
			mustAdmit(t, "w"+fmt.Sprint(i), ch).Release(admission.ReleaseCompleted)
		}
		held.Release(admission.ReleaseCompleted) // counted when granted: given back
		if got := c.Status(); got.QueuedTotal != 0 || got.Inflight["A"] != 0 {
			t.Errorf("queued = %d, in-flight = %d, want 0 and 0", got.QueuedTotal, got.Inflight["A"])
		}
		if got := m.snapshot().setCalls; len(got) != 2 {
			t.Errorf("SetInflight calls = %v, want only the holder's grant and release", got)
		}
	})
}

func TestDisabledAdmitsEverythingWithoutCounters(t *testing.T) {
	m := newFakeMetrics()
	c := mustNew(t, admission.DefaultSettings(), admission.Deps{Metrics: m})
	var slots []*admission.Slot
	for range 5 {
		s, err := c.Acquire(bg, admission.Request{Queue: "m", Select: func(hasCap func(string) bool) (string, error) {
			if !hasCap("A") {
				return "", admission.ErrNoCapacity
			}
			return "A", nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		slots = append(slots, s)
	}
	for _, s := range slots {
		s.Guard().Release(admission.ReleaseCompleted)
		s.Release(admission.ReleaseCompleted)
		s.Release(admission.ReleaseCompleted)
	}
	_, err := c.Acquire(bg, admission.Request{Select: func(func(string) bool) (string, error) { return "", errNoWorkers }})
	if !errors.Is(err, errNoWorkers) {
		t.Errorf("final error: %v, want errNoWorkers", err)
	}
	snap := m.snapshot()
	if len(snap.setCalls) != 0 || len(snap.waits) != 0 || snap.queued != 0 {
		t.Errorf("metrics touched while off: set %v, waits %v, queued %d", snap.setCalls, snap.waits, snap.queued)
	}
	if got := c.Status().Inflight; len(got) != 0 {
		t.Errorf("in-flight while off = %v, want none", got)
	}
}

func TestQueuesPerModel(t *testing.T) {
	t.Run("a full model does not block another", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := newPlacement(map[string][]string{"m1": {"A"}, "m2": {"B"}})
			c := mustNew(t, on(1, 10), admission.Deps{})
			a, _ := c.Acquire(bg, p.req("m1", "h", ""))
			w := goAcquire(bg, c, p.req("m1", "w", ""))
			synctest.Wait()
			b, err := c.Acquire(bg, p.req("m2", "other", ""))
			if err != nil || b.Worker() != "B" {
				t.Fatalf("other model: (%v, %v), want admitted on B", b, err)
			}
			if got := c.Status().Queued; !cmp.Equal(got, map[string]int{"m1": 1}) {
				t.Errorf("queued per queue = %v, want m1:1", got)
			}
			a.Release(admission.ReleaseCompleted)
			synctest.Wait()
			mustAdmit(t, "w", w).Release(admission.ReleaseCompleted)
			b.Release(admission.ReleaseCompleted)
		})
	})
	t.Run("freed slots rotate across queues", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := newPlacement(map[string][]string{"m1": {"A"}, "m2": {"A"}})
			c := mustNew(t, on(1, 10), admission.Deps{})
			held, _ := c.Acquire(bg, p.req("m1", "h", ""))
			var chans []<-chan result
			ids := []string{"x1", "x2", "x3", "y1", "y2", "y3"} // m1 fills first
			for _, id := range ids {
				q := "m1"
				if id[0] == 'y' {
					q = "m2"
				}
				chans = append(chans, goAcquire(bg, c, p.req(q, id, "")))
				synctest.Wait()
			}
			for range ids {
				held.Release(admission.ReleaseCompleted)
				synctest.Wait()
				held = nil
				for i, ch := range chans {
					if r, ok := done(ch); ok {
						if r.err != nil {
							t.Fatalf("%s: %v", ids[i], r.err)
						}
						held = r.slot
					}
				}
				if held == nil {
					t.Fatal("a release admitted nobody")
				}
			}
			held.Release(admission.ReleaseCompleted)
			got := p.pickIDs()[1:]
			for i := 1; i < len(got); i++ {
				if got[i][0] == got[i-1][0] {
					t.Fatalf("admission order %v: one queue took two slots in a row while the other waited", got)
				}
			}
		})
	})
}

func TestSelectPanicFailsOnlyThatRequest(t *testing.T) {
	p := newPlacement(map[string][]string{"m": {"A"}})
	c := mustNew(t, on(1, 10), admission.Deps{})
	_, err := c.Acquire(bg, admission.Request{Queue: "m", Select: func(func(string) bool) (string, error) { panic("policy bug") }})
	if err == nil || !strings.Contains(err.Error(), "policy bug") {
		t.Fatalf("err = %v, want the panic as an error", err)
	}
	s, err := c.Acquire(bg, p.req("m", "r", "")) // the lock was not left held
	if err != nil {
		t.Fatal(err)
	}
	s.Release(admission.ReleaseCompleted)
}

func TestRetryAfterEstimate(t *testing.T) {
	tests := []struct {
		name     string
		interval time.Duration // between releases; 0 = no release
		releases int
		queued   int
		want     time.Duration
		slack    time.Duration
	}{
		{name: "unknown rate", want: time.Second},
		{name: "10/s, 30 queued", interval: 100 * time.Millisecond, releases: 21, queued: 30, want: 3 * time.Second, slack: 300 * time.Millisecond},
		{name: "10/s, empty queue floors at 1s", interval: 100 * time.Millisecond, releases: 21, want: time.Second},
		{name: "0.1/s, 30 queued clamps to timeout", interval: 10 * time.Second, releases: 5, queued: 30, want: 20 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := newPlacement(map[string][]string{"m": {"A"}})
				c := mustNew(t, admission.Settings{MaxInflightPerWorker: 1, QueueSize: 100, QueueTimeout: 20 * time.Second}, admission.Deps{})
				for range tt.releases {
					s, err := c.Acquire(bg, p.req("m", "r", ""))
					if err != nil {
						t.Fatal(err)
					}
					time.Sleep(tt.interval)
					s.Release(admission.ReleaseCompleted)
				}
				held, _ := c.Acquire(bg, p.req("m", "h", ""))
				ctx, cancel := context.WithCancel(bg)
				var chans []<-chan result
				for range tt.queued {
					chans = append(chans, goAcquire(ctx, c, p.req("m", "w", "")))
				}
				synctest.Wait()
				got := c.RetryAfter()
				if got < tt.want-tt.slack || got > tt.want+tt.slack {
					t.Errorf("RetryAfter = %v, want %v ± %v", got, tt.want, tt.slack)
				}
				if st := c.Status().RetryAfter; st != got {
					t.Errorf("Status().RetryAfter = %v, want %v", st, got)
				}
				cancel()
				for _, ch := range chans {
					<-ch
				}
				held.Release(admission.ReleaseCompleted)
			})
		})
	}
}

func TestStatusWaitPercentiles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPlacement(map[string][]string{"m": {"A"}})
		c := mustNew(t, on(1, 10), admission.Deps{})
		held, _ := c.Acquire(bg, p.req("m", "h", "")) // waits 0
		w := goAcquire(bg, c, p.req("m", "w", ""))
		synctest.Wait()
		time.Sleep(2 * time.Second)
		held.Release(admission.ReleaseCompleted)
		synctest.Wait()
		mustAdmit(t, "w", w).Release(admission.ReleaseCompleted)
		got := c.Status().Wait
		want := admission.WaitStats{Count: 2, P50: 0, P90: 2 * time.Second, P99: 2 * time.Second}
		if got != want {
			t.Errorf("Wait = %+v, want %+v", got, want)
		}
	})
}

func TestSettingsValidate(t *testing.T) {
	tests := []struct {
		name    string
		s       admission.Settings
		wantErr string
	}{
		{name: "defaults", s: admission.DefaultSettings()},
		{name: "on", s: on(4, 100)},
		{name: "never wait needs no timeout", s: admission.Settings{MaxInflightPerWorker: 1}},
		{name: "negative queue", s: admission.Settings{QueueSize: -1}, wantErr: "queue size"},
		{name: "negative timeout", s: admission.Settings{QueueTimeout: -time.Second}, wantErr: "queue timeout"},
		{name: "waiting without timeout", s: admission.Settings{MaxInflightPerWorker: 1, QueueSize: 5}, wantErr: "must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.s.Validate()
			if (err != nil) != (tt.wantErr != "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Validate() = %v, want error containing %q", err, tt.wantErr)
			}
			_, err = admission.New(tt.s, admission.Deps{})
			if (err != nil) != (tt.wantErr != "") {
				t.Errorf("New() error = %v, want error %v", err, tt.wantErr != "")
			}
		})
	}
	if got := admission.DefaultSettings(); got.Enabled() || got.QueueSize != 100 || got.QueueTimeout != time.Minute {
		t.Errorf("DefaultSettings() = %+v", got)
	}
}

func TestOutcomeOf(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want admission.Outcome
	}{
		{name: "nil", err: nil, want: admission.Admitted},
		{name: "queue full", err: errors.Join(admission.ErrRejected, admission.ErrQueueFull), want: admission.QueueFull},
		{name: "queue timeout", err: errors.Join(admission.ErrRejected, admission.ErrQueueTimeout), want: admission.QueueTimeout},
		{name: "cancelled", err: context.Canceled, want: admission.Cancelled},
		{name: "deadline", err: context.DeadlineExceeded, want: admission.Cancelled},
		{name: "placement error", err: errNoWorkers, want: admission.Unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := admission.OutcomeOf(tt.err); got != tt.want {
				t.Errorf("OutcomeOf(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
	labels := []string{}
	for o := admission.Admitted; o <= admission.Unavailable; o++ {
		labels = append(labels, o.String())
	}
	if diff := cmp.Diff([]string{"admitted", "queue_full", "queue_timeout", "cancelled", "unavailable"}, labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
}
