package admission

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Span and attribute names.
const (
	spanWait = "sluice.admission.wait"
	spanSlot = "sluice.admission.slot"
	spanSeat = "sluice.admission.seat"

	attrOutcome       = "sluice.admission.outcome"
	attrQueuePosition = "sluice.admission.queue_position"
	attrWorker        = "sluice.admission.worker"
	attrQueue         = "sluice.admission.queue"
	attrSlotWorker    = "sluice.worker"
	attrReleaseReason = "sluice.admission.release_reason"
	attrBand          = "sluice.admission.band"
	attrTokens        = "sluice.admission.tokens"
	attrSide          = "sluice.admission.side"
	attrDecodeWorker  = "sluice.admission.decode_worker"
)

// Request is one client request asking for a prefill slot.
type Request struct {
	// Queue is the per-model queue key: requests with the same key share a
	// candidate pool and wait in one FIFO.
	Queue string
	// Select runs the prefill placement: filter candidates with hasCapacity,
	// run the policy, return the chosen worker key. It returns ErrNoCapacity
	// to wait, or another error, which is final and returned to the caller
	// (the request is never queued for it).
	//
	// With admission on, Select runs with the controller's lock held, so the
	// filter, the policy and the reservation are atomic; it must not block
	// and must not call the Controller. While the request waits it may run
	// many times, from any goroutine (the releaser of a slot, the head's own
	// poll), never after Acquire has returned. hasCapacity is valid only
	// during the call. With admission off, Select runs without the lock,
	// possibly concurrently with other Selects, and hasCapacity always
	// reports true.
	Select func(hasCapacity func(worker string) bool) (worker string, err error)

	// Tokens is the request's estimated prompt tokens (how the gateway
	// estimates them is the caller's business; see dispatch). It is charged
	// against Settings.MaxInflightTokensPerWorker while the slot is held;
	// <= 0 counts as 1.
	Tokens int64
	// CachedTokens, when not nil and a token budget is set, returns how many
	// of Tokens the worker is expected to hold in its prefix cache: the
	// charge on that worker is Tokens minus that, at least 1. It runs under
	// the controller's lock, like Select, and must not block.
	CachedTokens func(worker string) int64
	// Priority orders waiters through Settings.Bands: higher bands first.
	// Ignored with fewer than two bands.
	Priority int
	// MaxWait is the client's own bound on its wait (a deadline header), or
	// 0. It is used only with Settings.EarlyRejection, where it bounds both
	// the predicted and the actual wait.
	MaxWait time.Duration

	// SelectPair, when not nil and decode seats are on (Settings.SeatsOn),
	// runs instead of Select: the PD placement of both legs in one call
	// under the lock. It picks a prefill worker among those hasSlot accepts
	// and its decode partner among those hasSeat accepts (keys: a decode
	// worker's seat is per DP rank where ranks are known), and returns
	// both; ErrNoCapacity when no prefill worker has a slot, ErrNoSeat when
	// one has but no compatible decode worker has a seat (the side is
	// reported on rejection), or a final error. It must check the decode
	// side before running a stateful prefill policy, so that the policy
	// never records a choice the decode side then refuses. Otherwise the
	// Select contract applies. With seats off Select runs, so a caller
	// sets both. An empty prefill with a decode worker is a seat-only
	// grant (seat.go: local prefill).
	SelectPair func(hasSlot, hasSeat func(worker string) bool) (prefill, decode string, err error)
	// DecodeTokens is the decode KV reservation (prompt + max_tokens),
	// charged against the decode worker's KV capacity while the seat is
	// held; <= 0 counts as 1.
	DecodeTokens int64
	// Tenant names the caller for Settings.Tenants ("" is DefaultTenant);
	// ignored while tenancy is off.
	Tenant string
}

// Deps are the controller's injected dependencies; the zero value works.
type Deps struct {
	// Metrics receives measurements; nil means none.
	Metrics Metrics
	// Tracer creates the wait and slot spans; nil (or the otel noop
	// tracer) means no spans and no tracing cost.
	Tracer trace.Tracer
	// PollInterval is how often the head of a queue re-selects without an
	// event. Default 1 s.
	PollInterval time.Duration
	// Now is the clock for wait durations and the release rate. Default
	// time.Now. Timers (queue timeout, poll) use package time, which
	// testing/synctest controls.
	Now func() time.Time
}

