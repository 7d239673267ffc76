package admission_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
)

func TestSeatsOffRunsPrefillOnlySelect(t *testing.T) {
	p := newPairPlacement([]string{"P0"}, []string{"D0"})
	c := mustNew(t, on(1, 10), admission.Deps{})
	s, err := c.Acquire(bg, p.req("a", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(admission.ReleaseCompleted)
	if s.Seat() != nil {
		t.Fatalf("seat %q granted with seats off", s.Seat().Worker())
	}
	if p.selects != 1 {
		t.Fatalf("prefill-only Select ran %d times, want 1", p.selects)
	}
	if st := c.Status(); st.Seats != nil || st.Rejections[admission.DecodeQueueFull.String()] != 0 {
		t.Fatalf("status reports seats with seats off: %+v", st.Seats)
	}
}

// A request waits for a decode seat although a prefill slot is free; a
// released prefill slot does not admit it, a released seat does.
func TestSeatHeldUntilDecodeEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newSeatMetrics(1)
		p := newPairPlacement([]string{"P0", "P1"}, []string{"D0"})
		c := mustNew(t, seatsOn(1, 1, 10), admission.Deps{Metrics: m})
		a, err := c.Acquire(bg, p.req("a", ""))
		if err != nil {
			t.Fatal(err)
		}
		if a.Worker() != "P0" || a.Seat() == nil || a.Seat().Worker() != "D0" {
			t.Fatalf("got slot %s seat %v, want P0 + D0", a.Worker(), a.Seat())
		}
		b := goAcquire(bg, c, p.req("b", ""))
		synctest.Wait()
		mustWait(t, "b (no seat on D0)", b)
		a.Release(admission.ReleaseCompleted) // prefill ends; decode goes on
		synctest.Wait()
		mustWait(t, "b after a's prefill ended", b)
		if got := m.seatsOf("D0"); got != 1 {
			t.Fatalf("seats on D0 = %d, want 1", got)
		}
		seat := a.Seat()
		seat.Release(admission.ReleaseCompleted)
		seat.Release(admission.ReleaseFailed) // exactly once
		synctest.Wait()
		bs := mustAdmit(t, "b after a's decode ended", b)
		if st := c.Status(); st.Seats["D0"] != 1 || st.SeatLimits["D0"] != 1 {
			t.Fatalf("status seats %v limits %v, want D0=1/1", st.Seats, st.SeatLimits)
		}
		bs.Release(admission.ReleaseCompleted)
		bs.Seat().Release(admission.ReleaseCompleted)
		if got := m.seatsOf("D0"); got != 0 {
			t.Fatalf("seats on D0 = %d at the end, want 0", got)
		}
		if m.decodeWait != 1 {
			t.Fatalf("decode waits observed %d, want 1 (b)", m.decodeWait)
		}
		if len(m.seatViol) > 0 {
			t.Fatal(m.seatViol)
		}
	})
}

func TestRejectionNamesTheSide(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPairPlacement([]string{"P0", "P1"}, []string{"D0"})
		c := mustNew(t, seatsOn(1, 1, 1), admission.Deps{})
		a, _ := c.Acquire(bg, p.req("a", ""))
		a.Release(admission.ReleaseCompleted) // a's prefill is over; its decode holds the seat
		b := goAcquire(bg, c, p.req("b", ""))
		synctest.Wait()
		mustWait(t, "b", b)
		// The queue is full and its head waits for a seat: decode.
		_, err := c.Acquire(bg, p.req("c", ""))
		if !errors.Is(err, admission.ErrDecodeQueueFull) || !errors.Is(err, admission.ErrRejected) || errors.Is(err, admission.ErrQueueFull) {
			t.Fatalf("err = %v, want a decode queue-full rejection", err)
		}
		if o := admission.OutcomeOf(err); o != admission.DecodeQueueFull || o.String() != "decode_queue_full" {
			t.Fatalf("outcome %v", o)
		}
		// The head times out still waiting for a seat.
		time.Sleep(time.Minute)
		synctest.Wait()
		r := mustDone(t, "b", b)
		if !errors.Is(r.err, admission.ErrDecodeQueueTimeout) || admission.OutcomeOf(r.err) != admission.DecodeQueueTimeout {
			t.Fatalf("b: err = %v, want a decode queue timeout", r.err)
		}
		st := c.Status()
		if st.Rejections["decode_queue_full"] != 1 || st.Rejections["decode_queue_timeout"] != 1 || st.Rejections["queue_full"] != 0 {
			t.Fatalf("rejections %v", st.Rejections)
		}
		a.Release(admission.ReleaseCompleted)
		a.Seat().Release(admission.ReleaseCompleted)
	})
}

