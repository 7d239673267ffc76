package concurrency

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicegw/sluice/internal/fielderr"
	"github.com/sluicegw/sluice/internal/waitq"
)

// Rejections. Both wrap ErrRejected.
var (
	// ErrRejected is the class of every refusal of the limiter.
	ErrRejected = errors.New("gateway concurrency limit")
	// ErrQueueFull: no token, and QueueSize requests already wait (or QueueSize is 0).
	ErrQueueFull = fmt.Errorf("%w: queue full", ErrRejected)
	// ErrQueueTimeout: the request waited QueueTimeout without getting a token.
	ErrQueueTimeout = fmt.Errorf("%w: queue timeout", ErrRejected)
)

// Settings are the gateway limit's flags (SMG's --max-concurrent-requests, --queue-size,
// --queue-timeout-secs, --rate-limit-tokens-per-second); internal/config binds the flags to these
// fields and nothing else. SMG accepts the queue flags without a limit and ignores them (its Helm
// chart always passes them), so Validate checks every field whether or not the limit is on.
type Settings struct {
	// MaxConcurrent is the bucket's capacity: requests in flight at once without refill; <= 0 = off.
	MaxConcurrent int
	// QueueSize bounds the waiting requests; 0 rejects at once when no token is left.
	QueueSize int
	// QueueTimeout bounds one request's wait. Must be positive.
	QueueTimeout time.Duration
	// TokensPerSecond adds tokens over time besides the ones requests give back (0 = none: a pure
	// concurrency bound).
	TokensPerSecond int
}

// Enabled reports whether the limit is on.
func (s Settings) Enabled() bool { return s.MaxConcurrent > 0 }

var fieldNames = map[string]string{
	"QueueSize": "queue size", "QueueTimeout": "queue timeout", "TokensPerSecond": "refill rate",
}

// Validate reports every invalid field, each a *[fielderr.Error] (errors.Join) keyed by the field's
// Go name. A limit that is off is valid; [New] refuses to build one.
func (s Settings) Validate() error {
	l := fielderr.New("concurrency", fieldNames)
	if s.QueueSize < 0 {
		l.Add("QueueSize", "must be at least 0, got %d", s.QueueSize)
	}
	if s.QueueTimeout <= 0 {
		l.Add("QueueTimeout", "must be positive, got %v (use a queue size of 0 to never wait)", s.QueueTimeout)
	}
	if s.TokensPerSecond < 0 {
		l.Add("TokensPerSecond", "must be at least 0, got %d", s.TokensPerSecond)
	}
	return l.Err()
}

// Metrics receives the limiter's state changes. Calls happen under the limiter's mutex, in order.
type Metrics interface {
	SetInflight(n int)
	SetQueued(n int)
	ObserveWait(d time.Duration)
	// IncRejection counts a refusal: "queue_full" or "queue_timeout".
	IncRejection(reason string)
}

// Deps are the limiter's collaborators.
type Deps struct {
	Metrics Metrics
	// Now is the clock of the refill (time.Now when nil). Waits use timers, which testing/synctest
	// drives.
	Now func() time.Time
}

// Limiter is the gateway-wide token bucket. It is safe for concurrent use.
type Limiter struct {
	cfg     Settings
	metrics Metrics
	now     func() time.Time

	mu       sync.Mutex
	tokens   float64   // available, 0..Capacity
	last     time.Time // last refill
	inflight int       // permits held
	waiters  waitq.Queue[waiter]
}

type waiter struct {
	nudge chan struct{} // capacity 1: "you are the head now" (re-arm the refill timer)
}