// Controller is the per-worker prefill admission controller shared by every
// PD front end of one gateway process. See the package documentation for
// its concurrency model.
type Controller struct {
	tracer  trace.Tracer // nil: no spans
	metrics Metrics
	fm      FeatureMetrics // metrics, when it implements FeatureMetrics
	poll    time.Duration
	now     func() time.Time
	hasCap  func(string) bool // c.hasCapacityLocked, bound once
	hasSeat func(string) bool // c.hasSeatLocked, bound once
	dm      DecodeMetrics     // metrics, when it implements DecodeMetrics

	// The cost inputs of the request whose Select (or grant) runs now, read
	// by hasCapacityLocked and grantLocked; set by bindLocked. curCost
	// memoizes the charge per worker from its first capacity check: a
	// stateful policy (cache_aware) records the prompt for the worker it
	// picks, after which the hook would see the whole prompt as cached.
	curTokens int64
	curCached func(string) int64
	curCost   map[string]int64
	curDecode int64 // the decode KV reservation

	// enabled mirrors settings.Enabled() so the admission-off path takes no
	// lock.
	enabled atomic.Bool
	// draining is set once, under mu, by Drain; read under mu on the
	// admission-on path and atomically on the lock-free off path.
	draining atomic.Bool

	mu       sync.Mutex
	settings Settings
	workers  map[string]*workerState
	queues   map[string]*queue // only non-empty queues
	active   []*queue          // the same queues, in a stable order for rotation
	scratch  []*queue          // dispatch's rotated copy of active, reused
	rot      int
	queued   int // waiters over all queues
	seq      uint64
	// bandQueued counts waiters by arrival band, over all queues.
	bandQueued [MaxBands]int

	rejections [numOutcomes]uint64
	cancelled  uint64 // waiters whose context ended in the queue
	waits      waitRing
	releases   rateEstimator
	caps       capState // cluster admission's per-worker shares (caps.go)
	seatCaps   capState // its per-decode-worker seat shares (caps.go)

	// Decode seats (seat.go), by decode worker key.
	seats        map[string]*seatState
	decCap       map[string]DecodeCapacity
	kvKnown      atomic.Bool // some decCap has KVTokens > 0 (DecodeKVKnown)
	seatReleases rateEstimator

	tenantQueued map[string]int // waiters by tenant, with tenancy on (fair.go)
}

type workerState struct {
	inflight int
	tokens   int64    // estimated prompt tokens of the slots held
	lim      *limiter // with Settings.Adaptive on; created at the first grant
	// lastRelease is the time of the last release, for the engine's service
	// time (adaptive limits only).
	lastRelease time.Time
}

type waiterState uint8

const (
	waiting waiterState = iota
	granted
	failed
)

// waiter is one queued request. Its fields are guarded by Controller.mu; the
// waiting goroutine owns it and alone decides its end, except that a grant
// or a final error is delivered by closing ready.
type waiter struct {
	q      *queue
	elem   *list.Element
	sel    func(func(string) bool) (string, error)
	pair   func(hasSlot, hasSeat func(string) bool) (string, string, error)
	ready  chan struct{} // closed on grant or final error
	poke   chan struct{} // cap 1: "you are head" / "re-select"
	enq    time.Time
	band   int    // arrival band
	seq    uint64 // arrival order over all bands
	tokens int64
	cached func(string) int64
	decTok int64
	side   Side // the side that held it back at its last try
	tenant string
	tq     *tenantQueue  // with tenancy on (fair.go)
	telem  *list.Element // w in tq.waiters

	state      waiterState
	promoted   bool // became head; its goroutine runs the poll timer (until it is displaced)
	needSelect bool // Wake asked the head to re-select
	capped     bool // a cap (not the limit) refused it a worker at least once
	slot       *Slot
	err        error
}

