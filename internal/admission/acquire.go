package admission

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Acquire admits one client request: it returns a slot on the worker Select
// chose, or an error whose class tells why not (see [OutcomeOf]). It may
// wait up to QueueTimeout. The caller must release the slot exactly once
// when prefill ends (see [Slot]).
func (c *Controller) Acquire(ctx context.Context, req Request) (*Slot, error) {
	if req.Select == nil {
		return nil, errNilSelect
	}
	if !c.enabled.Load() {
		if c.draining.Load() {
			return nil, errShuttingDown
		}
		return c.acquireOff(ctx, req)
	}
	if c.tracer == nil {
		slot, _, err := c.acquire(ctx, &req, nil)
		return slot, err
	}
	// Attributes are set only on a recording span: each is an allocation, for the requests whose
	// trace is not sampled too.
	_, span := c.tracer.Start(ctx, spanWait)
	var limited bool
	slot, info, err := c.acquire(ctx, &req, &limited)
	if span.IsRecording() {
		annotateWait(span, &req, slot, info, limited, err)
	}
	if slot != nil {
		slot.span = c.startHeld(ctx, spanSlot, slot.worker)
		if st := slot.seat; st != nil {
			st.span = c.startHeld(ctx, spanSeat, st.worker)
		}
	}
	span.End()
	return slot, err
}

// annotateWait describes the wait's outcome on its span.
func annotateWait(span trace.Span, req *Request, slot *Slot, info acquireInfo, limited bool, err error) {
	span.SetAttributes(
		attribute.String(attrQueue, req.Queue),
		attribute.String(attrOutcome, OutcomeOf(err).String()),
		attribute.Int(attrQueuePosition, info.pos))
	if limited {
		span.SetAttributes(shareLimitedAttr())
	}
	if info.band != "" {
		span.SetAttributes(attribute.String(attrBand, info.band))
	}
	if info.tokens {
		span.SetAttributes(attribute.Int64(attrTokens, max(req.Tokens, 1)))
	}
	if info.sideKnown {
		span.SetAttributes(attribute.String(attrSide, info.side.String()))
	}
	if slot != nil {
		span.SetAttributes(attribute.String(attrWorker, slot.worker))
		if st := slot.seat; st != nil {
			span.SetAttributes(attribute.String(attrDecodeWorker, st.worker))
		}
	}
}

// startHeld starts the span of a held slot or seat on worker.
func (c *Controller) startHeld(ctx context.Context, name, worker string) trace.Span {
	_, span := c.tracer.Start(ctx, name)
	if span.IsRecording() {
		span.SetAttributes(attribute.String(attrSlotWorker, worker))
	}
	return span
}

func alwaysCapacity(string) bool { return true }
func neverCapacity(string) bool  { return false }

// acquireOff is the admission-off path: no lock, no queue, no counters.
func (c *Controller) acquireOff(ctx context.Context, req Request) (*Slot, error) {
	if ctx.Err() != nil {
		return nil, cancelled(ctx)
	}
	worker, err := callSelect(req.Select, alwaysCapacity)
	switch {
	case err == nil:
		return newSlot(c, worker, nil), nil
	case errors.Is(err, ErrNoCapacity):
		// No queue exists to wait in.
		return nil, errQueueFull
	default:
		return nil, err
	}
}

// acquireInfo is what the wait span reports: the queue position at entry
// (1 = head; 0 when the request did not queue), the band's name (with bands
// configured) and whether a token budget applied.
type acquireInfo struct {
	pos    int
	band   string
	tokens bool
	// side held the request back (it waited or was rejected), with decode
	// seats on.
	side      Side
	sideKnown bool
}

