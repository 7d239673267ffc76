package admission

import (
	"context"
	"errors"
	"fmt"

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
		slot, _, err := c.acquire(ctx, req, nil)
		return slot, err
	}
	_, span := c.tracer.Start(ctx, spanWait, trace.WithAttributes(attribute.String(attrQueue, req.Queue)))
	var limited bool
	slot, info, err := c.acquire(ctx, req, &limited)
	span.SetAttributes(
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
		_, slot.span = c.tracer.Start(ctx, spanSlot, trace.WithAttributes(attribute.String(attrSlotWorker, slot.worker)))
		if st := slot.seat; st != nil {
			span.SetAttributes(attribute.String(attrDecodeWorker, st.worker))
			_, st.span = c.tracer.Start(ctx, spanSeat, trace.WithAttributes(attribute.String(attrSlotWorker, st.worker)))
		}
	}
	span.End()
	return slot, err
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
func (c *Controller) acquire(ctx context.Context, req Request, shareLimited *bool) (slot *Slot, info acquireInfo, err error) {
	// Like x/sync/semaphore: fail rather than admit a request already gone.
	if ctx.Err() != nil {
		return nil, info, cancelled(ctx)
	}
	c.mu.Lock()
	if c.draining.Load() {
		c.rejectLocked(req.Queue, ShuttingDown)
		c.mu.Unlock()
		return nil, info, errShuttingDown
	}
	if !c.settings.Enabled() { // Update turned admission off meanwhile
		c.mu.Unlock()
		slot, err := c.acquireOff(ctx, req)
		return slot, info, err
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
	fast := q == nil || q.order.outranks(band)
	if fast {
		// Fast path: nobody waits for this pool, or every waiter ranks
		// below this request (a higher priority band).
		slot, err := c.admitLocked(askOf(req), true)
		if err == nil {
			c.observeWaitLocked(req.Queue, slot.worker, 0, band)
			c.mu.Unlock()
			return slot, info, nil
		}
		if !errors.Is(err, ErrNoCapacity) {
			c.mu.Unlock()
			return nil, info, err
		}
		side = c.sideOfLocked(err)
	} else {
		// Waiters exist: the newcomer goes behind them, but a request whose
		// model has no usable worker is answered now (503/404, not 429).
		// The probe denies all capacity so a stateful policy is not driven
		// into choosing a worker.
		if _, err := callSelect(req.Select, neverCapacity); err != nil && !errors.Is(err, ErrNoCapacity) {
			c.mu.Unlock()
			return nil, info, err
		}
	}
	capped := c.gate.caps.hit // read now: a displacement below lets other heads select
	// Order: availability first (above), then the queue bound, then the
	// predicted wait.
	if c.tenantFullLocked(req.Tenant) {
		c.rejectLocked(req.Queue, TenantQueueFull)
		c.mu.Unlock()
		return nil, info, errTenantFull
	}
	var victim *waiter
	if c.qs.n >= c.settings.QueueSize {
		if victim = c.victimLocked(band); victim == nil {
			if !fast {
				side = c.refusalSideLocked(q, req, side)
			}
			info.side, info.sideKnown = side, c.seatsOnLocked()
			if side == SideDecode {
				c.rejectLocked(req.Queue, DecodeQueueFull)
				c.mu.Unlock()
				return nil, info, errDecodeFull
			}
			c.rejectLocked(req.Queue, QueueFull)
			c.mu.Unlock()
			return nil, info, errQueueFull
		}
	}
	timeout := c.settings.QueueTimeout
	if c.settings.EarlyRejection {
		if req.MaxWait > 0 {
			timeout = min(timeout, req.MaxWait)
		}
		if c.predictedWaitLocked(c.predictedPositionLocked(q, band, req.Tenant)) > timeout {
			c.rejectLocked(req.Queue, PredictedTimeout)
			if !fast {
				side = c.refusalSideLocked(q, req, side)
			}
			info.side, info.sideKnown = side, c.seatsOnLocked()
			c.mu.Unlock()
			if side == SideDecode {
				return nil, info, errDecodePredicted
			}
			return nil, info, errPredicted
		}
	}
	if victim != nil {
		c.displaceLocked(victim)
	}
	w, pos := c.enqueueLocked(req)
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
	seats := c.seatsOnLocked()
	c.mu.Unlock()

	slot, err = c.wait(ctx, w, timeout)
	if shareLimited != nil {
		*shareLimited = w.capped // w left the queue under the lock before wait returned
	}
	if seats {
		c.mu.Lock()
		info.side, info.sideKnown = w.side, true
		c.mu.Unlock()
	}
	return slot, info, err
}

// refusalSideLocked is the side that holds req back now, refused behind the
// waiters of q (the fast path's selection has just said it otherwise): a
// probe of its own pair selection (sideNowLocked), not the head's last try.
func (c *Controller) refusalSideLocked(q *queue, req Request, side Side) Side {
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