// New builds a controller. Settings are validated; deps may be zero.
func New(s Settings, deps Deps) (*Controller, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if deps.PollInterval < 0 {
		return nil, fmt.Errorf("admission: poll interval must be >= 0, got %v", deps.PollInterval)
	}
	c := &Controller{
		tracer:   deps.Tracer,
		metrics:  deps.Metrics,
		poll:     deps.PollInterval,
		now:      deps.Now,
		settings: s.Clone(),
		workers:  make(map[string]*workerState),
		queues:   make(map[string]*queue),
		seats:    make(map[string]*seatState),
		decCap:   make(map[string]DecodeCapacity),
	}
	if _, ok := c.tracer.(noop.Tracer); ok {
		c.tracer = nil
	}
	if c.metrics == nil {
		c.metrics = noopMetrics{}
	}
	c.fm = noopFeatureMetrics{}
	if fm, ok := c.metrics.(FeatureMetrics); ok {
		c.fm = fm
	}
	if c.poll == 0 {
		c.poll = DefaultPollInterval
	}
	if c.now == nil {
		c.now = time.Now
	}
	c.hasCap = c.hasCapacityLocked
	c.hasSeat = c.hasSeatLocked
	c.dm = noopDecodeMetrics{}
	if dm, ok := c.metrics.(DecodeMetrics); ok {
		c.dm = dm
	}
	c.seatReleases.tau = rateTau
	c.enabled.Store(s.Enabled())
	c.releases.tau = rateTau
	return c, nil
}

// Settings returns the current settings.
func (c *Controller) Settings() Settings {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.settings.Clone()
}

// Acquire admits one client request: it returns a slot on the worker Select
// chose, or an error whose class tells why not (see [OutcomeOf]). It may
// wait up to QueueTimeout. The caller must release the slot exactly once
// when prefill ends (see [Slot]).
func (c *Controller) Acquire(ctx context.Context, req Request) (*Slot, error) {
	if req.Select == nil {
		return nil, errNilSelect
	}
	if !c.enabled.Load() {
		if c.draining.Load() {
			return nil, errShuttingDown
		}
		return c.acquireOff(ctx, req)
	}
	if c.tracer == nil {
		slot, _, err := c.acquire(ctx, req, nil)
		return slot, err
	}
	_, span := c.tracer.Start(ctx, spanWait, trace.WithAttributes(attribute.String(attrQueue, req.Queue)))
	var limited bool
	slot, info, err := c.acquire(ctx, req, &limited)
	span.SetAttributes(
		attribute.String(attrOutcome, OutcomeOf(err).String()),
		attribute.Int(attrQueuePosition, info.pos))
	if limited {
		span.SetAttributes(shareLimitedAttr())
	}
	if info.band != "" {
		span.SetAttributes(attribute.String(attrBand, info.band))
	}
	if info.tokens {
		span.SetAttributes(attribute.Int64(attrTokens, max(req.Tokens, 1)))
	}
	if info.sideKnown {
		span.SetAttributes(attribute.String(attrSide, info.side.String()))
	}
	if slot != nil {
		span.SetAttributes(attribute.String(attrWorker, slot.worker))
		_, slot.span = c.tracer.Start(ctx, spanSlot, trace.WithAttributes(attribute.String(attrSlotWorker, slot.worker)))
		if st := slot.seat; st != nil {
			span.SetAttributes(attribute.String(attrDecodeWorker, st.worker))
			_, st.span = c.tracer.Start(ctx, spanSeat, trace.WithAttributes(attribute.String(attrSlotWorker, st.worker)))
		}
	}
	span.End()
	return slot, err
}

func alwaysCapacity(string) bool { return true }
func neverCapacity(string) bool  { return false }

// acquireOff is the admission-off path: no lock, no queue, no counters.
func (c *Controller) acquireOff(ctx context.Context, req Request) (*Slot, error) {
	if ctx.Err() != nil {
		return nil, cancelled(ctx)
	}
	worker, err := callSelect(req.Select, alwaysCapacity)
	switch {
	case err == nil:
		return newSlot(c, worker, nil), nil
	case errors.Is(err, ErrNoCapacity):
		// No queue exists to wait in.
		return nil, errQueueFull
	default:
		return nil, err
	}
}

// acquireInfo is what the wait span reports: the queue position at entry
// (1 = head; 0 when the request did not queue), the band's name (with bands
// configured) and whether a token budget applied.
type acquireInfo struct {
	pos    int
	band   string
	tokens bool
	// side held the request back (it waited or was rejected), with decode
	// seats on.
	side      Side
	sideKnown bool
}