// acquire is the admission-on path. When shareLimited is not nil it is set
// if a cap (cluster admission's share) held the request back.
func (c *Controller) acquire(ctx context.Context, req *Request, shareLimited *bool) (*Slot, acquireInfo, error) {
	var info acquireInfo
	// Like x/sync/semaphore: fail rather than admit a request already gone.
	if ctx.Err() != nil {
		return nil, info, cancelled(ctx)
	}
	c.mu.Lock()
	a := c.arriveLocked(req, &info)
	seats := c.seatsOnLocked()
	c.mu.Unlock()
	switch {
	case a.off:
		slot, err := c.acquireOff(ctx, *req)
		return slot, info, err
	case a.w == nil:
		return a.slot, info, a.err
	}
	slot, err := c.wait(ctx, a.w, a.timeout)
	if shareLimited != nil {
		*shareLimited = a.w.capped // w left the queue under the lock before wait returned
	}
	if seats {
		c.mu.Lock()
		info.side, info.sideKnown = a.w.side, true
		c.mu.Unlock()
	}
	return slot, info, err
}

// arrival is how a request's arrival ended under the lock: answered at once
// (a slot or an error; off: admission was turned off meanwhile), or queued
// as w, to wait up to timeout.
type arrival struct {
	slot    *Slot
	err     error
	off     bool
	w       *waiter
	timeout time.Duration
}

// arriveLocked answers a request at once or queues it. Order: the drain,
// capacity now (behind waiters, availability only), then the tenant's
// bound, the queue's bound and the predicted wait.
//
// With nobody waiting in the request's queue, or every waiter ranked below
// it (a higher band), it selects now: a slot, a final error, or neither and
// the side that holds it back. This is the fast path of every uncontended
// Acquire, hence inline here rather than behind another call.
func (c *Controller) arriveLocked(req *Request, info *acquireInfo) arrival {
	if c.draining.Load() {
		c.rejectLocked(req.Queue, ShuttingDown)
		return arrival{err: errShuttingDown}
	}
	if !c.settings.Enabled() { // Update turned admission off meanwhile
		return arrival{off: true}
	}
	if c.beyondDeadlineLocked(req, 0) { // even a slot free now would not start it in time
		c.rejectLocked(req.Queue, PredictedTimeout)
		return arrival{err: errPredicted}
	}
	band := c.settings.BandOf(req.Priority)
	if c.settings.numBands() > 1 {
		info.band = c.settings.BandName(band)
	}
	info.tokens = c.settings.MaxInflightTokensPerWorker > 0
	q := c.qs.byKey[req.Queue]
	c.gate.caps.hit = false
	side := SidePrefill // the side that holds the request back
	if q != nil {
		side = q.side
	}
	fast := q == nil || req.Resumed || q.order.outranks(band)
	if fast {
		a := askOf(req)
		slot, err := c.admitLocked(&a, true)
		switch {
		case err == nil:
			c.observeWaitLocked(req.Queue, slot.worker, 0, band)
			return arrival{slot: slot}
		case !errors.Is(err, ErrNoCapacity):
			return arrival{err: err}
		}
		side = c.sideOfLocked(err)
	} else if err := unavailable(req); err != nil {
		return arrival{err: err}
	}
	capped := c.gate.caps.hit // read now: a displacement below lets other heads select
	victim, timeout, err := c.boundLocked(req, q, band, fast, side, info)
	if err != nil {
		return arrival{err: err}
	}
	return arrival{w: c.queueLocked(req, victim, capped, side, info), timeout: timeout}
}

// unavailable is the final error of a request arriving behind waiters whose
// model has no usable worker (503/404, not 429), or nil: it then goes behind
// them. The probe denies all capacity so a stateful policy is not driven
// into choosing a worker.
func unavailable(req *Request) error {
	if _, err := callSelect(req.Select, neverCapacity); err != nil && !errors.Is(err, ErrNoCapacity) {
		return err
	}
	return nil
}

