package admission

import (
	"container/list"
	"time"
)

// Queue order. Each queue keeps one FIFO list per priority band (the band a
// request arrived in). Waiters are ranked by effective band, highest first,
// then by arrival: the effective band is the arrival band raised by one per
// Settings.Aging waited, capped at the top band. Hence:
//
//   - within a band, arrival order always holds (the older waiter has aged at
//     least as much), so only the fronts of the band lists can be the head;
//   - a higher band goes first, until aging lifts an older low-band waiter to
//     the same effective band, where its earlier arrival wins;
//   - a waiter of band b reaches the top after (top-b) x Aging, and from then
//     on nobody who arrived later is ranked before it: that is the aging
//     bound on starvation.
//
// With one band all of this reduces to the single FIFO of the source
// contract. The ranking depends on the clock only through aging, so the head
// is recomputed (O(bands)) wherever it matters rather than stored; a head that
// aging displaces notices at its next poll.

// queue is one candidate pool's waiters.
type queue struct {
	key     string
	bands   [MaxBands]list.List // of *waiter, arrival order, by arrival band
	n       int                 // waiters over all bands
	blocked bool                // dispatch scratch: head found no capacity this round
	side    Side                // the side that held the head back at its last try
	fair    [MaxBands]fairBand  // per-tenant order within each band, with tenancy on (fair.go)
}

// effBandLocked returns w's band raised by aging at now, capped at the top
// band.
func (c *Controller) effBandLocked(w *waiter, now time.Time) int {
	top := c.settings.numBands() - 1
	b := min(w.band, top)
	if a := c.settings.Aging; a > 0 && b < top {
		b = min(b+int(now.Sub(w.enq)/a), top)
	}
	return b
}

// headLocked returns q's head, the waiter that selects next; nil when q is
// empty.
func (c *Controller) headLocked(q *queue) *waiter {
	var (
		best     *waiter
		bestBand int
		now      time.Time
	)
	for b := range q.bands {
		e := q.bands[b].Front()
		if e == nil {
			continue
		}
		w := e.Value.(*waiter)
		if best == nil {
			best = w
			continue
		}
		if now.IsZero() { // two bands hold waiters: compare (rare; costs a clock read)
			now = c.now()
			bestBand = c.effBandLocked(best, now)
		}
		if eb := c.effBandLocked(w, now); eb > bestBand || (eb == bestBand && w.seq < best.seq) {
			best, bestBand = w, eb
		}
	}
	return c.fairHeadLocked(q, best)
}

// outranksHeadLocked reports whether a request of band arriving now would be
// ranked before q's head: only a strictly higher band can be, since the head
// arrived earlier.
func (c *Controller) outranksHeadLocked(q *queue, band int) bool {
	if c.settings.numBands() == 1 {
		return false
	}
	h := c.bandFrontLocked(q, c.headLocked(q)) // a band ranks by its oldest waiter
	return h != nil && min(band, c.settings.numBands()-1) > c.effBandLocked(h, c.now())
}

// positionLocked returns the 1-based position a request of band arriving
// now takes in q (nil: an empty queue): one behind every waiter ranked at
// or above its band.
func (c *Controller) positionLocked(q *queue, band int) int {
	if q == nil {
		return 1
	}
	if c.settings.numBands() == 1 {
		return q.n + 1
	}
	now := c.now()
	nb := min(band, c.settings.numBands()-1)
	pos := 1
	for b := range q.bands {
		// Along one list the effective band never increases (older first).
		for e := q.bands[b].Front(); e != nil; e = e.Next() {
			if c.effBandLocked(e.Value.(*waiter), now) < nb {
				break
			}
			pos++
		}
	}
	return pos
}

// bandCountLocked records a change of the waiters of arrival band b and
// reports it, with two or more bands configured.
func (c *Controller) bandCountLocked(b, delta int) {
	c.bandQueued[b] += delta
	if n := c.settings.numBands(); n > 1 {
		c.reportBandLocked(min(b, n-1))
	}
}

// reportBandLocked reports the waiters of current band i (arrival bands
// beyond the top, left by a live change of bands, count in the top band).
func (c *Controller) reportBandLocked(i int) {
	n, top := 0, c.settings.numBands()-1
	for b, k := range c.bandQueued {
		if min(b, top) == i {
			n += k
		}
	}
	c.fm.SetBandQueued(c.settings.BandName(i), n)
}
