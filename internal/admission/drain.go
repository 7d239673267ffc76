package admission

// Drain prepares the controller for shutdown: from now on every Acquire
// fails with ErrShuttingDown, and every queued request is answered with it
// at once, so its client can retry on another replica instead of waiting
// out QueueTimeout behind a server that is going away. Granted slots and
// seats are untouched: their requests finish and release them as usual.
//
// The refusal and the dequeue happen under the one lock, so no request can
// slip into the queue after it is emptied, and each waiter leaves exactly
// once (a waiter whose timeout or cancellation races the drain finds itself
// failed in leave and returns the drain's error). Drain starts no
// goroutine and is idempotent; it reports how many waiters it answered.
func (c *Controller) Drain() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.draining.Store(true)
	n := 0
	// removeLocked drops a queue once it is empty, so take heads until
	// active is empty rather than ranging over it.
	for len(c.qs.active) > 0 {
		q := c.qs.active[0]
		w := c.headLocked(q)
		w.err, w.state = errShuttingDown, failed
		c.observeWaiterLocked(w, "")
		c.rejectLocked(q.key, ShuttingDown)
		c.removeLocked(w) // answers it
		n++
	}
	return n
}

// Draining reports whether Drain was called.
func (c *Controller) Draining() bool { return c.draining.Load() }