// boundLocked applies the bounds on waiting, in order: the tenant's, the
// queue's (unless a lower-ranked waiter can be displaced: the victim) and,
// with early rejection, the predicted wait against the request's timeout.
func (c *Controller) boundLocked(req *Request, q *queue, band int, fast bool, side Side, info *acquireInfo) (victim *waiter, timeout time.Duration, err error) {
	if c.tenantFullLocked(req.Tenant) {
		c.rejectLocked(req.Queue, TenantQueueFull)
		return nil, 0, errTenantFull
	}
	if c.qs.n >= c.settings.QueueSize {
		if victim = c.victimLocked(band); victim == nil {
			return nil, 0, c.refuseLocked(req, q, fast, side, info, QueueFull)
		}
	}
	timeout = c.settings.QueueTimeout
	if c.settings.EarlyRejection {
		if req.MaxWait > 0 {
			timeout = min(timeout, req.MaxWait)
		}
		wait := c.predictedWaitLocked(c.predictedPositionLocked(q, band, req.Tenant))
		if wait > timeout || c.beyondDeadlineLocked(req, wait) {
			return nil, 0, c.refuseLocked(req, q, fast, side, info, PredictedTimeout)
		}
	}
	return victim, timeout, nil
}

// beyondDeadlineLocked reports, with early rejection, whether a request
// that would wait wait and then take its predicted time to the first token
// ([Request.PredictedTTFT]) misses its client's deadline. A resumed request
// is never refused by it: its client has its answer started.
func (c *Controller) beyondDeadlineLocked(req *Request, wait time.Duration) bool {
	return c.settings.EarlyRejection && req.MaxWait > 0 && req.PredictedTTFT > 0 && !req.Resumed &&
		wait+req.PredictedTTFT > req.MaxWait
}

// refuseLocked rejects an arrival for a full queue or a predicted timeout,
// named after the side that holds it back.
func (c *Controller) refuseLocked(req *Request, q *queue, fast bool, side Side, info *acquireInfo, why Outcome) error {
	if why == PredictedTimeout {
		c.rejectLocked(req.Queue, PredictedTimeout) // either side's
	}
	if !fast {
		side = c.refusalSideLocked(q, req, side)
	}
	info.side, info.sideKnown = side, c.seatsOnLocked()
	switch decode := side == SideDecode; {
	case why == PredictedTimeout && decode:
		return errDecodePredicted
	case why == PredictedTimeout:
		return errPredicted
	case decode:
		c.rejectLocked(req.Queue, DecodeQueueFull)
		return errDecodeFull
	}
	c.rejectLocked(req.Queue, QueueFull)
	return errQueueFull
}

// queueLocked queues req, after the victim (if any) has left.
func (c *Controller) queueLocked(req *Request, victim *waiter, capped bool, side Side, info *acquireInfo) *waiter {
	if victim != nil {
		c.displaceLocked(victim)
	}
	w, pos := c.enqueueLocked(*req)
	info.pos = pos
	w.capped = capped // the fast path found no worker because of a cap
	w.side = side
	if pos == 1 {
		w.q.side = side // the new head: what holds it back holds the queue back
	} else if c.headLocked(w.q) == w {
		// Fairness made the newcomer the head of a queue with waiters (a new
		// tenant's turn, a tenant under its share) without the fast path's
		// select: it selects now, as a new head does, not at its first poll
		// while a worker may be free.
		c.dispatchQueueLocked(w.q)
	}
	return w
}

// refusalSideLocked is the side that holds req back now, refused behind the
// waiters of q (the fast path's selection has just said it otherwise): a
// probe of its own pair selection (sideNowLocked), not the head's last try.
func (c *Controller) refusalSideLocked(q *queue, req *Request, side Side) Side {
	return c.sideNowLocked(q, askOf(req), side)
}

// callSelect runs the callback; a panic becomes that request's error rather
// than leaving the controller's lock held forever.
func callSelect(sel func(func(string) bool) (string, error), hasCap func(string) bool) (worker string, err error) {
	defer func() {
		if r := recover(); r != nil {
			worker, err = "", fmt.Errorf("admission: Select panicked: %v", r)
		}
	}()
	worker, err = sel(hasCap)
	if err == nil && worker == "" {
		err = errEmptyWorker
	}
	return worker, err
}
