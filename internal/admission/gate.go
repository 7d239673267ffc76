package admission

import (
	"strings"
	"sync/atomic"
	"time"
)

// gate is capacity, apart from the queue: whether a request fits on a worker
// now, and what a grant takes and gives back. A prefill worker's slots are
// bounded by its request limit (fixed, or adaptive: adaptive.go), a token
// budget and cluster admission's cap (caps.go); a decode worker's seats
// (seat.go) by its seat bound, its KV capacity and a seat cap. The gate
// never queues, orders or waits: the controller asks it, under its lock,
// through the placement callbacks of the one request selecting.
type gate struct {
	s   *Settings // the controller's, read under its lock
	m   Metrics
	now func() time.Time

	workers  map[string]*workerState
	seats    map[string]*seatState
	decCap   map[string]DecodeCapacity
	kvKnown  atomic.Bool // some decCap has KVTokens > 0 (DecodeKVKnown)
	caps     capState    // cluster admission's per-worker shares (caps.go)
	seatCaps capState    // its per-decode-worker seat shares (caps.go)
	probe    probe       // the cost of the selection running now
}

// init readies g for the controller's settings s.
func (g *gate) init(s *Settings, m Metrics, now func() time.Time) {
	g.s, g.m, g.now = s, m, now
	g.workers = make(map[string]*workerState)
	g.seats = make(map[string]*seatState)
	g.decCap = make(map[string]DecodeCapacity)
	g.probe.hasSlot = g.hasSlot
	g.probe.hasSeat = func(worker string) bool { return g.hasSeat(worker, g.probe.cost.decode) }
}

type workerState struct {
	inflight int
	tokens   int64    // estimated prompt tokens of the slots held
	lim      *limiter // with Settings.Adaptive on; created at the first grant
	// gone is set when the worker is removed: slots granted on this state
	// then release without effect (checked here rather than by a map
	// lookup on every release).
	gone bool
	// lastRelease is the time of the last release, for the engine's service
	// time (adaptive limits only).
	lastRelease time.Time
}

// probe carries the cost of the one selection running under the lock to the
// callbacks' hasCapacity and hasSeat, whose signature has no room for it.
// They are bound once, in init, so that a selection allocates nothing; only
// admitLocked and sideNowLocked bind a cost, for the span of one selection
// and its grant.
type probe struct {
	cost cost
	// memo fixes the charge on a worker at its first check: a stateful
	// policy (cache_aware) records the prompt for the worker it picks, after
	// which the hook would see the whole prompt as cached.
	memo             map[string]int64
	hasSlot, hasSeat func(string) bool
	// last is the worker of the latest hasSlot check in this binding, its
	// state and its answer: a callback answers with the worker it checked
	// last, so the re-check of its choice and the grant skip two lookups.
	last   string
	lastWS *workerState
	lastOK bool
}

func (p *probe) bind(c cost) {
	p.cost = c
	p.last, p.lastWS, p.lastOK = "", nil, false // a check outside a binding says nothing of this one
}

// unbind drops the cost (the hook must not be retained) and the last check.
func (p *probe) unbind() {
	p.cost = cost{}
	p.last, p.lastWS, p.lastOK = "", nil, false
	if len(p.memo) > 0 {
		clear(p.memo)
	}
}

