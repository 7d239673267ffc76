package admission

import (
	"errors"
	"fmt"
	"strings"
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
	s.c.releaseSeat(s)
	if s.span != nil {
		s.span.SetAttributes(attribute.String(attrReleaseReason, reason.String()))
		s.span.End()
	}
}

// seatsOnLocked reports whether decode seats are held for pair selections.
func (c *Controller) seatsOnLocked() bool { return c.settings.SeatsOn() }

// seatLimitLocked is a decode worker's seat bound (<= 0: none): its declared
// or reported window with DecodeAuto, else DecodeMaxInflightPerWorker.
func (c *Controller) seatLimitLocked(worker string) int {
	if c.settings.DecodeAuto {
		if dc, ok := c.decCap[worker]; ok && dc.Window > 0 {
			return dc.Window
		}
	}
	return c.settings.DecodeMaxInflightPerWorker
}

// hasSeatLocked reports whether a request reserving decode tokens fits on decode worker:
// under its seat bound and, when its KV capacity is known, with room for the
// request's reservation (prompt + max_tokens), or alone on an idle worker so
// a large request is never starved.
func (c *Controller) hasSeatLocked(worker string, decode int64) bool {
	ss := c.seats[worker]
	n, tokens := 0, int64(0)
	if ss != nil {
		n, tokens = ss.inflight, ss.tokens
	}
	if limit := c.seatLimitLocked(worker); limit > 0 && n >= limit {
		return false
	}
	if !c.seatCapAllowsLocked(worker, n) {
		return false
	}
	if kv := c.decCap[worker].KVTokens; kv > 0 && n > 0 && tokens+max(decode, 1) > kv {
		return false
	}
	return true
}

// grantSeatLocked reserves a seat on decode worker for a request reserving
// decode tokens.
func (c *Controller) grantSeatLocked(worker string, decode int64) *Seat {
	ss := c.seats[worker]
	if ss == nil {
		ss = &seatState{}
		c.seats[worker] = ss
	}
	cost := max(decode, 1)
	ss.inflight++
	ss.tokens += cost
	ss.prefilling++
	c.dm.SetSeats(worker, ss.inflight)
	c.showSeatLimitLocked(worker, ss)
	return &Seat{c: c, worker: worker, ss: ss, cost: cost, prefilling: true}
}

// showSeatLimitLocked reports decode worker's seat bound to the metrics when it differs from the
// one last reported for ss (a settings change shows at the next grant, as before).
func (c *Controller) showSeatLimitLocked(worker string, ss *seatState) {
	if l := c.seatLimitLocked(worker); !ss.limitShown || ss.shownLimit != l {
		ss.shownLimit, ss.limitShown = l, true
		c.dm.SetSeatLimit(worker, l)
	}
}

// endPrefillLocked records that a seat's request no longer holds its prefill
// slot (the slot was freed, or the seat went first); once per seat.
func (c *Controller) endPrefillLocked(s *Seat) {
	if s == nil || !s.prefilling {
		return
	}
	s.prefilling = false
	if s.ss != nil && c.seats[s.worker] == s.ss {
		s.ss.prefilling--
	}
}

// fullByPrefillLocked reports whether some decode worker is out of seats only
// because requests still in prefill hold them: without those it would have a
// seat. The decode then waits for the prefills ahead, so a head held back
// there is held back by prefill, and its rejection names prefill (a seat is
// held from the pair's choice, so in a prefill-bound pipeline the seats fill
// with requests that have not reached the decode yet).
func (c *Controller) fullByPrefillLocked() bool {
	for k, ss := range c.seats {
		if ss.prefilling == 0 {
			continue
		}
		if limit := c.seatLimitLocked(k); limit > 0 && ss.inflight >= limit && ss.inflight-ss.prefilling < limit {
			return true
		}
	}
	return false
}

// giveBackSeatLocked decrements the seat's worker unless it was removed (or
// removed and re-added) since the grant.
func (c *Controller) giveBackSeatLocked(s *Seat) bool {
	c.endPrefillLocked(s)
	if s.ss == nil || c.seats[s.worker] != s.ss {
		return false
	}
	s.ss.inflight--
	s.ss.tokens -= s.cost
	c.dm.SetSeats(s.worker, s.ss.inflight)
	return true
}

