package worker

import (
	"sync"
	"testing"
	"time"
)

// manualClock is a clock the test moves by hand.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func newManualClock() *manualClock { return &manualClock{now: time.Unix(1_000_000, 0)} }

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newTestBreaker(t *testing.T, cfg BreakerConfig, clk *manualClock) *Breaker {
	t.Helper()
	cfg, err := cfg.Normalized()
	if err != nil {
		t.Fatal(err)
	}
	return NewBreaker(cfg, clk.Now)
}

func TestBreakerTransitions(t *testing.T) {
	t.Parallel()
	clk := newManualClock()
	b := newTestBreaker(t, BreakerConfig{FailureThreshold: 3, SuccessThreshold: 2, Timeout: 10 * time.Second}, clk)

	// A success in between resets the consecutive count.
	b.RecordFailure()
	b.RecordFailure()
	b.RecordSuccess()
	b.RecordFailure()
	b.RecordFailure()
	if got := b.State(clk.Now()); got != BreakerClosed {
		t.Fatalf("after non-consecutive failures state = %v, want closed", got)
	}
	b.RecordFailure()
	if got := b.State(clk.Now()); got != BreakerOpen {
		t.Fatalf("after 3 consecutive failures state = %v, want open", got)
	}
	if b.Allow(clk.Now()) {
		t.Fatal("open breaker allowed a request")
	}

	clk.Advance(10*time.Second - time.Nanosecond)
	if b.Allow(clk.Now()) {
		t.Fatal("breaker allowed before its timeout")
	}
	clk.Advance(time.Nanosecond)
	if !b.Allow(clk.Now()) {
		t.Fatal("breaker did not allow after its timeout")
	}
	if got := b.State(clk.Now()); got != BreakerHalfOpen {
		t.Fatalf("state = %v, want half_open", got)
	}

	// Any failure in half-open reopens, with a fresh timeout.
	b.RecordFailure()
	if got := b.State(clk.Now()); got != BreakerOpen {
		t.Fatalf("failure in half-open: state = %v, want open", got)
	}
	clk.Advance(10 * time.Second)
	if got := b.State(clk.Now()); got != BreakerHalfOpen {
		t.Fatalf("state = %v, want half_open", got)
	}
	b.RecordSuccess()
	if got := b.State(clk.Now()); got != BreakerHalfOpen {
		t.Fatalf("one success: state = %v, want half_open", got)
	}
	b.RecordSuccess()
	if got := b.State(clk.Now()); got != BreakerClosed {
		t.Fatalf("two successes: state = %v, want closed", got)
	}
	// Closed again with a clean failure count.
	b.RecordFailure()
	b.RecordFailure()
	if got := b.State(clk.Now()); got != BreakerClosed {
		t.Fatalf("state = %v, want closed", got)
	}
}

func TestBreakerRecordStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		code int
		want bool
	}{
		{200, false}, {400, false}, {404, false}, {429, false},
		{408, true}, {500, true}, {502, true}, {503, true}, {504, true}, {501, false},
	}
	for _, tt := range tests {
		if got := IsFailureStatus(tt.code); got != tt.want {
			t.Errorf("IsFailureStatus(%d) = %v, want %v", tt.code, got, tt.want)
		}
	}

	clk := newManualClock()
	b := newTestBreaker(t, BreakerConfig{FailureThreshold: 2}, clk)
	for range 10 {
		b.RecordStatus(429)
	}
	if got := b.State(clk.Now()); got != BreakerClosed {
		t.Fatalf("after 429s state = %v, want closed", got)
	}
	b.RecordStatus(503)
	b.RecordStatus(429) // 429 counts as success: resets the streak
	b.RecordStatus(503)
	if got := b.State(clk.Now()); got != BreakerClosed {
		t.Fatalf("state = %v, want closed", got)
	}
	b.RecordStatus(502)
	if got := b.State(clk.Now()); got != BreakerOpen {
		t.Fatalf("after two consecutive 5xx state = %v, want open", got)
	}
}

func TestBreakerDisabled(t *testing.T) {
	t.Parallel()
	clk := newManualClock()
	b := newTestBreaker(t, BreakerConfig{FailureThreshold: 1, Disabled: true}, clk)
	for range 5 {
		b.RecordFailure()
	}
	if !b.Allow(clk.Now()) || b.State(clk.Now()) != BreakerClosed {
		t.Fatal("disabled breaker refused")
	}
}

