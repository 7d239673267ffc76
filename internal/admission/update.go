package admission

// Wake tells every queue's head to re-select: call it on registry events
// (worker added, removed, replaced, health changed). It does not run Select
// itself (the heads do, in their own goroutines) and returns at once, but it
// takes the controller's lock: do not call it while holding a lock that
// Select takes.
func (c *Controller) Wake() {
	c.mu.Lock()
	for _, q := range c.qs.active {
		if w := c.headLocked(q); w != nil {
			w.needSelect = true
			pokeLocked(w)
		}
	}
	c.mu.Unlock()
}

// RemoveWorker forgets worker's counter and deletes its gauge series. Slots
// still held on it release without effect; if the same key is added again
// it starts from zero. Like Wake, do not call it while holding a lock that
// Select takes.
func (c *Controller) RemoveWorker(worker string) {
	c.mu.Lock()
	c.gate.removeWorker(worker)
	c.mu.Unlock()
}

// Update applies new settings at once. Raising the limit or the queue lets
// the heads select now; lowering the limit never revokes granted slots;
// lowering the queue size never evicts waiters but rejects newcomers while
// the queue is over the bound; a new timeout applies to new waiters;
// turning admission off admits every waiter (uncounted) and stops counting.
// Slots granted while admission was off stay uncounted if it is turned on
// again. Turning adaptation off drops every worker's adaptive limit (the
// configured limit applies); a new range clamps them. Waiters keep the band
// index they arrived with (beyond a reduced set of bands, the top band).
func (c *Controller) Update(s Settings) error {
	if err := s.Validate(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	tenancy, kind := c.settings.Tenants.on(), fairnessOf(&c.settings)
	c.settings = s.Clone()
	c.enabled.Store(s.Enabled())
	if c.settings.Tenants.on() != tenancy || fairnessOf(&c.settings) != kind {
		c.reorderLocked()
	}
	c.gate.noteKVKnown()
	for w, ws := range c.gate.workers {
		switch {
		case ws.lim == nil:
		case !s.Adaptive.On():
			ws.lim = nil
		default:
			if l := min(max(ws.lim.limit, s.Adaptive.Min), s.Adaptive.Max); l != ws.lim.limit {
				ws.lim.limit = l
				c.m.SetLimit(w, l)
			}
		}
	}
	if c.settings.numBands() > 1 {
		for i := range c.settings.numBands() {
			c.reportBandLocked(i)
		}
	}
	if c.qs.n > 0 {
		c.dispatchAllLocked()
		// The ranking may have changed: make sure each head polls.
		for _, q := range c.qs.active {
			if h := c.headLocked(q); h != nil {
				c.promoteLocked(h)
			}
		}
	}
	return nil
}