// New builds a limiter with a full bucket.
func New(cfg Settings, d Deps) (*Limiter, error) {
	if !cfg.Enabled() {
		return nil, fmt.Errorf("concurrency: the limit is off (max concurrent %d): build no limiter", cfg.MaxConcurrent)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Metrics == nil {
		d.Metrics = nopMetrics{}
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	l := &Limiter{cfg: cfg, metrics: d.Metrics, now: d.Now, tokens: float64(cfg.MaxConcurrent)}
	l.last = l.now()
	l.metrics.SetInflight(0)
	l.metrics.SetQueued(0)
	return l, nil
}

type nopMetrics struct{}

func (nopMetrics) SetInflight(int)            {}
func (nopMetrics) SetQueued(int)              {}
func (nopMetrics) ObserveWait(time.Duration)  {}
func (nopMetrics) IncRejection(reason string) {}

// Permit is one request's token. Release gives it back; it is safe to call more than once.
type Permit struct {
	l        *Limiter
	released atomic.Bool
}

// Release gives the token back (once) and grants waiters.
func (p *Permit) Release() {
	if p == nil || !p.released.CompareAndSwap(false, true) {
		return
	}
	l := p.l
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inflight--
	l.tokens = min(l.tokens+1, float64(l.cfg.MaxConcurrent))
	l.grantLocked()
	l.metrics.SetInflight(l.inflight)
}

// Acquire takes a token, waiting in the queue when none is left. It returns ErrQueueFull,
// ErrQueueTimeout, or the context's error when ctx ends first.
func (l *Limiter) Acquire(ctx context.Context) (*Permit, error) {
	// Cancellation beats a grant: a request already gone takes nothing.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	if l.waiters.Len() > 0 {
		l.grantLocked() // tokens refilled since the last look go to the waiters first
	} else {
		l.refillLocked()
	}
	if l.waiters.Len() == 0 && l.tokens >= 1 {
		l.tokens--
		p := l.grantedLocked()
		l.mu.Unlock()
		return p, nil
	}
	if l.waiters.Len() >= l.cfg.QueueSize {
		l.metrics.IncRejection("queue_full")
		l.mu.Unlock()
		return nil, ErrQueueFull
	}
	w := l.waiters.Push(waiter{nudge: make(chan struct{}, 1)})
	l.metrics.SetQueued(l.waiters.Len())
	start := l.now()
	refill := l.refillTimerLocked(w)
	l.mu.Unlock()
	return l.wait(ctx, w, start, refill)
}

// wait holds queued waiter w until it is granted, ctx ends or the queue timeout passes; refill is
// the timer of the next token (nil when none is due).
func (l *Limiter) wait(ctx context.Context, w *waitq.Waiter[waiter], start time.Time, refill *time.Timer) (*Permit, error) {
	timeout := time.NewTimer(l.cfg.QueueTimeout)
	defer timeout.Stop()
	defer func() {
		if refill != nil {
			refill.Stop()
		}
	}()
	for {
		var refillC <-chan time.Time
		if refill != nil {
			refillC = refill.C
		}
		select {
		case <-w.Ready():
			l.mu.Lock()
			l.metrics.ObserveWait(l.now().Sub(start))
			p := l.grantedLocked()
			l.mu.Unlock()
			return p, nil
		case <-w.Value.nudge:
		case <-refillC:
			refill = nil
			l.mu.Lock()
			l.grantLocked()
			l.mu.Unlock()
		case <-ctx.Done():
			l.leave(w)
			return nil, ctx.Err()
		case <-timeout.C:
			return l.timedOut(w, start)
		}
		// Woken to re-check (nudged as the new head, or the refill timer fired without a grant).
		l.mu.Lock()
		if !w.Granted() {
			if refill != nil {
				refill.Stop()
			}
			refill = l.refillTimerLocked(w)
		}
		l.mu.Unlock()
	}
}

// leave takes a cancelled waiter out of the queue; a grant that raced in is given back, since
// cancellation wins.
func (l *Limiter) leave(w *waitq.Waiter[waiter]) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.Granted() {
		l.tokens = min(l.tokens+1, float64(l.cfg.MaxConcurrent))
		l.grantLocked()
		return
	}
	l.removeLocked(w)
}

// timedOut ends a wait at the queue timeout, unless the grant came just in time: then it is kept.
func (l *Limiter) timedOut(w *waitq.Waiter[waiter], start time.Time) (*Permit, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.Granted() {
		l.metrics.ObserveWait(l.now().Sub(start))
		return l.grantedLocked(), nil
	}
	l.removeLocked(w)
	l.metrics.IncRejection("queue_timeout")
	return nil, ErrQueueTimeout
}

// grantedLocked counts a token taken and returns its permit.
func (l *Limiter) grantedLocked() *Permit {
	l.inflight++
	l.metrics.SetInflight(l.inflight)
	return &Permit{l: l}
}

// refillLocked adds the tokens accrued since the last refill.
func (l *Limiter) refillLocked() {
	now := l.now()
	if l.cfg.TokensPerSecond > 0 {
		if d := now.Sub(l.last); d > 0 {
			l.tokens = min(l.tokens+d.Seconds()*float64(l.cfg.TokensPerSecond), float64(l.cfg.MaxConcurrent))
		}
	}
	l.last = now
}

// grantLocked hands tokens to waiters, oldest first, and nudges a new head.
func (l *Limiter) grantLocked() {
	l.refillLocked()
	granted := l.waiters.GrantWhile(func(waiter) bool {
		if l.tokens < 1 {
			return false
		}
		l.tokens--
		return true
	})
	if granted > 0 {
		l.metrics.SetQueued(l.waiters.Len())
		l.nudgeHeadLocked()
	}
}

// removeLocked takes a waiter that gave up out of the queue; a new head is nudged.
func (l *Limiter) removeLocked(w *waitq.Waiter[waiter]) {
	_, wasHead := l.waiters.Cancel(w)
	l.metrics.SetQueued(l.waiters.Len())
	if wasHead {
		l.nudgeHeadLocked()
	}
}

func (l *Limiter) nudgeHeadLocked() {
	if l.cfg.TokensPerSecond <= 0 {
		return // only refill needs the head awake; returns grant from the releaser's goroutine
	}
	if f := l.waiters.Front(); f != nil {
		select {
		case f.Value.nudge <- struct{}{}:
		default:
		}
	}
}

// refillTimerLocked returns a timer for when the head's token will have accrued, or nil when e is
// not the head or nothing refills.
func (l *Limiter) refillTimerLocked(w *waitq.Waiter[waiter]) *time.Timer {
	if l.cfg.TokensPerSecond <= 0 || l.waiters.Front() != w {
		return nil
	}
	need := (1 - l.tokens) / float64(l.cfg.TokensPerSecond)
	d := time.Duration(math.Ceil(need * float64(time.Second)))
	return time.NewTimer(max(d, time.Millisecond))
}

// Status is the limiter's state.
type Status struct {
	Capacity, Inflight, Queued int
	Tokens                     float64
}

// Status returns the current state.
func (l *Limiter) Status() Status {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refillLocked()
	return Status{Capacity: l.cfg.MaxConcurrent, Inflight: l.inflight, Queued: l.waiters.Len(), Tokens: l.tokens}
}
