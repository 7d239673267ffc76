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

	attrOutcome       = "sluice.admission.outcome"
	attrQueuePosition = "sluice.admission.queue_position"
	attrWorker        = "sluice.admission.worker"
	attrQueue         = "sluice.admission.queue"
	attrSlotWorker    = "sluice.worker"
	attrReleaseReason = "sluice.admission.release_reason"
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
	poll    time.Duration
	now     func() time.Time
	hasCap  func(string) bool // c.hasCapacityLocked, bound once

	// enabled mirrors settings.Enabled() so the admission-off path takes no
	// lock.
	enabled atomic.Bool

	mu       sync.Mutex
	settings Settings
	workers  map[string]*workerState
	queues   map[string]*queue // only non-empty queues
	active   []*queue          // the same queues, in a stable order for rotation
	scratch  []*queue          // dispatch's rotated copy of active, reused
	rot      int
	queued   int // waiters over all queues

	rejections [numOutcomes]uint64
	cancelled  uint64 // waiters whose context ended in the queue
	waits      waitRing
	releases   rateEstimator
	caps       capState // cluster admission's per-worker shares (caps.go)
}

type workerState struct{ inflight int }

type queue struct {
	key     string
	waiters list.List // of *waiter, arrival order
	blocked bool      // dispatch scratch: head found no capacity this round
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
	q     *queue
	elem  *list.Element
	sel   func(func(string) bool) (string, error)
	ready chan struct{} // closed on grant or final error
	poke  chan struct{} // cap 1: "you are head" / "re-select"
	enq   time.Time

	state      waiterState
	promoted   bool // became head; its goroutine runs the poll timer
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
		settings: s,
		workers:  make(map[string]*workerState),
		queues:   make(map[string]*queue),
	}
	if _, ok := c.tracer.(noop.Tracer); ok {
		c.tracer = nil
	}
	if c.metrics == nil {
		c.metrics = noopMetrics{}
	}
	if c.poll == 0 {
		c.poll = DefaultPollInterval
	}
	if c.now == nil {
		c.now = time.Now
	}
	c.hasCap = c.hasCapacityLocked
	c.enabled.Store(s.Enabled())
	c.releases.tau = rateTau
	return c, nil
}

