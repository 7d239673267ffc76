package admission

import (
	"errors"
	"fmt"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Decode seats (DESIGN.md §3b): prefill and decode are a tandem queue, so with
// a decode bound the gate also holds a seat on the decode worker of each PD
// request. The seat is chosen with the prefill slot in one selection under the
// controller's lock ([Request.SelectPair]) and released, exactly once, when the
// decode leg ends, independently of the slot.

// Side names the half of the pipeline that held a request back.
type Side uint8

const (
	// SidePrefill: no prefill worker had a slot (the source contract).
	SidePrefill Side = iota
	// SideDecode: a prefill slot was free but no compatible decode worker
	// had a seat (or KV room for the reservation).
	SideDecode
)

func (s Side) String() string {
	if s == SideDecode {
		return "decode"
	}
	return "prefill"
}

// DecodeCapacity is what one decode worker (a DP rank where ranks are known)
// is known to hold: its running window (the engine's own bound on running
// requests, e.g. SGLang's max_running_requests per rank) and its KV capacity
// in tokens. Zero fields are unknown.
type DecodeCapacity struct {
	Window   int
	KVTokens int64
}

type seatState struct {
	inflight   int
	tokens     int64 // decode KV reservations of the seats held
	prefilling int   // seats whose request still holds its prefill slot
	// shownLimit is the seat bound last given to DecodeMetrics.SetSeatLimit (when limitShown): a
	// grant reports the bound only when it changed, a label lookup less per request.
	shownLimit int
	limitShown bool
	gone       bool // the worker was removed: see workerState.gone
}

// Seat is the admission of one PD request on one decode worker. It is held
// until the decode leg ends and released exactly once (later calls no-op).
type Seat struct {
	c      *Controller
	worker string
	ss     *seatState // the worker's state at grant time; see Slot.ws
	cost   int64
	// prefilling: the request still holds its prefill slot (guarded by the
	// controller's mutex); such a seat makes a full decode the prefill's doing.
	prefilling bool

	released atomic.Bool
	span     trace.Span // nil without a tracer
}

// Worker returns the key of the decode worker the seat is on.
func (s *Seat) Worker() string { return s.worker }

// Release gives the seat back; exactly-once and nil-safe.
func (s *Seat) Release(reason ReleaseReason) {
	if s == nil || !s.released.CompareAndSwap(false, true) {
		return
	}
	if s.span != nil { // first, as a slot's (Guard.Release)
		if s.span.IsRecording() {
			s.span.SetAttributes(attribute.String(attrReleaseReason, reason.String()))
		}
		s.span.End()
	}
	s.c.releaseSeat(s)
}

// seatsOnLocked reports whether decode seats are held for pair selections.
func (c *Controller) seatsOnLocked() bool { return c.settings.SeatsOn() }

// grantSeatLocked reserves a seat on decode worker for a request reserving
// decode tokens.
func (c *Controller) grantSeatLocked(worker string, decode int64) *Seat {
	ss, cost := c.gate.takeSeat(worker, decode)
	return &Seat{c: c, worker: worker, ss: ss, cost: cost, prefilling: true}
}

// releaseSeat frees a seat and lets the heads select: a freed seat may be
// what the head of a queue waits for.
func (c *Controller) releaseSeat(s *Seat) {
	c.mu.Lock()
	if c.gate.giveBackSeat(s) {
		c.stats.seatReleases.observe(c.now())
	}
	if c.qs.n > 0 {
		c.dispatchAllLocked()
	}
	c.mu.Unlock()
}

// SetDecodeCapacity records what decode worker (its key: URL, or URL@rank) is
// known to hold: its window (used with Settings.DecodeAuto) and its KV
// capacity in tokens (the decode KV reservation's bound). A zero value
// forgets it. Heads select again, since a larger window may admit them.
func (c *Controller) SetDecodeCapacity(worker string, dc DecodeCapacity) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gate.setDecodeCapacity(worker, dc) && c.qs.n > 0 {
		c.dispatchAllLocked()
	}
}

// DecodeKVKnown reports whether decode seats are on and some decode worker's KV capacity is known,
// i.e. whether a request's DecodeTokens can matter: callers may skip computing it otherwise. It takes
// no lock.
func (c *Controller) DecodeKVKnown() bool { return c.gate.kvKnown.Load() }

// callSelectPair runs the pair callback with the same panic recovery as
// callSelect.
func callSelectPair(sel func(hasSlot, hasSeat func(string) bool) (string, string, error), hasSlot, hasSeat func(string) bool) (prefill, decode string, err error) {
	defer func() {
		if r := recover(); r != nil {
			prefill, decode, err = "", "", fmt.Errorf("admission: SelectPair panicked: %v", r)
		}
	}()
	prefill, decode, err = sel(hasSlot, hasSeat)
	if err == nil && decode == "" {
		err = errEmptyWorker // an empty prefill alone is a seat-only grant
	}
	return prefill, decode, err
}

// Seat-only grants (local prefill, DESIGN.md §3b): SelectPair may return an
// empty prefill worker with a decode worker when the decode worker computes
// the request alone (a vLLM kv_both engine prefills it itself). The request
// then takes a seat there and no prefill slot: chosen under the same lock by
// the same head-only FIFO selection as a pair, so it never overtakes a
// waiter, and its seat is released exactly once like any other. The Slot
// Acquire returns holds nothing (Worker is "", its Release only ends its
// span); SeatOnly reports it.

