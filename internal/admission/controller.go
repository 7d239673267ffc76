package admission

import (
	"container/list"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sluicegw/sluice/internal/waitq"
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
	// PredictedTTFT is the time from dispatch to the first token that the
	// placement policy predicts for this request on the best worker it
	// could pick (predicted_latency), or 0 when nothing is predicted. With
	// Settings.EarlyRejection and a MaxWait it is part of the predicted
	// wait: a request is refused when its predicted queue wait plus this
	// exceeds MaxWait, a slot free now included, since the client's bound
	// is on its wait for the answer to start.
	PredictedTTFT time.Duration

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
	// Resumed marks a request that already waited once and comes back for
	// a new slot (a stream continued after its decode worker failed): it
	// selects at once, ahead of the waiters, and only waits when no worker
	// has room (then in its priority's band; the caller gives it the top).
	Resumed bool
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
// PD front end of one gateway process: a gate (capacity, gate.go) and the
// queues in front of it (ordered by order.go), under one lock. See the
// package documentation for its concurrency model.
type Controller struct {
	tracer trace.Tracer // nil: no spans
	m      Metrics      // never nil: NopMetrics without one
	poll   time.Duration
	now    func() time.Time

	// enabled mirrors settings.Enabled() so the admission-off path takes no
	// lock.
	enabled atomic.Bool
	// draining is set once, under mu, by Drain; read under mu on the
	// admission-on path and atomically on the lock-free off path.
	draining atomic.Bool

	mu       sync.Mutex
	settings Settings
	gate     gate     // capacity: slots and seats
	qs       queueSet // the waiters
	stats    stats    // what Status and RetryAfter report
}

// queueSet is every queue's waiters, with the counts over all of them.
type queueSet struct {
	byKey   map[string]*queue // only non-empty queues
	active  []*queue          // the same queues, in a stable order for rotation
	scratch []*queue          // dispatch's rotated copy of active, reused
	rot     int
	n       int // waiters over all queues
	seq     uint64
	byBand  [MaxBands]int // waiters by arrival band
	// byTenant counts waiters by tenant, with tenancy on (tenants.go).
	byTenant map[string]int
	// kept are the rates of queues dropped when they emptied, for the next
	// queue of their key (share.go).
	kept map[string]*[MaxBands]*shareState
}

// stats are the counts and rates behind Status and RetryAfter (status.go).
type stats struct {
	rejections   [numOutcomes]uint64
	cancelled    uint64 // waiters whose context ended in the queue
	waits        waitRing
	releases     rateEstimator
	seatReleases rateEstimator
}

type waiterState uint8

const (
	waiting waiterState = iota
	granted
	failed
)

// waiter is one queued request. Its fields are guarded by Controller.mu; the
// waiting goroutine owns it and alone decides its end, except that a grant
// or a final error is delivered by closing its Ready channel: it is an entry
// of its band's arrival list (fifo.go), which closes it.
type waiter struct {
	waitq.Waiter[*waiter]
	q      *queue
	ask    ask           // its callbacks and cost; dropped when it leaves the queue
	poke   chan struct{} // cap 1: "you are head" / "re-select"
	enq    time.Time
	band   int    // arrival band
	seq    uint64 // arrival order over all bands
	side   Side   // the side that held it back at its last try
	tenant string
	tq     *tenantQueue  // with fairness on (roundrobin.go)
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
		m:        deps.Metrics,
		poll:     deps.PollInterval,
		now:      deps.Now,
		settings: s.Clone(),
		qs:       queueSet{byKey: make(map[string]*queue)},
	}
	if _, ok := c.tracer.(noop.Tracer); ok {
		c.tracer = nil
	}
	if c.m == nil {
		c.m = NopMetrics{}
	}
	if c.poll == 0 {
		c.poll = DefaultPollInterval
	}
	if c.now == nil {
		c.now = time.Now
	}
	c.gate.init(&c.settings, c.m, c.now)
	c.stats.releases.tau = rateTau
	c.stats.seatReleases.tau = rateTau
	c.enabled.Store(s.Enabled())
	return c, nil
}

// Settings returns the current settings.
func (c *Controller) Settings() Settings {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.settings.Clone()
}