// acquire is the admission-on path. When shareLimited is not nil it is set
// if a cap (cluster admission's share) held the request back.
func (c *Controller) acquire(ctx context.Context, req Request, shareLimited *bool) (slot *Slot, info acquireInfo, err error) {
	// Like x/sync/semaphore: fail rather than admit a request already gone.
	if ctx.Err() != nil {
		return nil, info, cancelled(ctx)
	}
	c.mu.Lock()
	if c.draining.Load() {
		c.rejectLocked(req.Queue, ShuttingDown)
		c.mu.Unlock()
		return nil, info, errShuttingDown
	}
	if !c.settings.Enabled() { // Update turned admission off meanwhile
		c.mu.Unlock()
		slot, err := c.acquireOff(ctx, req)
		return slot, info, err
	}
	band := c.settings.BandOf(req.Priority)
	if c.settings.numBands() > 1 {
		info.band = c.settings.BandName(band)
	}
	info.tokens = c.settings.MaxInflightTokensPerWorker > 0
	q := c.queues[req.Queue]
	c.caps.hit = false
	side := SidePrefill // the side that holds the request back
	if q != nil {
		side = q.side
	}
	if q == nil || c.outranksHeadLocked(q, band) {
		// Fast path: nobody waits for this pool, or every waiter ranks
		// below this request (a higher priority band).
		c.bindLocked(req.Tokens, req.CachedTokens)
		c.curDecode = req.DecodeTokens
		sel := c.selectLocked(req.Select, req.SelectPair, true)
		if sel.err == nil {
			slot := c.grantSelLocked(sel)
			c.unbindLocked()
			c.observeWaitLocked(req.Queue, sel.prefill, 0, band)
			c.mu.Unlock()
			return slot, info, nil
		}
		c.unbindLocked()
		if !errors.Is(sel.err, ErrNoCapacity) {
			c.mu.Unlock()
			return nil, info, sel.err
		}
		side = c.sideOfLocked(sel.err)
	} else {
		// Waiters exist: the newcomer goes behind them, but a request whose
		// model has no usable worker is answered now (503/404, not 429).
		// The probe denies all capacity so a stateful policy is not driven
		// into choosing a worker.
		if _, err := callSelect(req.Select, neverCapacity); err != nil && !errors.Is(err, ErrNoCapacity) {
			c.mu.Unlock()
			return nil, info, err
		}
	}
	capped := c.caps.hit // read now: a displacement below lets other heads select
	// Order: availability first (above), then the queue bound, then the
	// predicted wait.
	if c.tenantFullLocked(req.Tenant) {
		c.rejectLocked(req.Queue, TenantQueueFull)
		c.mu.Unlock()
		return nil, info, errTenantFull
	}
	var victim *waiter
	if c.queued >= c.settings.QueueSize {
		if victim = c.victimLocked(band); victim == nil {
			info.side, info.sideKnown = side, c.seatsOnLocked()
			if side == SideDecode {
				c.rejectLocked(req.Queue, DecodeQueueFull)
				c.mu.Unlock()
				return nil, info, errDecodeFull
			}
			c.rejectLocked(req.Queue, QueueFull)
			c.mu.Unlock()
			return nil, info, errQueueFull
		}
	}
	timeout := c.settings.QueueTimeout
	if c.settings.EarlyRejection {
		if req.MaxWait > 0 {
			timeout = min(timeout, req.MaxWait)
		}
		if c.predictedWaitLocked(c.fairPositionLocked(q, band, req.Tenant)) > timeout {
			c.rejectLocked(req.Queue, PredictedTimeout)
			c.mu.Unlock()
			return nil, info, errPredicted
		}
	}
	if victim != nil {
		c.displaceLocked(victim)
	}
	w, pos := c.enqueueLocked(req)
	info.pos = pos
	w.capped = capped // the fast path found no worker because of a cap
	w.side = side
	if pos == 1 {
		w.q.side = side // the new head: what holds it back holds the queue back
	}
	seats := c.seatsOnLocked()
	c.mu.Unlock()

	slot, err = c.wait(ctx, w, timeout)
	if shareLimited != nil {
		*shareLimited = w.capped // w left the queue under the lock before wait returned
	}
	if seats {
		c.mu.Lock()
		info.side, info.sideKnown = w.side, true
		c.mu.Unlock()
	}
	return slot, info, err
}

