package worker

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// BreakerState is a circuit breaker state.
type BreakerState int32

// The circuit breaker states.
const (
	BreakerClosed BreakerState = iota
	BreakerOpen
	BreakerHalfOpen
)

func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half_open"
	}
	return fmt.Sprintf("BreakerState(%d)", int32(s))
}

// BreakerConfig configures every worker's circuit breaker. Zero fields take
// the defaults of DefaultBreakerConfig (the Rust gateway's defaults).
type BreakerConfig struct {
	// FailureThreshold consecutive failures open a closed breaker (10).
	FailureThreshold int
	// SuccessThreshold successes close a half-open breaker (3).
	SuccessThreshold int
	// Timeout is how long a breaker stays open before it lets requests
	// through again, half-open (60s).
	Timeout time.Duration
	// Disabled makes every breaker always allow and ignore outcomes.
	Disabled bool
}

// DefaultBreakerConfig returns the default breaker configuration.
func DefaultBreakerConfig() BreakerConfig {
	return BreakerConfig{FailureThreshold: 10, SuccessThreshold: 3, Timeout: 60 * time.Second}
}

// Normalized fills zero fields with defaults and rejects negative ones. It is
// the one place breaker settings are checked.
func (c BreakerConfig) Normalized() (BreakerConfig, error) {
	d := DefaultBreakerConfig()
	var errs []error
	if c.FailureThreshold < 0 {
		errs = append(errs, fmt.Errorf("breaker failure threshold %d must be >= 1", c.FailureThreshold))
	} else if c.FailureThreshold == 0 {
		c.FailureThreshold = d.FailureThreshold
	}
	if c.SuccessThreshold < 0 {
		errs = append(errs, fmt.Errorf("breaker success threshold %d must be >= 1", c.SuccessThreshold))
	} else if c.SuccessThreshold == 0 {
		c.SuccessThreshold = d.SuccessThreshold
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("breaker timeout %v must be positive", c.Timeout))
	} else if c.Timeout == 0 {
		c.Timeout = d.Timeout
	}
	return c, errors.Join(errs...)
}

