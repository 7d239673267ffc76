package admission_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
)

// Drain answers every queued waiter (of every queue) with ErrShuttingDown at
// once, refuses newcomers, leaves granted slots to finish, and a second
// Drain is a no-op.
func TestDrainAnswersWaitersRefusesNewcomersKeepsSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newFakeMetrics()
		p := newPlacement(map[string][]string{"m": {"A"}, "n": {"B"}})
		c := mustNew(t, admission.Settings{MaxInflightPerWorker: 1, QueueSize: 5, QueueTimeout: time.Minute},
			admission.Deps{Metrics: m})
		heldA, err := c.Acquire(bg, p.req("m", "holdA", ""))
		if err != nil {
			t.Fatal(err)
		}
		heldB, err := c.Acquire(bg, p.req("n", "holdB", ""))
		if err != nil {
			t.Fatal(err)
		}
		waiters := []<-chan result{
			goAcquire(bg, c, p.req("m", "w1", "")),
			goAcquire(bg, c, p.req("m", "w2", "")),
			goAcquire(bg, c, p.req("n", "w3", "")),
		}
		synctest.Wait()
		if got := c.Status().QueuedTotal; got != 3 {
			t.Fatalf("queued = %d, want 3", got)
		}

		if n := c.Drain(); n != 3 {
			t.Errorf("Drain answered %d waiters, want 3", n)
		}
		synctest.Wait() // no timer advanced: the answers came from the drain itself
		for i, ch := range waiters {
			r := mustDone(t, "waiter", ch)
			if r.slot != nil || !errors.Is(r.err, admission.ErrShuttingDown) || !errors.Is(r.err, admission.ErrRejected) ||
				admission.OutcomeOf(r.err) != admission.ShuttingDown {
				t.Errorf("waiter %d: slot %v, err %v, want ErrRejected+ErrShuttingDown", i, r.slot != nil, r.err)
			}
		}
		if _, err := c.Acquire(bg, p.req("m", "late", "")); !errors.Is(err, admission.ErrShuttingDown) {
			t.Errorf("Acquire after Drain: err = %v, want ErrShuttingDown", err)
		}
		if p.callsOf("late") != 0 {
			t.Errorf("a drained controller ran Select %d times", p.callsOf("late"))
		}
		if n := c.Drain(); n != 0 || !c.Draining() {
			t.Errorf("second Drain answered %d, draining %v; want 0, true", n, c.Draining())
		}

		snap := m.snapshot()
		if snap.inflight["A"] != 1 || snap.inflight["B"] != 1 {
			t.Errorf("in-flight after drain = %v, want the granted slots kept", snap.inflight)
		}
		if snap.queued != 0 || snap.queuedBy["m"] != 0 || snap.queuedBy["n"] != 0 {
			t.Errorf("queued gauge = %d (%v), want 0", snap.queued, snap.queuedBy)
		}
		if got := snap.rejections[admission.ShuttingDown]; got != 4 {
			t.Errorf("shutting_down rejections = %d, want 4 (3 waiters, 1 newcomer)", got)
		}
		heldA.Release(admission.ReleaseCompleted)
		heldB.Release(admission.ReleaseCompleted)
		snap = m.snapshot()
		if snap.inflight["A"] != 0 || snap.inflight["B"] != 0 || len(snap.violations) != 0 {
			t.Errorf("after release: in-flight %v, violations %v", snap.inflight, snap.violations)
		}
	})
}

// A waiter whose timeout fires in the same instant as the drain leaves
// exactly once, with one of the two answers, and the gauges balance.
func TestDrainRacingTimeoutLeavesOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newFakeMetrics()
		p := newPlacement(map[string][]string{"m": {"A"}})
		c := mustNew(t, admission.Settings{MaxInflightPerWorker: 1, QueueSize: 5, QueueTimeout: time.Second},
			admission.Deps{Metrics: m})
		held, _ := c.Acquire(bg, p.req("m", "hold", ""))
		w := goAcquire(bg, c, p.req("m", "w", ""))
		synctest.Wait()
		time.Sleep(time.Second) // the timer is due; the waiter has not run yet
		c.Drain()
		synctest.Wait()
		r := mustDone(t, "w", w)
		if !errors.Is(r.err, admission.ErrShuttingDown) && !errors.Is(r.err, admission.ErrQueueTimeout) {
			t.Errorf("err = %v, want shutting down or queue timeout", r.err)
		}
		snap := m.snapshot()
		if snap.queued != 0 || len(snap.waits) != 2 { // the holder's and w's, once
			t.Errorf("queued = %d, waits = %v; want 0 and two observations", snap.queued, snap.waits)
		}
		if got := snap.rejections[admission.ShuttingDown] + snap.rejections[admission.QueueTimeout]; got != 1 {
			t.Errorf("rejections = %v, want exactly one", snap.rejections)
		}
		held.Release(admission.ReleaseCompleted)
	})
}

// With admission off there is no queue, but a drained controller still
// refuses.
func TestDrainRefusesWithAdmissionOff(t *testing.T) {
	p := newPlacement(map[string][]string{"m": {"A"}})
	c := mustNew(t, admission.Settings{}, admission.Deps{})
	c.Drain()
	if _, err := c.Acquire(bg, p.req("m", "x", "")); !errors.Is(err, admission.ErrShuttingDown) {
		t.Errorf("err = %v, want ErrShuttingDown", err)
	}
}