// releaseSeat frees a seat and lets the heads select: a freed seat may be
// what the head of a queue waits for.
func (c *Controller) releaseSeat(s *Seat) {
	c.mu.Lock()
	if c.giveBackSeatLocked(s) {
		c.seatReleases.observe(c.now())
	}
	if c.queued > 0 {
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
	if c.decCap[worker] == dc {
		return
	}
	if dc == (DecodeCapacity{}) {
		delete(c.decCap, worker)
	} else {
		c.decCap[worker] = dc
	}
	c.noteKVKnownLocked()
	if ss, ok := c.seats[worker]; ok {
		c.showSeatLimitLocked(worker, ss)
	}
	if c.queued > 0 {
		c.dispatchAllLocked()
	}
}

// DecodeKVKnown reports whether decode seats are on and some decode worker's KV capacity is known,
// i.e. whether a request's DecodeTokens can matter: callers may skip computing it otherwise. It takes
// no lock.
func (c *Controller) DecodeKVKnown() bool { return c.kvKnown.Load() }

// noteKVKnownLocked recomputes DecodeKVKnown after a change of settings or capacities.
func (c *Controller) noteKVKnownLocked() {
	known := false
	if c.settings.SeatsOn() {
		for _, v := range c.decCap {
			known = known || v.KVTokens > 0
		}
	}
	c.kvKnown.Store(known)
}

// removeSeatsLocked forgets the seats and capacity of engine url and of its
// rank views (url@rank): seats still held on them release without effect.
func (c *Controller) removeSeatsLocked(url string) {
	for k := range c.seats {
		if k == url || strings.HasPrefix(k, url+"@") {
			delete(c.seats, k)
			c.dm.DeleteSeatWorker(k)
		}
	}
	for k := range c.decCap {
		if k == url || strings.HasPrefix(k, url+"@") {
			delete(c.decCap, k)
		}
	}
	c.noteKVKnownLocked()
}

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
		c.endPrefillLocked(s.seat) // no prefill slot holds it: a full decode is decode's doing
		return s
	}
	s := c.grantLocked(sel.prefill, c.chargeLocked(&c.probe, sel.prefill))
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
func (c *Controller) selectLocked(a ask, enabled bool) selection {
	pb := &c.probe
	if a.pair != nil && enabled && c.seatsOnLocked() {
		p, d, err := callSelectPair(a.pair, pb.hasSlot, pb.hasSeat)
		if err == nil && p != "" && !c.hasSlotLocked(pb, p) {
			err = ErrNoCapacity
		}
		if err == nil && !c.hasSeatLocked(d, a.cost.decode) {
			err = ErrNoSeat
		}
		return selection{prefill: p, decode: d, err: err}
	}
	hasCap := pb.hasSlot
	if !enabled {
		hasCap = alwaysCapacity
	}
	w, err := callSelect(a.sel, hasCap)
	if err == nil && enabled && !c.hasSlotLocked(pb, w) {
		err = ErrNoCapacity
	}
	return selection{prefill: w, err: err}
}

// sideOfLocked is the side a no-capacity error names: decode when no decode
// worker had a seat, unless seats are only full with requests still in
// prefill (fullByPrefillLocked).
func (c *Controller) sideOfLocked(err error) Side {
	if errors.Is(err, ErrNoSeat) && !c.fullByPrefillLocked() {
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
	hit := c.caps.hit // the probe's refusals are no cap's doing for the request
	c.probe.bind(a.cost)
	seatFree, slotFree := false, false
	noSeat := func(worker string) bool {
		seatFree = seatFree || c.hasSeatLocked(worker, a.cost.decode)
		return false
	}
	hasSlot := func(worker string) bool {
		ok := c.hasSlotLocked(&c.probe, worker)
		slotFree = slotFree || ok
		return ok
	}
	_, _, err := callSelectPair(a.pair, hasSlot, noSeat)
	c.probe.unbind()
	c.caps.hit = hit
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
