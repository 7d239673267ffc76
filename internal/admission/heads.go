package admission

import (
	"context"
	"errors"
	"slices"
	"time"
)

func (c *Controller) observeWaitLocked(queue, worker string, d time.Duration, band int) {
	c.stats.waits.add(d)
	c.m.ObserveWait(queue, worker, d)
	if n := c.settings.numBands(); n > 1 {
		c.m.ObserveBandWait(c.settings.BandName(min(band, n-1)), d)
	}
}

// observeWaiterLocked records the wait of w, which ends now (worker: the one
// whose slot ended it, or ""), also as a decode wait when the decode side
// held it back.
func (c *Controller) observeWaiterLocked(w *waiter, worker string) {
	d := c.now().Sub(w.enq)
	c.observeWaitLocked(w.q.key, worker, d, w.band)
	if w.side == SideDecode {
		c.m.ObserveDecodeWait(w.q.key, d)
	}
}

// enqueueLocked queues req and returns its waiter and its position (1 =
// head).
func (c *Controller) enqueueLocked(req Request) (*waiter, int) {
	q := c.qs.byKey[req.Queue]
	band := c.settings.BandOf(req.Priority)
	pos := c.positionLocked(q, band)
	if q == nil {
		q = c.newQueueLocked(req.Queue)
		c.qs.byKey[req.Queue] = q
		c.qs.active = append(c.qs.active, q)
	}
	c.qs.seq++
	w := &waiter{
		q:      q,
		ask:    askOf(&req),
		poke:   make(chan struct{}, 1),
		enq:    c.now(),
		band:   band,
		seq:    c.qs.seq,
		tenant: tenantName(req.Tenant),
	}
	before := q.order.head()
	q.order.push(w)
	if h := q.order.head(); h != before {
		// The new head (w, or with share mode its tenant's earlier waiter); a
		// displaced one (a lower band, another tenant) stops polling at its
		// next tick.
		c.promoteLocked(h)
	}
	c.countTenantLocked(w, 1)
	c.qs.n++
	c.m.AddQueued(q.key, 1)
	c.bandCountLocked(band, 1)
	return w, pos
}

// promoteLocked tells a new head to start its poll timer.
func (c *Controller) promoteLocked(w *waiter) {
	if w.promoted {
		return
	}
	w.promoted = true
	pokeLocked(w)
}

func pokeLocked(w *waiter) {
	select {
	case w.poke <- struct{}{}:
	default:
	}
}

// removeLocked takes w out of its queue and reports whether the queue has a
// new head, which it promotes. That is not only when w was the head: with
// fairness or bands, taking out another waiter (a band's oldest, a tenant's
// last) can move the head too, and a new head that nobody lets select
// would wait while capacity is free. Empty queues are dropped so model keys
// do not accumulate.
func (c *Controller) removeLocked(w *waiter) (newHead bool) {
	q := w.q
	before := c.headLocked(q)
	w.ask = ask{} // its callbacks may hold the request's state
	q.order.remove(w)
	c.countTenantLocked(w, -1)
	c.qs.n--
	c.m.AddQueued(q.key, -1)
	c.bandCountLocked(w.band, -1)
	if q.order.len() == 0 {
		c.keepSharesLocked(q)
		delete(c.qs.byKey, q.key)
		if i := slices.Index(c.qs.active, q); i >= 0 {
			c.qs.active = slices.Delete(c.qs.active, i, i+1)
		}
	} else if after := c.headLocked(q); after != before {
		c.promoteLocked(after)
		newHead = true
	}
	if w.state != waiting {
		// Answered, after the new head's poke: the scheduler runs the
		// goroutine readied last first, and the granted one releases work
		// the new head may then take without a poll timer of its own.
		w.Wake()
	}
	return newHead
}

// tryHeadLocked lets q's head select once. It reports whether the head left
// the queue (granted or failed), i.e. whether the next head should try.
func (c *Controller) tryHeadLocked(q *queue) bool {
	w := c.headLocked(q)
	if w == nil {
		return false
	}
	enabled := c.settings.Enabled()
	c.gate.caps.hit = false
	slot, err := c.admitLocked(&w.ask, enabled)
	w.capped = w.capped || (err != nil && c.gate.caps.hit)
	switch {
	case err == nil:
		w.slot = slot
		w.state = granted
	case errors.Is(err, ErrNoCapacity):
		if enabled {
			w.side = c.sideOfLocked(err)
			q.side = w.side
			return false
		}
		// Admission was turned off and there is no queue any more.
		c.rejectLocked(w.q.key, QueueFull)
		w.err, w.state = errQueueFull, failed
	default:
		// The model lost its workers: this head fails and lets the next
		// waiter through.
		w.err, w.state = err, failed
	}
	granted := ""
	if w.slot != nil {
		granted = w.slot.worker
	}
	c.observeWaiterLocked(w, granted)
	c.removeLocked(w) // answers it
	return true
}