func TestBreakerConfigNormalized(t *testing.T) {
	t.Parallel()
	got, err := BreakerConfig{}.Normalized()
	if err != nil || got != DefaultBreakerConfig() {
		t.Fatalf("zero config = %+v, %v; want defaults", got, err)
	}
	if _, err := (BreakerConfig{FailureThreshold: -1, Timeout: -time.Second}).Normalized(); err == nil {
		t.Fatal("negative config accepted")
	}
}

// The lazy Open -> HalfOpen transition emits no registry event.
func TestBreakerLazyHalfOpenNoEvent(t *testing.T) {
	t.Parallel()
	clk := newManualClock()
	reg := NewRegistry(RegistryOptions{Clock: clk.Now, StartReady: true, Breaker: BreakerConfig{FailureThreshold: 1, Timeout: time.Minute}})
	w, err := reg.Add(Spec{URL: "http://a:1"})
	if err != nil {
		t.Fatal(err)
	}
	var events []Event
	defer reg.Subscribe(func(e Event) { events = append(events, e) })()

	w.Breaker().RecordFailure()
	if w.Routable(clk.Now()) {
		t.Fatal("worker with open breaker is routable")
	}
	clk.Advance(time.Minute)
	if !w.Routable(clk.Now()) {
		t.Fatal("worker not routable after breaker timeout")
	}
	if got := w.Breaker().State(clk.Now()); got != BreakerHalfOpen {
		t.Fatalf("state = %v, want half_open", got)
	}
	if len(events) != 0 {
		t.Fatalf("breaker transitions emitted events: %v", events)
	}
}

func TestBreakerConcurrent(t *testing.T) {
	t.Parallel()
	clk := newManualClock()
	b := newTestBreaker(t, BreakerConfig{FailureThreshold: 5, SuccessThreshold: 2, Timeout: time.Second}, clk)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 2000 {
				switch (i + j) % 4 {
				case 0:
					b.RecordFailure()
				case 1:
					b.RecordSuccess()
				case 2:
					b.Allow(clk.Now())
				case 3:
					clk.Advance(time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	if s := b.State(clk.Now()); s < BreakerClosed || s > BreakerHalfOpen {
		t.Fatalf("invalid state %v", s)
	}
}

// TestBreakerTransitionHook: every state change of a registered worker's breaker reaches the hook
// once, named by the worker's URL, in order; a breaker that does not change state calls nothing.
func TestBreakerTransitionHook(t *testing.T) {
	t.Parallel()
	clk := newManualClock()
	var mu sync.Mutex
	var got []string
	r := NewRegistry(RegistryOptions{Clock: clk.Now,
		Breaker: BreakerConfig{FailureThreshold: 2, SuccessThreshold: 1, Timeout: 5 * time.Second},
		OnBreakerTransition: func(w *Worker, from, to BreakerState, reason string) {
			mu.Lock()
			got = append(got, w.URL()+" "+from.String()+"->"+to.String()+" "+reason)
			mu.Unlock()
		},
	})
	w, err := r.Add(Spec{URL: "http://a:1", Role: RoleDecode, Protocol: ProtocolSGLang})
	if err != nil {
		t.Fatal(err)
	}
	b := w.Breaker()
	b.RecordFailure()
	b.RecordFailure() // closed -> open
	b.RecordFailure() // already open: no transition
	clk.Advance(5 * time.Second)
	b.State(clk.Now()) // open -> half_open, lazily
	b.State(clk.Now())
	b.RecordFailure() // half_open -> open
	clk.Advance(5 * time.Second)
	b.Allow(clk.Now()) // open -> half_open
	b.RecordSuccess()  // half_open -> closed
	b.RecordSuccess()
	want := []string{
		"http://a:1 closed->open " + ReasonFailures, "http://a:1 open->half_open " + ReasonTimeout,
		"http://a:1 half_open->open " + ReasonHalfOpenFailure, "http://a:1 open->half_open " + ReasonTimeout,
		"http://a:1 half_open->closed " + ReasonHalfOpenSuccess,
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != len(want) {
		t.Fatalf("transitions %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("transition %d = %q, want %q", i, got[i], want[i])
		}
	}
}
