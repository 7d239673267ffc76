package admission_test

import (
	"slices"
	"testing"
	"testing/synctest"

	"github.com/sluicegw/sluice/internal/admission"
)

// A seat-only grant (local prefill) takes a decode seat and no prefill
// slot; releasing its slot changes nothing, its seat goes back exactly once.
func TestSeatOnlyTakesNoSlot(t *testing.T) {
	m := newSeatMetrics(2)
	p := newPairPlacement([]string{"P0"}, []string{"D0"})
	c := mustNew(t, seatsOn(1, 2, 10), admission.Deps{Metrics: m})
	s, err := c.Acquire(bg, p.reqMode("a", "", modeLocal))
	if err != nil {
		t.Fatal(err)
	}
	if !s.SeatOnly() || s.Worker() != "" || s.Seat() == nil || s.Seat().Worker() != "D0" {
		t.Fatalf("got slot %q seat %v (seat only %v), want a seat on D0 alone", s.Worker(), s.Seat(), s.SeatOnly())
	}
	if st := c.Status(); st.Inflight["P0"] != 0 || st.Seats["D0"] != 1 {
		t.Fatalf("inflight %v seats %v, want no slot and one seat", st.Inflight, st.Seats)
	}
	// The prefill worker's slot is still free for a PD request.
	pd, err := c.Acquire(bg, p.req("b", ""))
	if err != nil || pd.SeatOnly() || pd.Worker() != "P0" {
		t.Fatalf("pair beside a seat-only grant: %v %v", pd, err)
	}
	s.Release(admission.ReleaseCompleted)
	if st := c.Status(); st.Inflight["P0"] != 1 || st.Seats["D0"] != 2 {
		t.Fatalf("after the seat-only slot's release: inflight %v seats %v, want 1 and 2", st.Inflight, st.Seats)
	}
	s.Seat().Release(admission.ReleaseCompleted)
	s.Seat().Release(admission.ReleaseFailed) // exactly once
	if got := m.seatsOf("D0"); got != 1 {
		t.Fatalf("seats on D0 = %d, want 1 (b's)", got)
	}
	pd.Release(admission.ReleaseCompleted)
	pd.Seat().Release(admission.ReleaseCompleted)
	if st := c.Status(); st.Inflight["P0"] != 0 || st.Seats["D0"] != 0 || m.seatsOf("D0") != 0 {
		t.Fatalf("at the end: inflight %v seats %v", st.Inflight, st.Seats)
	}
	if len(m.seatViol) > 0 {
		t.Fatal(m.seatViol)
	}
}

// The seat bound holds for seat-only grants: one waits for a seat, is
// admitted when a seat is released (not when a prefill slot is), and a
// rejection with the queue full names decode once the seats are held by
// decodes.
func TestSeatOnlyWaitsForASeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newSeatMetrics(1)
		p := newPairPlacement([]string{"P0"}, []string{"D0"})
		c := mustNew(t, seatsOn(1, 1, 1), admission.Deps{Metrics: m})
		a, err := c.Acquire(bg, p.req("a", ""))
		if err != nil {
			t.Fatal(err)
		}
		b := goAcquire(bg, c, p.reqMode("b", "", modeLocal))
		synctest.Wait()
		mustWait(t, "b (D0's one seat is a's)", b)
		a.Release(admission.ReleaseCompleted)
		synctest.Wait()
		mustWait(t, "b after a's prefill ended", b)
		// a's seat is now held by its decode alone: a full queue is decode's doing.
		if _, err := c.Acquire(bg, p.reqMode("c", "", modeLocal)); admission.OutcomeOf(err) != admission.DecodeQueueFull {
			t.Fatalf("c with the queue full: %v, want a decode queue-full rejection", err)
		}
		a.Seat().Release(admission.ReleaseCompleted)
		synctest.Wait()
		bs := mustAdmit(t, "b after a's seat was released", b)
		if !bs.SeatOnly() || m.seatsOf("D0") != 1 {
			t.Fatalf("b: seat only %v, seats on D0 %d", bs.SeatOnly(), m.seatsOf("D0"))
		}
		bs.Release(admission.ReleaseCompleted)
		bs.Seat().Release(admission.ReleaseCompleted)
		if m.seatsOf("D0") != 0 || len(m.seatViol) > 0 {
			t.Fatalf("seats on D0 = %d at the end; %v", m.seatsOf("D0"), m.seatViol)
		}
	})
}

// A seat-only request never overtakes a waiter: with a PD head waiting for
// a prefill slot and a seat free, a newcomer that needs only that seat
// waits behind the head, and is admitted right after it.
func TestSeatOnlyDoesNotOvertake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPairPlacement([]string{"P0"}, []string{"D0"})
		c := mustNew(t, seatsOn(1, 3, 10), admission.Deps{})
		a, err := c.Acquire(bg, p.req("a", ""))
		if err != nil {
			t.Fatal(err)
		}
		b := goAcquire(bg, c, p.req("b", ""))
		synctest.Wait()
		mustWait(t, "b (P0's slot is a's)", b)
		l := goAcquire(bg, c, p.reqMode("l", "", modeLocal))
		synctest.Wait()
		mustWait(t, "l behind b, although D0 has a seat", l)
		a.Release(admission.ReleaseCompleted)
		synctest.Wait()
		bs := mustAdmit(t, "b", b)
		ls := mustAdmit(t, "l right after b", l)
		if got := p.pickIDs(); !slices.Equal(got, []string{"a", "b", "l"}) {
			t.Fatalf("grant order %v, want a, b, l", got)
		}
		for _, s := range []*admission.Slot{a, bs, ls} {
			s.Release(admission.ReleaseCompleted)
			s.Seat().Release(admission.ReleaseCompleted)
		}
		if st := c.Status(); st.Seats["D0"] != 0 || st.Inflight["P0"] != 0 {
			t.Fatalf("at the end: seats %v inflight %v", st.Seats, st.Inflight)
		}
	})
}

// A request that would wait for a prefill slot while its decode worker has
// a seat is granted the seat alone (the spill selection), at once.
func TestSeatOnlySpillWhenPrefillIsFull(t *testing.T) {
	p := newPairPlacement([]string{"P0"}, []string{"D0"})
	c := mustNew(t, seatsOn(1, 2, 10), admission.Deps{})
	a, err := c.Acquire(bg, p.reqMode("a", "", modeSpill))
	if err != nil || a.SeatOnly() {
		t.Fatalf("a with P0 free: %v %v, want a pair", a, err)
	}
	b, err := c.Acquire(bg, p.reqMode("b", "", modeSpill))
	if err != nil || !b.SeatOnly() || b.Seat().Worker() != "D0" {
		t.Fatalf("b with P0 full: %v %v, want a seat on D0 alone", b, err)
	}
	if st := c.Status(); st.Inflight["P0"] != 1 || st.Seats["D0"] != 2 {
		t.Fatalf("inflight %v seats %v, want 1 and 2", st.Inflight, st.Seats)
	}
	for _, s := range []*admission.Slot{a, b} {
		s.Release(admission.ReleaseCompleted)
		s.Seat().Release(admission.ReleaseCompleted)
	}
}
