package admission_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicegw/sluice/internal/admission"
)

type seatOpKind int

const (
	seatAcquire seatOpKind = iota
	seatReleaseSlot
	seatReleaseSeat
	seatCancel
	seatAdvance
	seatVeto
	seatUpdate
)

type seatOp struct {
	Kind   seatOpKind
	Index  int
	Target int // acquire: -1 any decode worker, else strict
	D      time.Duration
	Seats  int // update
	Mode   int // acquire: modePair, modeLocal or modeSpill
}

var propDecode = []string{"D0", "D1"}

func genSeatOp(withLocal bool) *rapid.Generator[seatOp] {
	kinds := []seatOpKind{seatAcquire, seatAcquire, seatAcquire, seatReleaseSlot, seatReleaseSeat, seatReleaseSeat,
		seatCancel, seatAdvance, seatVeto, seatUpdate}
	return rapid.Custom(func(t *rapid.T) seatOp {
		o := seatOp{Kind: rapid.SampledFrom(kinds).Draw(t, "kind")}
		switch o.Kind {
		case seatAcquire:
			o.Target = max(rapid.IntRange(-3, 1).Draw(t, "target"), -1)
			if withLocal {
				o.Mode = rapid.IntRange(modePair, modeSpill).Draw(t, "mode")
			}
		case seatReleaseSlot, seatReleaseSeat, seatCancel:
			o.Index = rapid.IntRange(0, 7).Draw(t, "index")
		case seatAdvance:
			o.D = rapid.SampledFrom([]time.Duration{100 * time.Millisecond, time.Second, 4 * time.Second}).Draw(t, "d")
		case seatVeto:
			o.Index = rapid.IntRange(0, len(propDecode)-1).Draw(t, "worker")
		case seatUpdate:
			o.Seats = rapid.IntRange(1, 3).Draw(t, "seats")
		}
		return o
	})
}

// TestPropertySeatInvariants extends the admission invariants to decode
// seats: random acquires (some strict on a decode worker), releases of slots
// and of seats in any order (each twice: exactly once must hold), cancels,
// time passing, engine vetoes flipping (lazily, like a breaker: no event)
// and live changes of the seat bound. After every step: no decode worker is
// granted a seat above its bound, the controller's seats and slots equal
// what the test holds, the queue holds exactly the blocked callers, pairs are
// granted in arrival order, and (unless a veto changed without an event) no
// head waits while a pair with a free slot and a free seat exists: no lost
// wake-up. A waiter refused (timeout, full queue) names the side that holds
// it back when it is refused. At the end every counter is 0.
func TestPropertySeatInvariants(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		seats := rapid.IntRange(1, 3).Draw(rt, "seats")
		size := rapid.IntRange(0, 4).Draw(rt, "size")
		ops := rapid.SliceOfN(genSeatOp(false), 1, 50).Draw(rt, "ops")
		var problems []string
		synctest.Test(t, func(t *testing.T) {
			problems = runSeatProperty(seats, size, ops)
		})
		if len(problems) > 0 {
			rt.Fatalf("invariants broken:\n%v", problems)
		}
	})
}

// TestPropertySeatOnlyInvariants is TestPropertySeatInvariants with
// seat-only grants mixed in (local prefill): requests that always take a
// decode seat alone, and requests that take one alone when no prefill slot
// is free. The same invariants hold: no seat above the bound, slots and
// seats equal what the test holds (a seat-only grant holds no slot, and
// releasing its slot changes nothing), grants in arrival order (a seat-only
// request never overtakes a waiter), and no head waits while what it needs
// (a seat, or a slot and a seat) is free.
func TestPropertySeatOnlyInvariants(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		seats := rapid.IntRange(1, 3).Draw(rt, "seats")
		size := rapid.IntRange(0, 4).Draw(rt, "size")
		ops := rapid.SliceOfN(genSeatOp(true), 1, 50).Draw(rt, "ops")
		var problems []string
		synctest.Test(t, func(t *testing.T) {
			problems = runSeatProperty(seats, size, ops)
		})
		if len(problems) > 0 {
			rt.Fatalf("invariants broken:\n%v", problems)
		}
	})
}

type seatHeld struct {
	slot                *admission.Slot
	slotDone, seatDone  bool
	prefill, decodeWork string
}

