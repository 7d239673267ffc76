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

func askOf(req Request) ask {
	return ask{sel: req.Select, pair: req.SelectPair,
		cost: cost{tokens: req.Tokens, cached: req.CachedTokens, decode: req.DecodeTokens}}
}

// probe carries the cost of the one selection running under the lock to the
// callbacks' hasCapacity and hasSeat, whose signature has no room for it.
// They are bound once, in New, so that a selection allocates nothing; only
// admitLocked and sideNowLocked bind a cost, for the span of one selection
// and its grant.
type probe struct {
	cost cost
	// memo fixes the charge on a worker at its first check: a stateful
	// policy (cache_aware) records the prompt for the worker it picks, after
	// which the hook would see the whole prompt as cached.
	memo             map[string]int64
	hasSlot, hasSeat func(string) bool
}

func (p *probe) bind(c cost) { p.cost = c }

// unbind drops the cost (the hook must not be retained).
func (p *probe) unbind() {
	p.cost = cost{}
	clear(p.memo)
}

// chargeLocked is p's charge on worker: its estimated tokens, less the
// prefix the worker is expected to hold when a token budget is set, at least
// 1. The discounted charge is fixed at the first check of each worker.
func (c *Controller) chargeLocked(p *probe, worker string) int64 {
	t := max(p.cost.tokens, 1)
	if p.cost.cached == nil || c.settings.MaxInflightTokensPerWorker <= 0 {
		return t
	}
	if n, ok := p.memo[worker]; ok {
		return n
	}
	t = max(t-cachedTokens(p.cost.cached, worker), 1)
	if p.memo == nil {
		p.memo = make(map[string]int64)
	}
	p.memo[worker] = t
	return t
}

// admitLocked runs a's selection with its cost bound and grants what it
// chose: the slot, or the selection's error (ErrNoCapacity, ErrNoSeat: wait;
// another: final).
func (c *Controller) admitLocked(a ask, enabled bool) (*Slot, error) {
	c.probe.bind(a.cost)
	defer c.probe.unbind()
	sel := c.selectLocked(a, enabled)
	if sel.err != nil {
		return nil, sel.err
	}
	return c.grantSelLocked(sel, a.cost), nil
}

// cachedTokens calls the hook; a panic counts as nothing cached, since it
// may run outside callSelect's recovery with the lock held.
func cachedTokens(f func(string) int64, worker string) (n int64) {
	defer func() {
		if recover() != nil {
			n = 0
		}
	}()
	return max(f(worker), 0)
}

// limitLocked returns the request limit of a worker (<= 0: none): its
// adaptive limit, or the configured one.
func (c *Controller) limitLocked(ws *workerState) int {
	if !c.settings.Adaptive.On() {
		return c.settings.MaxInflightPerWorker
	}
	if ws != nil && ws.lim != nil {
		return ws.lim.limit
	}
	return c.settings.initialLimit()
}

// hasSlotLocked reports whether the request bound to p fits on worker: under
// its request limit and, with a token budget, under the budget, or alone on
// an idle worker (a request larger than the budget is never starved).
func (c *Controller) hasSlotLocked(p *probe, worker string) bool {
	ws := c.workers[worker]
	n, tokens := 0, int64(0)
	if ws != nil {
		n, tokens = ws.inflight, ws.tokens
	}
	if limit := c.limitLocked(ws); limit > 0 && n >= limit {
		return false
	}
	if !c.capAllowsLocked(worker, n) {
		return false
	}
	if budget := c.settings.MaxInflightTokensPerWorker; budget > 0 {
		// The charge is computed (and fixed) even for an idle worker.
		if cost := c.chargeLocked(p, worker); n > 0 && tokens+cost > budget {
			return false
		}
	}
	return true
}

// grantLocked reserves a slot on worker charged cost tokens: counted while
// admission is on, uncounted otherwise.
func (c *Controller) grantLocked(worker string, cost int64) *Slot {
	if !c.settings.Enabled() {
		return newSlot(c, worker, nil)
	}
	ws := c.workers[worker]
	if ws == nil {
		ws = &workerState{}
		c.workers[worker] = ws
	}
	ws.inflight++
	ws.tokens += cost
	c.metrics.SetInflight(worker, ws.inflight)
	c.fm.SetInflightTokens(worker, ws.tokens)
	s := newSlot(c, worker, ws)
	s.cost = cost
	if c.settings.Adaptive.On() {
		if ws.lim == nil {
			ws.lim = &limiter{limit: c.settings.initialLimit()}
			c.fm.SetLimit(worker, ws.lim.limit)
		}
		ws.lim.noteGrant(ws.inflight)
		s.granted = c.now()
	}
	return s
}

// releaseSlot frees a counted slot and lets the heads select.
func (c *Controller) releaseSlot(s *Slot, reason ReleaseReason) {
	c.mu.Lock()
	c.endPrefillLocked(s.seat)
	if c.giveBackLocked(s, reason) {
		c.releases.observe(c.now())
	}
	if c.queued > 0 {
		c.dispatchAllLocked()
	}
	c.mu.Unlock()
}

// giveBackLocked decrements s's worker unless the worker was removed (or
// removed and re-added) since the grant. A completed prefill feeds the
// worker's adaptive limit.
func (c *Controller) giveBackLocked(s *Slot, reason ReleaseReason) bool {
	if s.ws == nil || c.workers[s.worker] != s.ws {
		return false
	}
	ws := s.ws
	ws.inflight--
	ws.tokens -= s.cost
	c.metrics.SetInflight(s.worker, ws.inflight)
	c.fm.SetInflightTokens(s.worker, ws.tokens)
	if ws.lim != nil && c.settings.Adaptive.On() && !s.granted.IsZero() {
		now := c.now()
		// In a FIFO engine this prefill started when the previous one ended,
		// or when it arrived if the engine was idle then.
		start := s.granted
		if ws.lastRelease.After(start) {
			start = ws.lastRelease
		}
		ws.lastRelease = now
		if reason == ReleaseCompleted && ws.lim.observe(sample{hold: now.Sub(s.granted), service: now.Sub(start), tokens: s.cost},
			c.settings.Adaptive.Min, c.settings.Adaptive.Max) {
			c.fm.SetLimit(s.worker, ws.lim.limit)
		}
	}
	return true
}
