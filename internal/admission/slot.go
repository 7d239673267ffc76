package admission

import (
	"fmt"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// ReleaseReason says why a holder let go of a slot; it is recorded on the
// slot span.
type ReleaseReason uint8

const (
	// ReleaseCompleted: the prefill response was fully read.
	ReleaseCompleted ReleaseReason = iota
	// ReleaseFailed: the prefill leg failed (HTTP or transport error).
	ReleaseFailed
	// ReleaseCancelled: the client went away or the other leg failed.
	ReleaseCancelled
	// ReleaseRetry: the attempt failed and will be retried; the retry goes
	// through admission again.
	ReleaseRetry
	numReleaseReasons
)

var releaseReasonNames = [numReleaseReasons]string{"completed", "failed", "cancelled", "retry"}

func (r ReleaseReason) String() string {
	if r < numReleaseReasons {
		return releaseReasonNames[r]
	}
	return fmt.Sprintf("release_reason(%d)", uint8(r))
}

// Slot is the admission of one client request on one worker. However many
// prefill sub-requests the client request fans out to (n > 1, batches), it
// takes one slot; each sub-request holds a [Guard] and the slot is freed
// when the last holder releases.
//
// Callers must release on every path, including panics: take guards and
// `defer g.Release(...)` right after. Every Release is exactly-once: later
// calls are no-ops, so a deferred Release after an explicit one is safe.
type Slot struct {
	c      *Controller
	worker string
	// ws is the worker's counter at grant time; nil when the slot was
	// granted with admission off (nothing to give back). A release only
	// decrements if ws is still the registered counter for worker, so slots
	// outliving RemoveWorker release harmlessly.
	ws *workerState
	// cost is the tokens charged on ws; granted the grant time (adaptive
	// limits only). Both are fixed at the grant.
	cost    int64
	granted time.Time

	holders atomic.Int32
	// reason keeps the first abnormal release reason (+1; 0 = none yet), so
	// a failed sub-request is not hidden by a sibling that completed last.
	reason atomic.Uint32
	span   trace.Span // nil without a tracer

	first Guard // the holder returned by Acquire
	// seat is the decode seat granted with the slot (decode seats on, pair
	// selection); nil otherwise. Fixed at the grant.
	seat *Seat
}

// Guard is one holder of a [Slot].
type Guard struct {
	s        *Slot
	released atomic.Bool
}

func newSlot(c *Controller, worker string, ws *workerState) *Slot {
	s := &Slot{c: c, worker: worker, ws: ws}
	s.first.s = s
	s.holders.Store(1)
	return s
}

// Worker returns the key (URL) of the worker the slot is on.
func (s *Slot) Worker() string { return s.worker }

// Seat returns the decode seat granted with the slot, or nil (seats off, or
// a prefill-only selection). The seat is released on its own, when the
// decode leg ends; releasing the slot leaves it held.
func (s *Slot) Seat() *Seat {
	if s == nil {
		return nil
	}
	return s.seat
}

// Guard adds a holder, typically one per prefill sub-request. The slot stays
// held until every guard and the slot itself are released. A guard taken
// after the slot was already freed is inert (its Release does nothing).
func (s *Slot) Guard() *Guard {
	for {
		n := s.holders.Load()
		if n <= 0 {
			g := &Guard{s: s}
			g.released.Store(true)
			return g
		}
		if s.holders.CompareAndSwap(n, n+1) {
			return &Guard{s: s}
		}
	}
}

// Release lets go of the holder returned by Acquire. It is exactly-once and
// nil-safe.
func (s *Slot) Release(reason ReleaseReason) {
	if s == nil {
		return
	}
	s.first.Release(reason)
}

// Release lets go of this holder; the last holder frees the slot. It is
// exactly-once and nil-safe.
func (g *Guard) Release(reason ReleaseReason) {
	if g == nil || !g.released.CompareAndSwap(false, true) {
		return
	}
	s := g.s
	if reason != ReleaseCompleted {
		s.reason.CompareAndSwap(0, uint32(reason)+1)
	}
	if s.holders.Add(-1) != 0 {
		return
	}
	if r := s.reason.Load(); r != 0 {
		reason = ReleaseReason(r - 1)
	}
	// The span ends first: once the slot is back, a waiter may be granted it
	// and end its own wait span, which must not precede this one.
	if s.span != nil {
		if s.span.IsRecording() {
			s.span.SetAttributes(attribute.String(attrReleaseReason, reason.String()))
		}
		s.span.End()
	}
	if s.ws != nil {
		s.c.releaseSlot(s, reason)
	}
}
