package admission

// bindLocked makes the request's cost inputs current for hasCapacityLocked
// and grantLocked; unbindLocked drops them (the hook must not be retained).
func (c *Controller) bindLocked(tokens int64, cached func(string) int64) {
	c.curTokens, c.curCached = tokens, cached
}

func (c *Controller) unbindLocked() {
	c.curTokens, c.curCached, c.curDecode = 0, nil, 0
	clear(c.curCost)
}

// costLocked is the current request's charge on worker: its estimated
// tokens, less the prefix the worker is expected to hold when a token budget
// is set, at least 1. The discounted charge is fixed at the first check of
// each worker within one binding.
func (c *Controller) costLocked(worker string) int64 {
	t := max(c.curTokens, 1)
	if c.curCached == nil || c.settings.MaxInflightTokensPerWorker <= 0 {
		return t
	}
	if n, ok := c.curCost[worker]; ok {
		return n
	}
	t = max(t-cachedTokens(c.curCached, worker), 1)
	if c.curCost == nil {
		c.curCost = make(map[string]int64)
	}
	c.curCost[worker] = t
	return t
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

// hasCapacityLocked reports whether the current request fits on worker: under
// its request limit and, with a token budget, under the budget, or alone on
// an idle worker (a request larger than the budget is never starved).
func (c *Controller) hasCapacityLocked(worker string) bool {
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
		if cost := c.costLocked(worker); n > 0 && tokens+cost > budget {
			return false
		}
	}
	return true
}

// grantLocked reserves a slot on worker for the current request: counted
// while admission is on, uncounted otherwise.
func (c *Controller) grantLocked(worker string) *Slot {
	if !c.settings.Enabled() {
		return newSlot(c, worker, nil)
	}
	ws := c.workers[worker]
	if ws == nil {
		ws = &workerState{}
		c.workers[worker] = ws
	}
	cost := c.costLocked(worker)
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