func runSeatProperty(seats, size int, ops []seatOp) (problems []string) {
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	const prefillLimit = 2
	settings := func(seats int) admission.Settings {
		s := seatsOn(prefillLimit, seats, size)
		s.QueueTimeout = propTimeout
		return s
	}
	m := newSeatMetrics(seats)
	m.setLimit(prefillLimit)
	p := newPairPlacement([]string{"P0", "P1"}, propDecode)
	last := 0
	var fifo []string
	p.onPick = func(id string) {
		var n int
		if _, err := fmt.Sscanf(id, "r%d", &n); err != nil || n <= last {
			fifo = append(fifo, fmt.Sprintf("pair for %s granted after r%d", id, last))
		}
		last = n
	}
	c, err := admission.New(settings(seats), admission.Deps{Metrics: m})
	if err != nil {
		return []string{err.Error()}
	}
	curSeats, dirty := seats, false
	targets := map[string]string{}
	modes := map[string]int{}
	var pending []propWaiter
	var held []*seatHeld
	seq := 0

	// refused are the waiters a step's collect found refused (timeouts, full
	// queues), and granted how many it found granted.
	type refusal struct {
		id  string
		err error
	}
	var refused []refusal
	granted := 0
	collect := func(step int) {
		synctest.Wait()
		refused, granted = refused[:0], 0
		kept := pending[:0]
		for _, w := range pending {
			r, ok := done(w.ch)
			if !ok {
				kept = append(kept, w)
				continue
			}
			w.cancel()
			switch {
			case r.err == nil:
				granted++
				if r.slot.Seat() == nil {
					fail("step %d: %s admitted without a seat", step, w.id)
					continue
				}
				if tg := targets[w.id]; tg != "" && r.slot.Seat().Worker() != tg {
					fail("step %d: %s strict on %s got a seat on %s", step, w.id, tg, r.slot.Seat().Worker())
				}
				if r.slot.SeatOnly() != (r.slot.Worker() == "") || (r.slot.SeatOnly() && modes[w.id] == modePair) {
					fail("step %d: %s (mode %d) got prefill %q, seat only %v", step, w.id, modes[w.id], r.slot.Worker(), r.slot.SeatOnly())
				}
				// A seat-only grant holds no slot: its slot counts as released from the start.
				held = append(held, &seatHeld{slot: r.slot, prefill: r.slot.Worker(), decodeWork: r.slot.Seat().Worker(), slotDone: r.slot.SeatOnly()})
			case admission.OutcomeOf(r.err) == admission.Unavailable:
				fail("step %d: %s: unexpected error %v", step, w.id, r.err)
			case errors.Is(r.err, admission.ErrRejected):
				refused = append(refused, refusal{w.id, r.err})
			}
		}
		pending = kept
	}
	check := func(step int) {
		st := c.Status()
		if st.QueuedTotal != len(pending) {
			fail("step %d: queued %d, but %d callers are blocked", step, st.QueuedTotal, len(pending))
		}
		slots, seatsHeld := map[string]int{}, map[string]int{}
		for _, h := range held {
			if !h.slotDone {
				slots[h.prefill]++
			}
			if !h.seatDone {
				seatsHeld[h.decodeWork]++
			}
		}
		for _, w := range []string{"P0", "P1"} {
			if st.Inflight[w] != slots[w] {
				fail("step %d: slots on %s = %d, held %d", step, w, st.Inflight[w], slots[w])
			}
		}
		for w, n := range st.Inflight {
			if w != "P0" && w != "P1" && n != 0 {
				fail("step %d: %d slots on %q, not a prefill worker", step, n, w)
			}
		}
		for _, d := range propDecode {
			if st.Seats[d] != seatsHeld[d] {
				fail("step %d: seats on %s = %d, held %d", step, d, st.Seats[d], seatsHeld[d])
			}
		}
		if dirty || len(pending) == 0 {
			return
		}
		head := pending[0].id
		slotFree := slots["P0"] < prefillLimit || slots["P1"] < prefillLimit
		for _, d := range propDecode {
			if tg := targets[head]; tg != "" && tg != d {
				continue
			}
			p.mu.Lock()
			vetoed := p.vetoed[d]
			p.mu.Unlock()
			if (slotFree || modes[head] != modePair) && !vetoed && seatsHeld[d] < curSeats {
				fail("step %d: head %s waits while P has a slot and %s a seat", step, head, d)
			}
		}
	}

	// sideOf is the side that holds request id back in the held state, as the
	// fake placement answers (decode first): decode when no decode worker it
	// may use has a seat, unless some decode worker is full only with seats
	// whose requests are still in prefill; prefill when it has a seat but no
	// prefill worker has a slot. ok is false when both are free (it waits
	// for the waiters ahead) or it needs no slot.
	sideOf := func(id string) (side string, ok bool) {
		slots, seatsHeld, prefilling := map[string]int{}, map[string]int{}, map[string]int{}
		for _, h := range held {
			if !h.slotDone {
				slots[h.prefill]++
			}
			if !h.seatDone {
				seatsHeld[h.decodeWork]++
				if !h.slotDone {
					prefilling[h.decodeWork]++
				}
			}
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, d := range propDecode {
			if tg := targets[id]; (tg == "" || tg == d) && !p.vetoed[d] && seatsHeld[d] < curSeats {
				if modes[id] != modePair || slots["P0"] < prefillLimit || slots["P1"] < prefillLimit {
					return "", false
				}
				return "prefill", true
			}
		}
		for _, d := range propDecode {
			if prefilling[d] > 0 && seatsHeld[d] >= curSeats && seatsHeld[d]-prefilling[d] < curSeats {
				return "prefill", true
			}
		}
		return "decode", true
	}

	for i, o := range ops {
		stable := !dirty // no head could be granted at the start of the step
		switch o.Kind {
		case seatAcquire:
			seq++
			id := fmt.Sprintf("r%d", seq)
			if o.Target >= 0 {
				targets[id] = propDecode[o.Target]
			}
			ctx, cancel := context.WithCancel(bg)
			modes[id] = o.Mode
			pending = append(pending, propWaiter{id: id, ch: goAcquire(ctx, c, p.reqMode(id, targets[id], o.Mode)), cancel: cancel})
		case seatReleaseSlot:
			if len(held) > 0 {
				h := held[o.Index%len(held)]
				h.slot.Release(admission.ReleaseCompleted)
				h.slot.Release(admission.ReleaseFailed)
				if !h.slotDone {
					dirty = false // a real release lets every head select; a repeated one is a no-op
				}
				h.slotDone = true
			}
		case seatReleaseSeat:
			if len(held) > 0 {
				h := held[o.Index%len(held)]
				h.slot.Seat().Release(admission.ReleaseCompleted)
				h.slot.Seat().Release(admission.ReleaseCancelled)
				if !h.seatDone {
					dirty = false
				}
				h.seatDone = true
			}
		case seatCancel:
			if len(pending) > 0 {
				pending[o.Index%len(pending)].cancel()
			}
		case seatAdvance:
			time.Sleep(o.D)
			if o.D >= time.Second {
				dirty = false // the head polled
			}
		case seatVeto:
			d := propDecode[o.Index]
			p.mu.Lock()
			p.vetoed[d] = !p.vetoed[d]
			p.mu.Unlock()
			dirty = true // engine load changes without an event
		case seatUpdate:
			m.smu.Lock()
			m.bound = o.Seats
			m.smu.Unlock()
			if err := c.Update(settings(o.Seats)); err != nil {
				fail("step %d: Update: %v", i, err)
			}
			curSeats, dirty = o.Seats, false
		}
		// Drop holders done with both.
		kept := held[:0]
		for _, h := range held {
			if !h.slotDone || !h.seatDone {
				kept = append(kept, h)
			}
		}
		held = kept
		collect(i)
		// A refusal names the side that holds the request back when it is
		// refused (issue #32 point 3), not the one met when it joined. Only
		// where the state is known throughout the step: no grant, no release.
		if stable && granted == 0 && (o.Kind == seatAdvance || o.Kind == seatAcquire) {
			for _, r := range refused {
				got := "prefill"
				if errors.Is(r.err, admission.ErrDecodeQueueTimeout) || errors.Is(r.err, admission.ErrDecodeQueueFull) {
					got = "decode"
				}
				if want, ok := sideOf(r.id); ok && got != want {
					fail("step %d: %s refused as %v (%s side), but %s holds it back", i, r.id, r.err, got, want)
				}
			}
		}
		check(i)
	}
	for _, w := range pending {
		w.cancel()
	}
	collect(len(ops))
	if len(pending) != 0 {
		fail("%d callers still blocked after cancellation", len(pending))
	}
	for _, h := range held {
		h.slot.Release(admission.ReleaseCompleted)
		h.slot.Seat().Release(admission.ReleaseCompleted)
		h.slotDone, h.seatDone = true, true
	}
	held = nil
	check(len(ops))
	problems = append(problems, m.snapshot().violations...)
	m.smu.Lock()
	problems = append(problems, m.seatViol...)
	for w, n := range m.seats {
		if n != 0 {
			fail("seat gauge on %s = %d at the end", w, n)
		}
	}
	m.smu.Unlock()
	p.mu.Lock()
	problems = append(problems, fifo...)
	p.mu.Unlock()
	return problems
}
