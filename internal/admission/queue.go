package admission

// queue is one candidate pool's waiters, ranked by its order (order.go).
type queue struct {
	key     string
	order   bands
	blocked bool // dispatch scratch: head found no capacity this round
	side    Side // the side that held the head back at its last try
}

// newQueueLocked makes the queue of key, with the fairness in force and the
// rates kept from its last queue (share.go).
func (c *Controller) newQueueLocked(key string) *queue {
	q := &queue{key: key}
	q.order.s, q.order.now, q.order.kind = &c.settings, c.now, fairnessOf(&c.settings)
	c.restoreSharesLocked(q)
	return q
}

// headLocked returns q's head, the waiter that selects next; nil when q is
// empty.
func (c *Controller) headLocked(q *queue) *waiter { return q.order.head() }

// positionLocked returns the 1-based position a request of band arriving
// now takes in q (nil: an empty queue): one behind every waiter ranked at
// or above its band.
func (c *Controller) positionLocked(q *queue, band int) int {
	if q == nil {
		return 1
	}
	return q.order.ranked(band) + 1
}

// predictedPositionLocked is the position early rejection predicts for a
// newcomer of tenant in band: positionLocked, with the waiters of its own
// band counted as its fairness order serves them.
func (c *Controller) predictedPositionLocked(q *queue, band int, tenant string) int {
	if q == nil {
		return 1
	}
	return q.order.ahead(newcomer{band: band, tenant: tenantName(tenant)}) + 1
}

// bandCountLocked records a change of the waiters of arrival band b and
// reports it, with two or more bands configured.
func (c *Controller) bandCountLocked(b, delta int) {
	c.qs.byBand[b] += delta
	if n := c.settings.numBands(); n > 1 {
		c.reportBandLocked(min(b, n-1))
	}
}

// reportBandLocked reports the waiters of current band i (arrival bands
// beyond the top, left by a live change of bands, count in the top band).
func (c *Controller) reportBandLocked(i int) {
	n, top := 0, c.settings.numBands()-1
	for b, k := range c.qs.byBand {
		if min(b, top) == i {
			n += k
		}
	}
	c.m.SetBandQueued(c.settings.BandName(i), n)
}