// A decode out of seats only because the requests holding them are still in
// prefill is the prefill's doing: the head held back there names prefill, and
// once those prefills are over (their decodes still running) decode.
func TestSeatsHeldInPrefillNamePrefill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPairPlacement([]string{"P0", "P1"}, []string{"D0"})
		c := mustNew(t, seatsOn(1, 1, 1), admission.Deps{})
		a, _ := c.Acquire(bg, p.req("a", "")) // in prefill, holding D0's one seat
		b := goAcquire(bg, c, p.req("b", ""))
		synctest.Wait()
		mustWait(t, "b", b)
		if _, err := c.Acquire(bg, p.req("c", "")); !errors.Is(err, admission.ErrQueueFull) || errors.Is(err, admission.ErrDecodeQueueFull) {
			t.Fatalf("err = %v, want the prefill queue-full rejection while the seat's request is in prefill", err)
		}
		a.Release(admission.ReleaseCompleted) // prefill over: the decode now holds the seat
		synctest.Wait()
		mustWait(t, "b", b)
		if _, err := c.Acquire(bg, p.req("d", "")); !errors.Is(err, admission.ErrDecodeQueueFull) {
			t.Fatalf("err = %v, want a decode queue-full rejection once the seat's prefill is over", err)
		}
		a.Seat().Release(admission.ReleaseCompleted)
		synctest.Wait()
		r := mustDone(t, "b", b)
		if r.err != nil {
			t.Fatalf("b: %v, want a grant once the seat is free", r.err)
		}
		r.slot.Release(admission.ReleaseCompleted)
		r.slot.Seat().Release(admission.ReleaseCompleted)
	})
}

func TestPrefillSideRejectionUnchangedWithSeats(t *testing.T) {
	p := newPairPlacement([]string{"P0"}, []string{"D0", "D1"})
	c := mustNew(t, seatsOn(1, 4, 0), admission.Deps{})
	a, err := c.Acquire(bg, p.req("a", ""))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Acquire(bg, p.req("b", ""))
	if !errors.Is(err, admission.ErrQueueFull) || errors.Is(err, admission.ErrDecodeQueueFull) {
		t.Fatalf("err = %v, want the prefill queue-full rejection", err)
	}
	a.Release(admission.ReleaseCompleted)
	a.Seat().Release(admission.ReleaseCompleted)
}

// Decode seats alone (no prefill bound) turn admission on.
func TestSeatsAloneEnableAdmission(t *testing.T) {
	s := admission.Settings{QueueSize: 0, QueueTimeout: time.Second, DecodeMaxInflightPerWorker: 2}
	if !s.Enabled() || !s.SeatsOn() {
		t.Fatal("seats alone do not enable admission")
	}
	p := newPairPlacement([]string{"P0"}, []string{"D0"})
	c := mustNew(t, s, admission.Deps{})
	var held []*admission.Slot
	for range 2 {
		sl, err := c.Acquire(bg, p.req("x", ""))
		if err != nil {
			t.Fatal(err)
		}
		sl.Release(admission.ReleaseCompleted)
		held = append(held, sl)
	}
	if _, err := c.Acquire(bg, p.req("y", "")); !errors.Is(err, admission.ErrDecodeQueueFull) {
		t.Fatalf("third request: %v, want decode queue full", err)
	}
	for _, sl := range held {
		sl.Seat().Release(admission.ReleaseCompleted)
	}
	if _, err := c.Acquire(bg, p.req("z", "")); err != nil {
		t.Fatalf("after the seats were released: %v", err)
	}
}