// victimLocked returns the waiter a newcomer of band may displace from a
// full queue: with priority bands, the lowest-ranked waiter of all queues
// (lowest effective band, then latest arrival), if it ranks below the
// newcomer. The bound stays global and no band ever gives way to a lower
// one. nil when there is none.
func (c *Controller) victimLocked(band int) *waiter {
	n := c.settings.numBands()
	if n == 1 || c.settings.QueueSize == 0 || c.queued > c.settings.QueueSize {
		return nil // no bands; never waiting; or over a lowered bound: shrink, do not swap
	}
	now := c.now()
	var victim *waiter
	vb := 0
	for _, q := range c.active {
		for b := range q.bands {
			e := q.bands[b].Back() // the latest of a list has aged least
			if e == nil {
				continue
			}
			w := e.Value.(*waiter)
			eb := c.effBandLocked(w, now)
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
	victim.err, victim.state = errDisplaced, failed
	c.observeWaitLocked(q.key, "", c.now().Sub(victim.enq), victim.band)
	c.rejectLocked(q.key, Displaced)
	if c.removeLocked(victim) {
		c.dispatchQueueLocked(q) // its queue has a new head
	}
	close(victim.ready)
}

// predictedWaitLocked estimates the wait of a request at position pos: the
// time for pos slots to be released at the measured release rate. 0 while
// the rate is unknown (no prediction, no early rejection).
func (c *Controller) predictedWaitLocked(pos int) time.Duration {
	rate, ok := c.releases.rate(c.now())
	if !ok || rate <= 0 {
		return 0
	}
	return time.Duration(float64(pos) / rate * float64(time.Second))
}

// callSelect runs the callback; a panic becomes that request's error rather
// than leaving the controller's lock held forever.
func callSelect(sel func(func(string) bool) (string, error), hasCap func(string) bool) (worker string, err error) {
	defer func() {
		if r := recover(); r != nil {
			worker, err = "", fmt.Errorf("admission: Select panicked: %v", r)
		}
	}()
	worker, err = sel(hasCap)
	if err == nil && worker == "" {
		err = errEmptyWorker
	}
	return worker, err
}

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

func (c *Controller) rejectLocked(queue string, o Outcome) {
	c.rejections[o]++
	c.metrics.IncRejection(queue, o)
}

func (c *Controller) observeWaitLocked(queue, worker string, d time.Duration, band int) {
	c.waits.add(d)
	c.metrics.ObserveWait(queue, worker, d)
	if n := c.settings.numBands(); n > 1 {
		c.fm.ObserveBandWait(c.settings.BandName(min(band, n-1)), d)
	}
}

// observeWaiterLocked records the wait of w, which ends now (worker: the one
// whose slot ended it, or ""), also as a decode wait when the decode side
// held it back.
func (c *Controller) observeWaiterLocked(w *waiter, worker string) {
	d := c.now().Sub(w.enq)
	c.observeWaitLocked(w.q.key, worker, d, w.band)
	if w.side == SideDecode {
		c.dm.ObserveDecodeWait(w.q.key, d)
	}
}

// enqueueLocked queues req and returns its waiter and its position (1 =
// head).
func (c *Controller) enqueueLocked(req Request) (*waiter, int) {
	q := c.queues[req.Queue]
	band := c.settings.BandOf(req.Priority)
	pos := c.positionLocked(q, band)
	if q == nil {
		q = &queue{key: req.Queue}
		c.queues[req.Queue] = q
		c.active = append(c.active, q)
	}
	c.seq++
	w := &waiter{
		q:      q,
		sel:    req.Select,
		ready:  make(chan struct{}),
		poke:   make(chan struct{}, 1),
		enq:    c.now(),
		band:   band,
		seq:    c.seq,
		tokens: req.Tokens,
		cached: req.CachedTokens,
		pair:   req.SelectPair,
		decTok: req.DecodeTokens,
		tenant: tenantName(req.Tenant),
	}
	w.elem = q.bands[band].PushBack(w)
	tookTurn := c.fairAddLocked(w) // fair.go: a new tenant may take the head
	q.n++
	if pos == 1 || tookTurn && c.headLocked(q) == w {
		// The new head; a displaced one (a lower band) stops polling at its
		// next tick.
		c.promoteLocked(w)
	}
	c.queued++
	c.metrics.AddQueued(q.key, 1)
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

// removeLocked takes w out of its queue and reports whether it was the
// head. Empty queues are dropped so model keys do not accumulate.
func (c *Controller) removeLocked(w *waiter) (wasHead bool) {
	q := w.q
	wasHead = c.headLocked(q) == w
	q.bands[w.band].Remove(w.elem)
	c.fairRemoveLocked(w)
	w.elem = nil
	w.cached = nil
	w.pair = nil
	q.n--
	c.queued--
	c.metrics.AddQueued(q.key, -1)
	c.bandCountLocked(w.band, -1)
	if q.n == 0 {
		delete(c.queues, q.key)
		if i := slices.Index(c.active, q); i >= 0 {
			c.active = slices.Delete(c.active, i, i+1)
		}
	} else if wasHead {
		c.promoteLocked(c.headLocked(q))
	}
	return wasHead
}

// tryHeadLocked lets q's head select once. It reports whether the head left
// the queue (granted or failed), i.e. whether the next head should try.
func (c *Controller) tryHeadLocked(q *queue) bool {
	w := c.headLocked(q)
	if w == nil {
		return false
	}
	enabled := c.settings.Enabled()
	c.bindLocked(w.tokens, w.cached)
	c.curDecode = w.decTok
	defer c.unbindLocked()
	c.caps.hit = false
	sel := c.selectLocked(w.sel, w.pair, enabled)
	err := sel.err
	w.capped = w.capped || (err != nil && c.caps.hit)
	switch {
	case err == nil:
		w.slot = c.grantSelLocked(sel)
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
	c.removeLocked(w)
	close(w.ready)
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
	n := len(c.active)
	if n == 0 {
		return
	}
	c.rot++
	start := c.rot % n
	c.scratch = append(c.scratch[:0], c.active[start:]...)
	c.scratch = append(c.scratch, c.active[:start]...)
	for _, q := range c.scratch {
		q.blocked = false
	}
	for progress := true; progress; {
		progress = false
		for _, q := range c.scratch {
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
	clear(c.scratch)
	c.scratch = c.scratch[:0]
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
		case <-w.ready:
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
		c.cancelled++
		c.giveBackLocked(s, ReleaseCancelled)
		if s.seat != nil {
			s.seat.released.Store(true)
			c.giveBackSeatLocked(s.seat)
		}
		if c.queued > 0 {
			c.dispatchAllLocked()
		}
		return nil, cancelled(ctx)
	case failed:
		return nil, w.err
	}
	q := w.q
	wasHead := c.removeLocked(w)
	c.observeWaiterLocked(w, "")
	if wasHead {
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
	c.cancelled++
	return nil, cancelled(ctx)
}

// Wake tells every queue's head to re-select: call it on registry events
// (worker added, removed, replaced, health changed). It does not run Select
// itself (the heads do, in their own goroutines) and returns at once, but it
// takes the controller's lock: do not call it while holding a lock that
// Select takes.
func (c *Controller) Wake() {
	c.mu.Lock()
	for _, q := range c.active {
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
	delete(c.workers, worker)
	c.metrics.DeleteWorker(worker)
	c.removeSeatsLocked(worker)
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
	tenancy := c.settings.Tenants.on()
	c.settings = s.Clone()
	c.enabled.Store(s.Enabled())
	if c.settings.Tenants.on() != tenancy {
		c.refairLocked()
	}
	c.noteKVKnownLocked()
	for w, ws := range c.workers {
		switch {
		case ws.lim == nil:
		case !s.Adaptive.On():
			ws.lim = nil
		default:
			if l := min(max(ws.lim.limit, s.Adaptive.Min), s.Adaptive.Max); l != ws.lim.limit {
				ws.lim.limit = l
				c.fm.SetLimit(w, l)
			}
		}
	}
	if c.settings.numBands() > 1 {
		for i := range c.settings.numBands() {
			c.reportBandLocked(i)
		}
	}
	if c.queued > 0 {
		c.dispatchAllLocked()
		// The ranking may have changed: make sure each head polls.
		for _, q := range c.active {
			if h := c.headLocked(q); h != nil {
				c.promoteLocked(h)
			}
		}
	}
	return nil
}
