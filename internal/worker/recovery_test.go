package worker

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

type transition struct {
	url      string
	from, to BreakerState
	reason   string
}

type transitionLog struct {
	mu  sync.Mutex
	all []transition
}

func (l *transitionLog) record(w *Worker, from, to BreakerState, reason string) {
	l.mu.Lock()
	l.all = append(l.all, transition{w.URL(), from, to, reason})
	l.mu.Unlock()
}

func (l *transitionLog) get() []transition {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.all)
}

func TestBreakerTransitionsObserved(t *testing.T) {
	t.Parallel()
	clk := newManualClock()
	log := &transitionLog{}
	reg := NewRegistry(RegistryOptions{
		Clock: clk.Now, StartReady: true, OnBreakerTransition: log.record,
		Breaker: BreakerConfig{FailureThreshold: 2, SuccessThreshold: 1, Timeout: 10 * time.Second},
	})
	w, err := reg.Add(Spec{URL: "http://10.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	b := w.Breaker()
	b.RecordFailure()
	b.RecordFailure() // closed -> open
	b.RecordFailure() // already open: nothing
	clk.Advance(10 * time.Second)
	b.State(clk.Now()) // open -> half_open (timeout)
	b.RecordFailure()  // half_open -> open
	if !b.ProbeSucceeded() {
		t.Fatal("ProbeSucceeded on an open breaker reported no change")
	}
	if b.ProbeSucceeded() {
		t.Error("ProbeSucceeded on a half-open breaker reported a change")
	}
	b.RecordSuccess() // half_open -> closed
	u := "http://10.0.0.1:1"
	want := []transition{
		{u, BreakerClosed, BreakerOpen, ReasonFailures},
		{u, BreakerOpen, BreakerHalfOpen, ReasonTimeout},
		{u, BreakerHalfOpen, BreakerOpen, ReasonHalfOpenFailure},
		{u, BreakerOpen, BreakerHalfOpen, ReasonHealthProbe},
		{u, BreakerHalfOpen, BreakerClosed, ReasonHalfOpenSuccess},
	}
	if got := log.get(); !slices.Equal(got, want) {
		t.Errorf("transitions\n got %v\nwant %v", got, want)
	}

	disabled := NewBreaker(BreakerConfig{Disabled: true}, clk.Now)
	if disabled.ProbeSucceeded() {
		t.Error("a disabled breaker changed state")
	}
}

// TestProbeRecoversOpenBreaker is the unit form of "recover as soon as a worker is back": a worker whose
// breaker opened while it was down becomes routable on the first passing probe, long before the breaker
// timeout, unless KeepBreakerOpen is set.
func TestProbeRecoversOpenBreaker(t *testing.T) {
	t.Parallel()
	for _, keep := range []bool{false, true} {
		clk := newManualClock()
		reg := NewRegistry(RegistryOptions{Clock: clk.Now, Breaker: BreakerConfig{FailureThreshold: 3, Timeout: time.Hour}})
		var events []EventKind
		var mu sync.Mutex
		unsub := reg.Subscribe(func(ev Event) { mu.Lock(); events = append(events, ev.Kind); mu.Unlock() })
		p := newFakeProber()
		hc := newChecker(t, reg, p, HealthConfig{SuccessThreshold: 1, FailureThreshold: 1, KeepBreakerOpen: keep})
		w, err := reg.Add(Spec{URL: "http://10.0.0.2:1", Role: RolePrefill})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if h, _ := hc.CheckNow(ctx, w.ID()); h != HealthReady {
			t.Fatalf("health %v, want ready", h)
		}
		// The engine dies: requests fail and open the breaker; probes fail and mark it not ready.
		for range 3 {
			w.Breaker().RecordFailure()
		}
		p.set(w.URL(), true)
		_, _ = hc.CheckNow(ctx, w.ID())
		if w.Health() != HealthNotReady || w.Breaker().State(clk.Now()) != BreakerOpen {
			t.Fatalf("after the crash: health %v breaker %v", w.Health(), w.Breaker().State(clk.Now()))
		}
		// It restarts: the next probe passes.
		p.set(w.URL(), false)
		_, _ = hc.CheckNow(ctx, w.ID())
		if w.Health() != HealthReady {
			t.Fatalf("keep=%v: health %v after a passing probe, want ready", keep, w.Health())
		}
		state := w.Breaker().State(clk.Now())
		mu.Lock()
		recovered := slices.Contains(events, EventBreakerRecovered)
		mu.Unlock()
		if keep {
			if state != BreakerOpen || w.Routable(clk.Now()) || recovered {
				t.Errorf("KeepBreakerOpen: breaker %v routable %v recovered event %v; want open, not routable, no event", state, w.Routable(clk.Now()), recovered)
			}
		} else {
			if state != BreakerHalfOpen || !w.Routable(clk.Now()) || !recovered {
				t.Errorf("default: breaker %v routable %v recovered event %v; want half_open, routable, event", state, w.Routable(clk.Now()), recovered)
			}
		}
		unsub()
	}
}
