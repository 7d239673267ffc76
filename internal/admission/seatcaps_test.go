package admission_test

import (
	"testing"
	"testing/synctest"

	"github.com/google/go-cmp/cmp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicegw/sluice/internal/admission"
)

// TestSeatCaps: a seat cap bounds new seats below the seat bound, lowering it revokes nothing, raising it
// admits the head at once (no release needed), unlisted decode workers take the default cap, and clearing
// the caps restores the plain bound. Slot caps are not seat caps: the prefill side stays free throughout.
func TestSeatCaps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newSeatMetrics(4)
		p := newPairPlacement([]string{"P0", "P1", "P2", "P3"}, []string{"D0", "D1"})
		c := mustNew(t, seatsOn(4, 4, 10), admission.Deps{Metrics: m})
		c.SetSeatCaps(map[string]int{"D0": 1}, 0) // D1 is unlisted: cap 0

		a1 := mustAdmit(t, "a1", goAcquireWait(c, p.req("a1", "")))
		if a1.Seat() == nil || a1.Seat().Worker() != "D0" {
			t.Fatalf("a1 seat %v, want D0", a1.Seat())
		}
		w2 := goAcquire(bg, c, p.req("a2", ""))
		synctest.Wait()
		mustWait(t, "a2 (D0 at its cap 1, D1 capped at 0)", w2)

		c.SetSeatCaps(map[string]int{"D0": 2}, 0) // a raise admits the head without a release
		synctest.Wait()
		a2 := mustAdmit(t, "a2", w2)
		if a2.Seat().Worker() != "D0" {
			t.Fatalf("a2 seat on %s, want D0", a2.Seat().Worker())
		}
		w3 := goAcquire(bg, c, p.req("a3", ""))
		synctest.Wait()
		mustWait(t, "a3", w3)

		c.SetSeatCaps(map[string]int{"D0": 0}, 0) // lowering below the seats held revokes nothing
		if got := c.Usage().Seats["D0"]; got != 2 {
			t.Fatalf("D0 holds %d seats after lowering its cap, want 2", got)
		}
		a1.Release(admission.ReleaseCompleted)
		a1.Seat().Release(admission.ReleaseCompleted)
		synctest.Wait()
		mustWait(t, "a3 after a seat release under cap 0", w3)

		c.SetSeatCaps(nil, 1) // every decode worker capped at 1: D1 is free, D0 still holds 1
		synctest.Wait()
		a3 := mustAdmit(t, "a3", w3)
		if a3.Seat().Worker() != "D1" {
			t.Fatalf("a3 seat on %s, want D1", a3.Seat().Worker())
		}

		c.ClearSeatCaps()
		var more []*admission.Slot
		for _, id := range []string{"c0", "c1", "c2"} { // D0 has 3 of its 4 seats free again
			s := mustAdmit(t, "after clear", goAcquireWait(c, p.req(id, "D0")))
			more = append(more, s)
		}
		if got := c.Usage().Seats["D0"]; got != 4 {
			t.Fatalf("D0 holds %d seats after clear, want 4", got)
		}
		for _, s := range append(more, a2, a3) {
			s.Release(admission.ReleaseCompleted)
			s.Seat().Release(admission.ReleaseCompleted)
		}
		if u := c.Usage(); u.Seats["D0"] != 0 || u.Seats["D1"] != 0 || u.SeatLimit != 4 {
			t.Fatalf("usage at the end %+v, want no seats held and seat limit 4", u)
		}
		if len(m.seatViol) > 0 {
			t.Fatal(m.seatViol)
		}
		if v := m.snapshot().violations; len(v) > 0 {
			t.Errorf("metrics violations: %v", v)
		}
	})
}

// TestSeatCapsOnlyWithSeats: seat caps bound nothing while decode seats are off, and Usage reports no seats.
func TestSeatCapsOnlyWithSeats(t *testing.T) {
	p := newPairPlacement([]string{"P0"}, []string{"D0"})
	c := mustNew(t, on(1, 10), admission.Deps{})
	c.SetSeatCaps(nil, 0)
	s, err := c.Acquire(bg, p.req("a", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(admission.ReleaseCompleted)
	if u := c.Usage(); u.Seats != nil || u.SeatLimit != 0 {
		t.Fatalf("usage with seats off reports seats: %+v", u)
	}
}

// TestSeatShareLimitedSpan: a wait that a seat cap caused is marked share-limited on its span, as a slot
// cap's is; a wait for a seat under the plain seat bound is not.
func TestSeatShareLimitedSpan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		defer func() { _ = tp.Shutdown(bg) }()
		p := newPairPlacement([]string{"P0", "P1"}, []string{"D0"})
		c := mustNew(t, seatsOn(2, 1, 10), admission.Deps{Tracer: tp.Tracer("test")})

		// By the seat bound: D0's one seat is held; the next request waits for its release.
		held := mustAdmit(t, "held", goAcquireWait(c, p.req("held", "")))
		w := goAcquire(bg, c, p.req("by-bound", ""))
		synctest.Wait()
		mustWait(t, "by-bound", w)
		held.Release(admission.ReleaseCompleted)
		held.Seat().Release(admission.ReleaseCompleted)
		synctest.Wait()
		s := mustAdmit(t, "by-bound", w)
		s.Release(admission.ReleaseCompleted)
		s.Seat().Release(admission.ReleaseCompleted)

		// By the share: D0 is free but its seats are capped at 0 until the cap rises.
		c.SetSeatCaps(nil, 0)
		w = goAcquire(bg, c, p.req("by-share", ""))
		synctest.Wait()
		mustWait(t, "by-share", w)
		c.SetSeatCaps(nil, 1)
		synctest.Wait()
		s = mustAdmit(t, "by-share", w)
		s.Release(admission.ReleaseCompleted)
		s.Seat().Release(admission.ReleaseCompleted)

		var limited []bool
		for _, sp := range exp.GetSpans() {
			if sp.Name != "sluice.admission.wait" {
				continue
			}
			v := false
			for _, kv := range sp.Attributes {
				if kv.Key == "sluice.admission.share_limited" {
					v = kv.Value.AsBool()
				}
			}
			limited = append(limited, v)
		}
		if diff := cmp.Diff([]bool{false, false, true}, limited); diff != "" {
			t.Errorf("share_limited per wait span, in end order (held, by-bound, by-share) (-want +got):\n%s", diff)
		}
	})
}