func TestDecodeAutoWindowAndKVReservation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := seatsOn(0, 0, 10)
		s.MaxInflightPerWorker = 0
		s.DecodeAuto = true
		m := newSeatMetrics(0)
		p := newPairPlacement([]string{"P0"}, []string{"D0"})
		c := mustNew(t, s, admission.Deps{Metrics: m})
		c.SetDecodeCapacity("D0", admission.DecodeCapacity{Window: 2, KVTokens: 1000})
		big := func(id string, tokens int64) admission.Request {
			r := p.req(id, "")
			r.DecodeTokens = tokens
			return r
		}
		a, err := c.Acquire(bg, big("a", 600))
		if err != nil {
			t.Fatal(err)
		}
		// 600 + 600 > 1000: the KV reservation does not fit beside a.
		b := goAcquire(bg, c, big("b", 600))
		synctest.Wait()
		mustWait(t, "b (KV)", b)
		a.Seat().Release(admission.ReleaseCompleted)
		synctest.Wait()
		bs := mustAdmit(t, "b", b)
		// 600 + 300 fits; a third is over the window of 2.
		c2, err := c.Acquire(bg, big("c", 300))
		if err != nil {
			t.Fatal(err)
		}
		d := goAcquire(bg, c, big("d", 1))
		synctest.Wait()
		mustWait(t, "d (window)", d)
		if m.limits["D0"] != 2 {
			t.Fatalf("limit gauge %d, want 2", m.limits["D0"])
		}
		// A larger window, live, admits d at once.
		c.SetDecodeCapacity("D0", admission.DecodeCapacity{Window: 3, KVTokens: 1000})
		synctest.Wait()
		ds := mustAdmit(t, "d", d)
		for _, sl := range []*admission.Slot{a, bs, c2, ds} {
			sl.Release(admission.ReleaseCompleted)
			sl.Seat().Release(admission.ReleaseCompleted)
		}
		if got := c.Status().Seats["D0"]; got != 0 {
			t.Fatalf("seats %d at the end", got)
		}
	})
}

// Strict decode targets wait for their worker; a newcomer never overtakes.
func TestSeatStrictTargetWaitsFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPairPlacement([]string{"P0", "P1", "P2"}, []string{"D0", "D1"})
		c := mustNew(t, seatsOn(3, 1, 10), admission.Deps{})
		a, _ := c.Acquire(bg, p.req("a", "D0"))
		b := goAcquire(bg, c, p.req("b", "D0"))
		synctest.Wait()
		mustWait(t, "b (strict D0)", b)
		cc := goAcquire(bg, c, p.req("c", "")) // D1 is free, but b is ahead
		synctest.Wait()
		mustWait(t, "c behind b", cc)
		a.Seat().Release(admission.ReleaseCompleted)
		synctest.Wait()
		bs := mustAdmit(t, "b", b)
		cs := mustAdmit(t, "c", cc)
		if cs.Seat().Worker() != "D1" {
			t.Fatalf("c on %s, want D1", cs.Seat().Worker())
		}
		if got := p.pickIDs(); len(got) != 3 || got[1] != "b" || got[2] != "c" {
			t.Fatalf("admission order %v", got)
		}
		for _, sl := range []*admission.Slot{a, bs, cs} {
			sl.Release(admission.ReleaseCompleted)
			sl.Seat().Release(admission.ReleaseCompleted)
		}
	})
}