// Settings returns the current settings.
func (c *Controller) Settings() Settings {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.settings
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
		return c.acquireOff(ctx, req)
	}
	if c.tracer == nil {
		slot, _, err := c.acquire(ctx, req, nil)
		return slot, err
	}
	_, span := c.tracer.Start(ctx, spanWait, trace.WithAttributes(attribute.String(attrQueue, req.Queue)))
	var limited bool
	slot, pos, err := c.acquire(ctx, req, &limited)
	span.SetAttributes(
		attribute.String(attrOutcome, OutcomeOf(err).String()),
		attribute.Int(attrQueuePosition, pos))
	if limited {
		span.SetAttributes(shareLimitedAttr())
	}
	if slot != nil {
		span.SetAttributes(attribute.String(attrWorker, slot.worker))
		_, slot.span = c.tracer.Start(ctx, spanSlot, trace.WithAttributes(attribute.String(attrSlotWorker, slot.worker)))
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

// acquire is the admission-on path. pos is the queue position at entry
// (1 = head), 0 when the request did not queue. When shareLimited is not
// nil it is set if a cap held the request back while it waited.
func (c *Controller) acquire(ctx context.Context, req Request, shareLimited *bool) (slot *Slot, pos int, err error) {
	// Like x/sync/semaphore: fail rather than admit a request already gone.
	if ctx.Err() != nil {
		return nil, 0, cancelled(ctx)
	}
	c.mu.Lock()
	if !c.settings.Enabled() { // Update turned admission off meanwhile
		c.mu.Unlock()
		slot, err := c.acquireOff(ctx, req)
		return slot, 0, err
	}
	q := c.queues[req.Queue]
	if q == nil {
		// Fast path: nobody waits for this pool.
		c.caps.hit = false
		worker, err := callSelect(req.Select, c.hasCap)
		if err == nil && !c.hasCapacityLocked(worker) {
			err = ErrNoCapacity // the callback ignored hasCapacity
		}
		if err == nil {
			slot := c.grantLocked(worker)
			c.observeWaitLocked(req.Queue, worker, 0)
			c.mu.Unlock()
			return slot, 0, nil
		}
		if !errors.Is(err, ErrNoCapacity) {
			c.mu.Unlock()
			return nil, 0, err
		}
	} else {
		// Waiters exist: the newcomer goes behind them, but a request whose
		// model has no usable worker is answered now (503/404, not 429).
		// The probe denies all capacity so a stateful policy is not driven
		// into choosing a worker.
		if _, err := callSelect(req.Select, neverCapacity); err != nil && !errors.Is(err, ErrNoCapacity) {
			c.mu.Unlock()
			return nil, 0, err
		}
	}
	// Order: availability first (above), then the queue bound.
	if c.queued >= c.settings.QueueSize {
		c.rejectLocked(req.Queue, QueueFull)
		c.mu.Unlock()
		return nil, 0, errQueueFull
	}
	w, pos := c.enqueueLocked(req)
	w.capped = q == nil && c.caps.hit
	timeout := c.settings.QueueTimeout
	c.mu.Unlock()

	slot, err = c.wait(ctx, w, timeout)
	if shareLimited != nil {
		*shareLimited = w.capped // w left the queue under the lock before wait returned
	}
	return slot, pos, err
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

func (c *Controller) hasCapacityLocked(worker string) bool {
	n := 0
	if ws := c.workers[worker]; ws != nil {
		n = ws.inflight
	}
	return n < c.settings.MaxInflightPerWorker && c.capAllowsLocked(worker, n)
}

// grantLocked reserves a slot on worker: counted while admission is on,
// uncounted otherwise.
func (c *Controller) grantLocked(worker string) *Slot {
	if !c.settings.Enabled() {
		return newSlot(c, worker, nil)
	}
	ws := c.workers[worker]
	if ws == nil {
		ws = &workerState{}
		c.workers[worker] = ws
	}
	ws.inflight++
	c.metrics.SetInflight(worker, ws.inflight)
	return newSlot(c, worker, ws)
}

// releaseSlot frees a counted slot and lets the heads select.
func (c *Controller) releaseSlot(s *Slot) {
	c.mu.Lock()
	if c.giveBackLocked(s) {
		c.releases.observe(c.now())
	}
	if c.queued > 0 {
		c.dispatchAllLocked()
	}
	c.mu.Unlock()
}

// giveBackLocked decrements s's worker unless the worker was removed (or
// removed and re-added) since the grant.
func (c *Controller) giveBackLocked(s *Slot) bool {
	if s.ws == nil || c.workers[s.worker] != s.ws {
		return false
	}
	s.ws.inflight--
	c.metrics.SetInflight(s.worker, s.ws.inflight)
	return true
}

func (c *Controller) rejectLocked(queue string, o Outcome) {
	c.rejections[o]++
	c.metrics.IncRejection(queue, o)
}

func (c *Controller) observeWaitLocked(queue, worker string, d time.Duration) {
	c.waits.add(d)
	c.metrics.ObserveWait(queue, worker, d)
}

func (c *Controller) enqueueLocked(req Request) (*waiter, int) {
	q := c.queues[req.Queue]
	if q == nil {
		q = &queue{key: req.Queue}
		c.queues[req.Queue] = q
		c.active = append(c.active, q)
	}
	w := &waiter{
		q:     q,
		sel:   req.Select,
		ready: make(chan struct{}),
		poke:  make(chan struct{}, 1),
		enq:   c.now(),
	}
	w.elem = q.waiters.PushBack(w)
	if q.waiters.Len() == 1 {
		c.promoteLocked(w)
	}
	c.queued++
	c.metrics.AddQueued(q.key, 1)
	return w, q.waiters.Len()
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
	wasHead = q.waiters.Front() == w.elem
	q.waiters.Remove(w.elem)
	w.elem = nil
	c.queued--
	c.metrics.AddQueued(q.key, -1)
	if q.waiters.Len() == 0 {
		delete(c.queues, q.key)
		if i := slices.Index(c.active, q); i >= 0 {
			c.active = slices.Delete(c.active, i, i+1)
		}
	} else if wasHead {
		c.promoteLocked(q.waiters.Front().Value.(*waiter))
	}
	return wasHead
}

// tryHeadLocked lets q's head select once. It reports whether the head left
// the queue (granted or failed), i.e. whether the next head should try.
func (c *Controller) tryHeadLocked(q *queue) bool {
	e := q.waiters.Front()
	if e == nil {
		return false
	}
	w := e.Value.(*waiter)
	enabled := c.settings.Enabled()
	hasCap := c.hasCap
	if !enabled {
		hasCap = alwaysCapacity
	}
	c.caps.hit = false
	worker, err := callSelect(w.sel, hasCap)
	if err == nil && enabled && !c.hasCapacityLocked(worker) {
		err = ErrNoCapacity
	}
	w.capped = w.capped || (err != nil && c.caps.hit)
	switch {
	case err == nil:
		w.slot = c.grantLocked(worker)
		w.state = granted
	case errors.Is(err, ErrNoCapacity):
		if enabled {
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
	c.observeWaitLocked(w.q.key, granted, c.now().Sub(w.enq))
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
			if w.state == waiting {
				c.dispatchQueueLocked(w.q)
			}
			c.mu.Unlock()
			poll.Reset(c.poll)
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
		c.giveBackLocked(s)
		if c.queued > 0 {
			c.dispatchAllLocked()
		}
		return nil, cancelled(ctx)
	case failed:
		return nil, w.err
	}
	q := w.q
	wasHead := c.removeLocked(w)
	c.observeWaitLocked(q.key, "", c.now().Sub(w.enq))
	if wasHead {
		c.dispatchQueueLocked(q)
	}
	if why == QueueTimeout {
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
		if e := q.waiters.Front(); e != nil {
			w := e.Value.(*waiter)
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
	c.mu.Unlock()
}

// Update applies new settings at once. Raising the limit or the queue lets
// the heads select now; lowering the limit never revokes granted slots;
// lowering the queue size never evicts waiters but rejects newcomers while
// the queue is over the bound; a new timeout applies to new waiters;
// turning admission off admits every waiter (uncounted) and stops counting.
// Slots granted while admission was off stay uncounted if it is turned on
// again.
func (c *Controller) Update(s Settings) error {
	if err := s.Validate(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.settings = s
	c.enabled.Store(s.Enabled())
	if c.queued > 0 {
		c.dispatchAllLocked()
	}
	return nil
}