// IsFailureStatus reports whether an HTTP status from a worker counts as a
// breaker failure: 408, 500, 502, 503 and 504. 429 means the worker is busy,
// not broken, so it is not a failure.
func IsFailureStatus(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// Transition reasons passed to a breaker's observer.
const (
	ReasonFailures        = "consecutive_failures" // closed -> open
	ReasonHalfOpenFailure = "half_open_failure"    // half_open -> open
	ReasonTimeout         = "open_timeout"         // open -> half_open, Timeout passed
	ReasonHealthProbe     = "health_probe"         // open -> half_open, an active health probe passed
	ReasonHalfOpenSuccess = "half_open_successes"  // half_open -> closed
)

// BreakerObserver is told of every state change of a breaker, after the change, outside its lock. It
// must not block.
type BreakerObserver func(from, to BreakerState, reason string)

// Breaker is one worker's circuit breaker. Closed: requests flow and
// consecutive failures are counted. Open: requests are refused until Timeout
// has passed since opening, or until an active health probe passes
// (ProbeSucceeded); the first Allow or State call after the timeout turns
// the breaker HalfOpen (lazily: no goroutine, no event). HalfOpen: requests
// flow; SuccessThreshold successes close it, any failure reopens it.
type Breaker struct {
	cfg      BreakerConfig
	clock    func() time.Time
	observer BreakerObserver // set before the breaker is shared; nil = none

	// state is read without the lock on the hot path.
	state atomic.Int32
	// failures mirrors the closed-state failure count so that RecordSuccess
	// can skip the lock when there is nothing to reset.
	failures atomic.Int32

	mu        sync.Mutex
	successes int       // half-open successes, under mu
	openedAt  time.Time // under mu
}

// NewBreaker returns a closed breaker. cfg must be normalised
// (BreakerConfig.Normalized); clock nil means time.Now.
func NewBreaker(cfg BreakerConfig, clock func() time.Time) *Breaker {
	if clock == nil {
		clock = time.Now
	}
	return &Breaker{cfg: cfg, clock: clock}
}

// Allow reports whether a request may be sent now. An open breaker whose
// timeout has passed turns half-open here.
func (b *Breaker) Allow(now time.Time) bool {
	if b.cfg.Disabled {
		return true
	}
	return b.State(now) != BreakerOpen
}

// State returns the breaker state at now, performing the lazy Open ->
// HalfOpen transition.
func (b *Breaker) State(now time.Time) BreakerState {
	s := BreakerState(b.state.Load())
	if s != BreakerOpen {
		return s
	}
	b.mu.Lock()
	changed := false
	if BreakerState(b.state.Load()) == BreakerOpen && !now.Before(b.openedAt.Add(b.cfg.Timeout)) {
		b.successes = 0
		b.state.Store(int32(BreakerHalfOpen))
		changed = true
	}
	st := BreakerState(b.state.Load())
	b.mu.Unlock()
	if changed {
		b.notify(BreakerOpen, BreakerHalfOpen, ReasonTimeout)
	}
	return st
}

// ProbeSucceeded turns an open breaker half-open at once: an active health probe just saw the worker
// serve, so there is no reason to wait out the rest of Timeout (Envoy un-ejects a host on an active
// health-check success the same way). Half-open traffic then decides: SuccessThreshold successes close
// the breaker, one failure reopens it. It reports whether the breaker changed state.
func (b *Breaker) ProbeSucceeded() bool {
	if b.cfg.Disabled || BreakerState(b.state.Load()) != BreakerOpen {
		return false
	}
	b.mu.Lock()
	changed := BreakerState(b.state.Load()) == BreakerOpen
	if changed {
		b.successes = 0
		b.state.Store(int32(BreakerHalfOpen))
	}
	b.mu.Unlock()
	if changed {
		b.notify(BreakerOpen, BreakerHalfOpen, ReasonHealthProbe)
	}
	return changed
}

func (b *Breaker) notify(from, to BreakerState, reason string) {
	if b.observer != nil {
		b.observer(from, to, reason)
	}
}

// RecordSuccess records a successful (or non-failure) outcome.
func (b *Breaker) RecordSuccess() {
	if b.cfg.Disabled {
		return
	}
	// Fast path: closed with no failures to reset.
	if BreakerState(b.state.Load()) == BreakerClosed && b.failures.Load() == 0 {
		return
	}
	b.mu.Lock()
	closed := false
	switch BreakerState(b.state.Load()) {
	case BreakerClosed:
		b.failures.Store(0)
	case BreakerHalfOpen:
		b.successes++
		if b.successes >= b.cfg.SuccessThreshold {
			b.failures.Store(0)
			b.successes = 0
			b.state.Store(int32(BreakerClosed))
			closed = true
		}
	case BreakerOpen:
		// A request admitted before the breaker opened finished well; the
		// breaker still waits out its timeout.
	}
	b.mu.Unlock()
	if closed {
		b.notify(BreakerHalfOpen, BreakerClosed, ReasonHalfOpenSuccess)
	}
}

// RecordFailure records a failed outcome: a failure status or a transport
// error.
func (b *Breaker) RecordFailure() {
	if b.cfg.Disabled {
		return
	}
	b.mu.Lock()
	from, reason := BreakerState(b.state.Load()), ""
	switch from {
	case BreakerClosed:
		n := b.failures.Add(1)
		if int(n) >= b.cfg.FailureThreshold {
			b.open()
			reason = ReasonFailures
		}
	case BreakerHalfOpen:
		b.open()
		reason = ReasonHalfOpenFailure
	case BreakerOpen:
		// Already open; the timeout runs from the first opening.
	}
	b.mu.Unlock()
	if reason != "" {
		b.notify(from, BreakerOpen, reason)
	}
}

// RecordStatus records an HTTP response status: failure statuses
// (IsFailureStatus) count as failures, everything else as success.
func (b *Breaker) RecordStatus(code int) {
	if IsFailureStatus(code) {
		b.RecordFailure()
		return
	}
	b.RecordSuccess()
}

// open moves to Open; b.mu must be held.
func (b *Breaker) open() {
	b.openedAt = b.clock()
	b.successes = 0
	b.failures.Store(0)
	b.state.Store(int32(BreakerOpen))
}