// SeatOnly reports a seat-only grant: the slot holds no prefill slot, only
// its Seat.
func (s *Slot) SeatOnly() bool { return s != nil && s.worker == "" && s.seat != nil }

// SeatsOn reports whether admission is on with decode seats: whether a pair
// selection (and so a seat-only grant) can run. It takes the lock.
func (c *Controller) SeatsOn() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.settings.Enabled() && c.seatsOnLocked()
}

// grantSelLocked grants what a selection chose: a slot on its prefill worker
// and, with a decode worker, a seat there; a seat-only selection gets the
// seat and a slot that holds nothing.
func (c *Controller) grantSelLocked(sel selection, cst cost) *Slot {
	if sel.prefill == "" {
		s := newSlot(c, "", nil)
		s.seat = c.grantSeatLocked(sel.decode, cst.decode)
		c.gate.endPrefill(s.seat) // no prefill slot holds it: a full decode is decode's doing
		return s
	}
	s := c.grantLocked(sel.prefill, c.gate.charge(sel.prefill))
	if sel.decode != "" {
		s.seat = c.grantSeatLocked(sel.decode, cst.decode)
	}
	return s
}

// selection is one run of a request's placement callback.
type selection struct {
	prefill, decode string // decode is "" without a seat
	err             error
}

// selectLocked runs the request's callback: the pair selection when seats
// are on and the request has one, otherwise the prefill-only Select exactly
// as without seats. With admission on it re-checks the callback's choice
// (one ignoring its predicates waits, as if it had found nothing).
func (c *Controller) selectLocked(a *ask, enabled bool) selection {
	g := &c.gate
	if a.pair != nil && enabled && c.seatsOnLocked() {
		p, d, err := callSelectPair(a.pair, g.probe.hasSlot, g.probe.hasSeat)
		if err == nil && p != "" && !g.hasChosen(p) {
			err = ErrNoCapacity
		}
		if err == nil && !g.hasSeat(d, a.cost.decode) {
			err = ErrNoSeat
		}
		return selection{prefill: p, decode: d, err: err}
	}
	hasCap := g.probe.hasSlot
	if !enabled {
		hasCap = alwaysCapacity
	}
	w, err := callSelect(a.sel, hasCap)
	if err == nil && enabled && !g.hasChosen(w) {
		err = ErrNoCapacity
	}
	return selection{prefill: w, err: err}
}

// sideOfLocked is the side a no-capacity error names: decode when no decode
// worker had a seat, unless seats are only full with requests still in
// prefill (gate.fullByPrefill).
func (c *Controller) sideOfLocked(err error) Side {
	if errors.Is(err, ErrNoSeat) && !c.gate.fullByPrefill() {
		return SideDecode
	}
	return SidePrefill
}

// sideNowLocked is the side that holds a request back now, at its refusal
// (a timeout, a displacement, a full queue or a predicted timeout behind
// waiters), for a request of queue q asking a. A waiter's side is otherwise only what
// held it back at its last try, and only the head tries: a waiter that
// joined while prefill was full keeps naming prefill after the prefills
// are over and the decode is full, so its rejection would send an operator
// to scale the wrong pool.
//
// It runs the pair selection once as a probe in which no decode worker has
// a seat (so, as the SelectPair contract asks, no stateful prefill policy
// runs and nothing is picked), recording whether one really had a seat and
// whether a prefill worker it asked about had a slot:
//
//   - ErrNoSeat and no decode worker really had a seat: decode (unless the
//     seats are full only with requests still in prefill: sideOfLocked);
//   - ErrNoCapacity alone, or a decode worker had a seat and no prefill
//     worker was seen with a slot: prefill;
//   - otherwise (a seat and a slot both free: it waits only for the
//     waiters ahead; a final error): q's side, what held its head back at
//     its last try.
//
// With seats off, or without a pair selection, it is old, the side known
// so far, as before.
func (c *Controller) sideNowLocked(q *queue, a ask, old Side) Side {
	if a.pair == nil || !c.settings.Enabled() || !c.seatsOnLocked() {
		return old
	}
	fallback := old
	if q != nil {
		fallback = q.side
	}
	g := &c.gate
	hit := g.caps.hit // the probe's refusals are no cap's doing for the request
	g.probe.bind(a.cost)
	seatFree, slotFree := false, false
	noSeat := func(worker string) bool {
		seatFree = seatFree || g.hasSeat(worker, a.cost.decode)
		return false
	}
	hasSlot := func(worker string) bool {
		ok := g.hasSlot(worker)
		slotFree = slotFree || ok
		return ok
	}
	_, _, err := callSelectPair(a.pair, hasSlot, noSeat)
	g.probe.unbind()
	g.caps.hit = hit
	switch {
	case errors.Is(err, ErrNoSeat) && !seatFree:
		return c.sideOfLocked(err)
	case errors.Is(err, ErrNoCapacity) && !errors.Is(err, ErrNoSeat):
		return SidePrefill
	case errors.Is(err, ErrNoSeat) && !slotFree:
		return SidePrefill
	}
	return fallback
}

// sideOfWaiterLocked is sideNowLocked for a waiter still in its queue.
func (c *Controller) sideOfWaiterLocked(w *waiter) Side {
	return c.sideNowLocked(w.q, w.ask, w.side)
}