// dispatchQueueLocked admits q's heads while capacity remains.
func (c *Controller) dispatchQueueLocked(q *queue) {
	for c.tryHeadLocked(q) {
	}
}

// dispatchAllLocked gives every queue's head a chance, in rounds of one
// admission per queue, starting from a rotating queue for fairness.
// Capacity only shrinks during a dispatch, so a queue whose head found none
// sits out the remaining rounds.
func (c *Controller) dispatchAllLocked() {
	n := len(c.qs.active)
	if n == 0 {
		return
	}
	c.qs.rot++
	start := c.qs.rot % n
	c.qs.scratch = append(c.qs.scratch[:0], c.qs.active[start:]...)
	c.qs.scratch = append(c.qs.scratch, c.qs.active[:start]...)
	for _, q := range c.qs.scratch {
		q.blocked = false
	}
	for progress := true; progress; {
		progress = false
		for _, q := range c.qs.scratch {
			if q.blocked {
				continue
			}
			if c.tryHeadLocked(q) {
				progress = true
			} else {
				q.blocked = true
			}
		}
	}
	clear(c.qs.scratch)
	c.qs.scratch = c.qs.scratch[:0]
}

// wait blocks the queued request's goroutine until it is granted, fails,
// times out or is cancelled. Only while it is the head does it run a poll
// timer.
func (c *Controller) wait(ctx context.Context, w *waiter, timeout time.Duration) (*Slot, error) {
	expire := time.NewTimer(timeout)
	defer expire.Stop()
	var poll *time.Timer
	var pollC <-chan time.Time
	defer func() {
		if poll != nil {
			poll.Stop()
		}
	}()
	for {
		select {
		case <-w.Ready():
			return w.slot, w.err
		case <-ctx.Done():
			return c.leave(ctx, w, Cancelled)
		case <-expire.C:
			return c.leave(ctx, w, QueueTimeout)
		case <-w.poke:
			c.mu.Lock()
			if w.state == waiting && w.needSelect {
				w.needSelect = false
				c.dispatchQueueLocked(w.q)
			}
			stillWaiting := w.state == waiting
			c.mu.Unlock()
			if stillWaiting && poll == nil { // promoted: start polling
				poll = time.NewTimer(c.poll)
				pollC = poll.C
			}
		case <-pollC:
			c.mu.Lock()
			head := true
			if w.state == waiting {
				c.dispatchQueueLocked(w.q)
				if h := c.headLocked(w.q); w.state == waiting && h != w {
					// Displaced (a higher band arrived, or aging lifted an
					// older waiter): the head polls, not this waiter.
					head = false
					w.promoted = false
					c.promoteLocked(h)
				}
			}
			c.mu.Unlock()
			if head {
				poll.Reset(c.poll)
			} else {
				poll, pollC = nil, nil
			}
		}
	}
}

// leave ends a wait on cancellation or timeout, re-checking under the lock
// whether a grant or a final error raced in first.
func (c *Controller) leave(ctx context.Context, w *waiter, why Outcome) (*Slot, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch w.state {
	case granted:
		if why == QueueTimeout {
			return w.slot, nil // the slot arrived in time after all
		}
		// Cancellation beats a grant: the client is gone, give it back.
		s := w.slot
		w.slot = nil
		c.stats.cancelled++
		c.gate.giveBack(s, ReleaseCancelled)
		if s.seat != nil {
			s.seat.released.Store(true)
			c.gate.giveBackSeat(s.seat)
		}
		if c.qs.n > 0 {
			c.dispatchAllLocked()
		}
		return nil, cancelled(ctx)
	case failed:
		return nil, w.err
	}
	q := w.q
	if why == QueueTimeout {
		// Name the side that holds it back now, not the one it met at its
		// last try (only the head tries).
		w.side = c.sideOfWaiterLocked(w)
	}
	newHead := c.removeLocked(w)
	c.observeWaiterLocked(w, "")
	if newHead {
		c.dispatchQueueLocked(q)
	}
	if why == QueueTimeout {
		if w.side == SideDecode {
			c.rejectLocked(q.key, DecodeQueueTimeout)
			return nil, errDecodeTimeout
		}
		c.rejectLocked(q.key, QueueTimeout)
		return nil, errQueueTimeout
	}
	c.stats.cancelled++
	return nil, cancelled(ctx)
}