// charge is the bound request's charge on worker: its estimated tokens, less
// the prefix the worker is expected to hold when a token budget is set, at
// least 1. The discounted charge is fixed at the first check of each worker.
func (g *gate) charge(worker string) int64 {
	p := &g.probe
	t := max(p.cost.tokens, 1)
	if p.cost.cached == nil || g.s.MaxInflightTokensPerWorker <= 0 {
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

// limit returns the request limit of a worker (<= 0: none): its adaptive
// limit, or the configured one.
func (g *gate) limit(ws *workerState) int {
	if !g.s.Adaptive.On() {
		return g.s.MaxInflightPerWorker
	}
	if ws != nil && ws.lim != nil {
		return ws.lim.limit
	}
	return g.s.initialLimit()
}

// hasSlot reports whether the bound request fits on worker: under its
// request limit and its cap and, with a token budget, under the budget, or
// alone on an idle worker (a request larger than the budget is never
// starved).
func (g *gate) hasSlot(worker string) bool {
	ws := g.workers[worker]
	ok := g.fits(worker, ws)
	g.probe.last, g.probe.lastWS, g.probe.lastOK = worker, ws, ok
	return ok
}

// hasChosen is hasSlot for the worker a callback chose, answered from the
// callback's last check when that was of the same worker (nothing changes
// under the lock in between).
func (g *gate) hasChosen(worker string) bool {
	if p := &g.probe; p.last == worker && worker != "" {
		return p.lastOK
	}
	return g.hasSlot(worker)
}

// fits is hasSlot's verdict for worker, whose state is ws (nil: none yet).
func (g *gate) fits(worker string, ws *workerState) bool {
	n, tokens := 0, int64(0)
	if ws != nil {
		n, tokens = ws.inflight, ws.tokens
	}
	if limit := g.limit(ws); limit > 0 && n >= limit {
		return false
	}
	if !g.caps.allows(worker, n, &g.caps.hit) {
		return false
	}
	if budget := g.s.MaxInflightTokensPerWorker; budget > 0 {
		// The charge is computed (and fixed) even for an idle worker.
		if cost := g.charge(worker); n > 0 && tokens+cost > budget {
			return false
		}
	}
	return true
}

// takeSlot counts a slot on worker charged cost tokens; it returns the
// worker's state and, with adaptive limits, the grant time.
func (g *gate) takeSlot(worker string, cost int64) (*workerState, time.Time) {
	ws := g.probe.lastWS
	if g.probe.last != worker || ws == nil {
		ws = g.workers[worker]
	}
	if ws == nil {
		ws = &workerState{}
		g.workers[worker] = ws
	}
	ws.inflight++
	ws.tokens += cost
	g.m.SetInflight(worker, ws.inflight)
	g.m.SetInflightTokens(worker, ws.tokens)
	if !g.s.Adaptive.On() {
		return ws, time.Time{}
	}
	if ws.lim == nil {
		ws.lim = &limiter{limit: g.s.initialLimit()}
		g.m.SetLimit(worker, ws.lim.limit)
	}
	ws.lim.noteGrant(ws.inflight)
	return ws, g.now()
}

// giveBack decrements s's worker unless the worker was removed (or removed
// and re-added) since the grant. A completed prefill feeds the worker's
// adaptive limit.
func (g *gate) giveBack(s *Slot, reason ReleaseReason) bool {
	if s.ws == nil || s.ws.gone {
		return false
	}
	ws := s.ws
	ws.inflight--
	ws.tokens -= s.cost
	g.m.SetInflight(s.worker, ws.inflight)
	g.m.SetInflightTokens(s.worker, ws.tokens)
	if ws.lim != nil && g.s.Adaptive.On() && !s.granted.IsZero() {
		now := g.now()
		// In a FIFO engine this prefill started when the previous one ended,
		// or when it arrived if the engine was idle then.
		start := s.granted
		if ws.lastRelease.After(start) {
			start = ws.lastRelease
		}
		ws.lastRelease = now
		if reason == ReleaseCompleted && ws.lim.observe(sample{hold: now.Sub(s.granted), service: now.Sub(start), tokens: s.cost},
			g.s.Adaptive.Min, g.s.Adaptive.Max) {
			g.m.SetLimit(s.worker, ws.lim.limit)
		}
	}
	return true
}

// seatLimit is a decode worker's seat bound (<= 0: none): its declared or
// reported window with DecodeAuto, else DecodeMaxInflightPerWorker.
func (g *gate) seatLimit(worker string) int {
	if g.s.DecodeAuto {
		if dc, ok := g.decCap[worker]; ok && dc.Window > 0 {
			return dc.Window
		}
	}
	return g.s.DecodeMaxInflightPerWorker
}

// hasSeat reports whether a request reserving decode tokens fits on decode
// worker: under its seat bound and its seat cap and, when its KV capacity is
// known, with room for the reservation (prompt + max_tokens), or alone on an
// idle worker so a large request is never starved. A cap's refusal marks
// the wait span share-limited like a slot cap's (one flag: caps.hit).
func (g *gate) hasSeat(worker string, decode int64) bool {
	ss := g.seats[worker]
	n, tokens := 0, int64(0)
	if ss != nil {
		n, tokens = ss.inflight, ss.tokens
	}
	if limit := g.seatLimit(worker); limit > 0 && n >= limit {
		return false
	}
	if !g.seatCaps.allows(worker, n, &g.caps.hit) {
		return false
	}
	if kv := g.decCap[worker].KVTokens; kv > 0 && n > 0 && tokens+max(decode, 1) > kv {
		return false
	}
	return true
}

// takeSeat counts a seat on decode worker for a request reserving decode
// tokens; it returns the worker's state and the reservation charged.
func (g *gate) takeSeat(worker string, decode int64) (*seatState, int64) {
	ss := g.seats[worker]
	if ss == nil {
		ss = &seatState{}
		g.seats[worker] = ss
	}
	cost := max(decode, 1)
	ss.inflight++
	ss.tokens += cost
	ss.prefilling++
	g.m.SetSeats(worker, ss.inflight)
	g.showSeatLimit(worker, ss)
	return ss, cost
}

// showSeatLimit reports decode worker's seat bound to the metrics when it
// differs from the one last reported for ss (a settings change shows at the
// next grant, as before).
func (g *gate) showSeatLimit(worker string, ss *seatState) {
	if l := g.seatLimit(worker); !ss.limitShown || ss.shownLimit != l {
		ss.shownLimit, ss.limitShown = l, true
		g.m.SetSeatLimit(worker, l)
	}
}

// endPrefill records that a seat's request no longer holds its prefill
// slot (the slot was freed, or the seat went first); once per seat.
func (g *gate) endPrefill(s *Seat) {
	if s == nil || !s.prefilling {
		return
	}
	s.prefilling = false
	if s.ss != nil && !s.ss.gone {
		s.ss.prefilling--
	}
}

// fullByPrefill reports whether some decode worker is out of seats only
// because requests still in prefill hold them: without those it would have a
// seat. The decode then waits for the prefills ahead, so a head held back
// there is held back by prefill, and its rejection names prefill (a seat is
// held from the pair's choice, so in a prefill-bound pipeline the seats fill
// with requests that have not reached the decode yet).
func (g *gate) fullByPrefill() bool {
	for k, ss := range g.seats {
		if ss.prefilling == 0 {
			continue
		}
		if limit := g.seatLimit(k); limit > 0 && ss.inflight >= limit && ss.inflight-ss.prefilling < limit {
			return true
		}
	}
	return false
}

// giveBackSeat decrements the seat's worker unless it was removed (or
// removed and re-added) since the grant.
func (g *gate) giveBackSeat(s *Seat) bool {
	g.endPrefill(s)
	if s.ss == nil || s.ss.gone {
		return false
	}
	s.ss.inflight--
	s.ss.tokens -= s.cost
	g.m.SetSeats(s.worker, s.ss.inflight)
	return true
}

// setDecodeCapacity records dc for decode worker and reports whether it
// changed.
func (g *gate) setDecodeCapacity(worker string, dc DecodeCapacity) bool {
	if g.decCap[worker] == dc {
		return false
	}
	if dc == (DecodeCapacity{}) {
		delete(g.decCap, worker)
	} else {
		g.decCap[worker] = dc
	}
	g.noteKVKnown()
	if ss, ok := g.seats[worker]; ok {
		g.showSeatLimit(worker, ss)
	}
	return true
}

// noteKVKnown recomputes DecodeKVKnown after a change of settings or
// capacities.
func (g *gate) noteKVKnown() {
	known := false
	if g.s.SeatsOn() {
		for _, v := range g.decCap {
			known = known || v.KVTokens > 0
		}
	}
	g.kvKnown.Store(known)
}

// removeWorker forgets worker's counter and the seats and capacity of
// engine worker and of its rank views (worker@rank): slots and seats still
// held on them release without effect.
func (g *gate) removeWorker(worker string) {
	if ws := g.workers[worker]; ws != nil {
		ws.gone = true
		delete(g.workers, worker)
	}
	g.m.DeleteWorker(worker)
	for k := range g.seats {
		if k == worker || strings.HasPrefix(k, worker+"@") {
			g.seats[k].gone = true
			delete(g.seats, k)
			g.m.DeleteSeatWorker(k)
		}
	}
	for k := range g.decCap {
		if k == worker || strings.HasPrefix(k, worker+"@") {
			delete(g.decCap, k)
		}
	}
	g.noteKVKnown()
}
