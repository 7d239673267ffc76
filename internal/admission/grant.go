package admission

// ask is what one request brings to a selection: its placement callbacks
// and its cost. Acquire builds it from the Request; a waiter keeps its own.
type ask struct {
	sel  func(func(string) bool) (string, error)
	pair func(hasSlot, hasSeat func(string) bool) (string, string, error)
	cost cost
}

// cost is what one request charges while it holds a slot and a seat.
type cost struct {
	tokens int64              // estimated prompt tokens; <= 0 counts as 1
	cached func(string) int64 // tokens a worker is expected to hold in its prefix cache; nil: none
	decode int64              // the decode KV reservation; <= 0 counts as 1
}

func askOf(req *Request) ask {
	return ask{sel: req.Select, pair: req.SelectPair,
		cost: cost{tokens: req.Tokens, cached: req.CachedTokens, decode: req.DecodeTokens}}
}

// admitLocked runs a's selection with its cost bound and grants what it
// chose: the slot, or the selection's error (ErrNoCapacity, ErrNoSeat: wait;
// another: final).
func (c *Controller) admitLocked(a *ask, enabled bool) (*Slot, error) {
	c.gate.probe.bind(a.cost)
	sel := c.selectLocked(a, enabled)
	var slot *Slot
	if sel.err == nil {
		slot = c.grantSelLocked(sel, a.cost)
	}
	c.gate.probe.unbind() // not deferred: this is every admission's path, and a panic in the callbacks is recovered below it
	return slot, sel.err
}

// grantLocked reserves a slot on worker charged cost tokens: counted while
// admission is on, uncounted otherwise.
func (c *Controller) grantLocked(worker string, cost int64) *Slot {
	if !c.settings.Enabled() {
		return newSlot(c, worker, nil)
	}
	ws, granted := c.gate.takeSlot(worker, cost)
	s := newSlot(c, worker, ws)
	s.cost, s.granted = cost, granted
	return s
}

// releaseSlot frees a counted slot and lets the heads select.
func (c *Controller) releaseSlot(s *Slot, reason ReleaseReason) {
	c.mu.Lock()
	c.gate.endPrefill(s.seat)
	if c.gate.giveBack(s, reason) {
		c.stats.releases.observe(c.now())
	}
	if c.qs.n > 0 {
		c.dispatchAllLocked()
	}
	c.mu.Unlock()
}
