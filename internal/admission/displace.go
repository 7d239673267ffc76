package admission

import "time"

// victimLocked returns the waiter a newcomer of band may displace from a
// full queue: with priority bands, the lowest-ranked waiter of all queues
// (lowest effective band, then latest arrival), if it ranks below the
// newcomer. The bound stays global and no band ever gives way to a lower
// one. nil when there is none.
func (c *Controller) victimLocked(band int) *waiter {
	n := c.settings.numBands()
	if n == 1 || c.settings.QueueSize == 0 || c.qs.n > c.settings.QueueSize {
		return nil // no bands; never waiting; or over a lowered bound: shrink, do not swap
	}
	now := c.now()
	var victim *waiter
	vb := 0
	for _, q := range c.qs.active {
		for b := range q.order.fifo {
			w := q.order.fifo[b].last() // the latest of a list has aged least
			if w == nil {
				continue
			}
			eb := q.order.effBand(w, now)
			if victim == nil || eb < vb || (eb == vb && w.seq > victim.seq) {
				victim, vb = w, eb
			}
		}
	}
	if victim == nil || vb >= min(band, n-1) {
		return nil
	}
	return victim
}

// displaceLocked ends victim's wait with ErrDisplaced.
func (c *Controller) displaceLocked(victim *waiter) {
	q := victim.q
	victim.side = c.sideOfWaiterLocked(victim) // before removeLocked drops its selection
	victim.err, victim.state = errDisplaced, failed
	if victim.side == SideDecode {
		victim.err = errDecodeDisplaced
	}
	c.observeWaitLocked(q.key, "", c.now().Sub(victim.enq), victim.band)
	c.rejectLocked(q.key, Displaced)
	if c.removeLocked(victim) { // answers it
		c.dispatchQueueLocked(q) // its queue has a new head
	}
}

// predictedWaitLocked estimates the wait of a request at position pos: the
// time for pos slots to be released at the measured release rate. 0 while
// the rate is unknown (no prediction, no early rejection).
func (c *Controller) predictedWaitLocked(pos int) time.Duration {
	rate, ok := c.stats.releases.rate(c.now())
	if !ok || rate <= 0 {
		return 0
	}
	return time.Duration(float64(pos) / rate * float64(time.Second))
}

func (c *Controller) rejectLocked(queue string, o Outcome) {
	c.stats.rejections[o]++
	c.m.IncRejection(queue, o)
}