// A grant that races a cancellation gives the seat back too.
func TestSeatCancelledWaiterLeavesNoSeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPairPlacement([]string{"P0"}, []string{"D0"})
		c := mustNew(t, seatsOn(1, 1, 10), admission.Deps{})
		a, _ := c.Acquire(bg, p.req("a", ""))
		ctx, cancel := context.WithCancel(bg)
		b := goAcquire(ctx, c, p.req("b", ""))
		synctest.Wait()
		cancel()
		synctest.Wait()
		if r := mustDone(t, "b", b); !errors.Is(r.err, context.Canceled) {
			t.Fatalf("b: %v", r.err)
		}
		a.Release(admission.ReleaseCompleted)
		a.Seat().Release(admission.ReleaseCompleted)
		st := c.Status()
		if st.Seats["D0"] != 0 || st.Inflight["P0"] != 0 || st.QueuedTotal != 0 {
			t.Fatalf("left over: seats %v inflight %v queued %d", st.Seats, st.Inflight, st.QueuedTotal)
		}
	})
}

func TestRemoveWorkerForgetsRankSeats(t *testing.T) {
	m := newSeatMetrics(0)
	p := newPairPlacement([]string{"P0"}, []string{"http://d:1@0", "http://d:1@1"})
	c := mustNew(t, seatsOn(2, 1, 0), admission.Deps{Metrics: m})
	a, _ := c.Acquire(bg, p.req("a", ""))
	b, _ := c.Acquire(bg, p.req("b", ""))
	if a.Seat().Worker() != "http://d:1@0" || b.Seat().Worker() != "http://d:1@1" {
		t.Fatalf("seats on %s and %s, want one per rank", a.Seat().Worker(), b.Seat().Worker())
	}
	c.RemoveWorker("http://d:1")
	if st := c.Status(); len(st.Seats) != 0 {
		t.Fatalf("seats %v after RemoveWorker", st.Seats)
	}
	// Seats outliving their worker release harmlessly.
	a.Seat().Release(admission.ReleaseCompleted)
	b.Seat().Release(admission.ReleaseCompleted)
	a.Release(admission.ReleaseCompleted)
	b.Release(admission.ReleaseCompleted)
	if len(m.seatViol) > 0 || len(m.seats) != 0 {
		t.Fatalf("violations %v seats %v", m.seatViol, m.seats)
	}
}

// Retry-After of a decode rejection comes from the seat-release rate; any
// other error keeps RetryAfter's estimate.
func TestRetryAfterForSide(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPairPlacement([]string{"P0"}, []string{"D0"})
		c := mustNew(t, seatsOn(0, 1, 0), admission.Deps{})
		// 30 seats, each released 100 ms after its slot: both rates are
		// measured; a decode rejection must use the seats'.
		for range 30 {
			s, err := c.Acquire(bg, p.req("x", ""))
			if err != nil {
				t.Fatal(err)
			}
			s.Release(admission.ReleaseCompleted)
			time.Sleep(100 * time.Millisecond)
			s.Seat().Release(admission.ReleaseCompleted)
		}
		if c.Status().SeatReleaseRate <= 0 {
			t.Fatal("no seat release rate measured")
		}
		ra := c.RetryAfterFor(fmtErr(admission.ErrDecodeQueueFull))
		if ra < time.Second || ra > time.Minute {
			t.Fatalf("decode Retry-After %v outside [1s, timeout]", ra)
		}
		if got, want := c.RetryAfterFor(errUnexpected), c.RetryAfter(); got != want {
			t.Fatalf("non-decode Retry-After %v, want RetryAfter's %v", got, want)
		}
	})
}

func fmtErr(err error) error { return errors.Join(admission.ErrRejected, err) }

func TestDecodeKVKnown(t *testing.T) {
	c := mustNew(t, on(1, 0), admission.Deps{})
	c.SetDecodeCapacity("D0", admission.DecodeCapacity{KVTokens: 100})
	if c.DecodeKVKnown() {
		t.Fatal("KV known with seats off")
	}
	if err := c.Update(seatsOn(1, 2, 0)); err != nil {
		t.Fatal(err)
	}
	if !c.DecodeKVKnown() {
		t.Fatal("KV unknown with seats on and a capacity declared")
	}
	c.RemoveWorker("D0")
	if c.DecodeKVKnown() {
		t.Fatal("KV still known after its worker was removed")
	}
}
