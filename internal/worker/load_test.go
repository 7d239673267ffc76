package worker

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestLoadMonitorStoresReportsAndForgetsFailures(t *testing.T) {
	t.Parallel()
	reg := NewRegistry(RegistryOptions{StartReady: true})
	a := addWorker(t, reg, Spec{URL: "http://a:1"})
	b := addWorker(t, reg, Spec{URL: "http://b:1"})
	var failB atomic.Bool
	var results, rounds atomic.Int32
	fetch := LoadFetcherFunc(func(_ context.Context, w *Worker) (EngineLoad, error) {
		if w == b && failB.Load() {
			return EngineLoad{}, errors.New("engine gone")
		}
		if w == a {
			return EngineLoad{Running: 3, Waiting: 5, KVUsage: 0.5}, nil
		}
		return EngineLoad{Running: 1}, nil
	})
	m, err := NewLoadMonitor(reg, fetch, LoadMonitorConfig{Interval: time.Second,
		OnResult: func(*Worker, EngineLoad, error) { results.Add(1) }, OnRound: func() { rounds.Add(1) }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := a.AcquireLoad() // one gateway request in flight at the report
	m.Poll(context.Background())
	l, ok := a.EngineLoad()
	if !ok || l.Running != 3 || l.Waiting != 5 || l.KVUsage != 0.5 || l.GatewayLoad != 1 || l.At.IsZero() {
		t.Fatalf("a's load = %+v, %v", l, ok)
	}
	if got := a.EstimatedEngineLoad(); got != 8 {
		t.Errorf("estimate right after the report = %d, want 3+5", got)
	}
	g2, g3 := a.AcquireLoad(), a.AcquireLoad() // sent since the report
	if got := a.EstimatedEngineLoad(); got != 10 {
		t.Errorf("estimate after 2 more requests = %d, want 10", got)
	}
	g.Release()
	g2.Release()
	g3.Release() // all finished: below the report, never negative
	if got := a.EstimatedEngineLoad(); got != 7 {
		t.Errorf("estimate after the gateway's requests ended = %d, want 7", got)
	}
	if !a.Overloaded(4) || a.Overloaded(5) {
		t.Error("a with 5 waiting: overloaded above 4, not above 5")
	}

	failB.Store(true)
	m.Poll(context.Background())
	if _, ok := b.EngineLoad(); ok {
		t.Error("b kept a load after a failed poll")
	}
	if b.Overloaded(0) {
		t.Error("an engine of unknown load counts as overloaded")
	}
	gb := b.AcquireLoad()
	if got := b.EstimatedEngineLoad(); got != 1 {
		t.Errorf("b without report: estimate %d, want its gateway load 1", got)
	}
	gb.Release()
	if results.Load() != 4 || rounds.Load() != 2 {
		t.Errorf("OnResult %d times, OnRound %d times, want 4 and 2", results.Load(), rounds.Load())
	}
}

func TestLoadMonitorRunsOnIntervalAndStopsWithItsFetches(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		reg := NewRegistry(RegistryOptions{StartReady: true})
		for _, u := range []string{"http://a:1", "http://b:1", "http://c:1"} {
			addWorker(t, reg, Spec{URL: u})
		}
		var mu sync.Mutex
		inflight, peak, calls := 0, 0, 0
		fetch := LoadFetcherFunc(func(ctx context.Context, _ *Worker) (EngineLoad, error) {
			mu.Lock()
			inflight++
			calls++
			peak = max(peak, inflight)
			mu.Unlock()
			defer func() { mu.Lock(); inflight--; mu.Unlock() }()
			select {
			case <-time.After(100 * time.Millisecond):
				return EngineLoad{Waiting: 1}, nil
			case <-ctx.Done():
				return EngineLoad{}, ctx.Err()
			}
		})
		m, err := NewLoadMonitor(reg, fetch, LoadMonitorConfig{Interval: 2 * time.Second, Concurrency: 2}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { m.Run(ctx); close(done) }()
		time.Sleep(5 * time.Second) // rounds at 0, 2 and 4 s
		synctest.Wait()
		mu.Lock()
		if calls != 9 || peak != 2 {
			t.Errorf("%d fetches with at most %d at once, want 9 and 2", calls, peak)
		}
		mu.Unlock()
		time.Sleep(time.Second + 50*time.Millisecond) // the round at 6 s is under way
		synctest.Wait()
		mu.Lock()
		if inflight != 2 {
			t.Errorf("%d fetches in flight during a round, want 2", inflight)
		}
		mu.Unlock()
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		if inflight != 0 {
			t.Errorf("Run returned with %d fetches in flight", inflight)
		}
		// A fetch cut short by shutdown is not the engine's failure.
		for _, w := range reg.Snapshot().All() {
			if _, ok := w.EngineLoad(); !ok {
				t.Errorf("%s lost its load to the shutdown", w.URL())
			}
		}
	})
}

func TestNewLoadMonitorValidates(t *testing.T) {
	t.Parallel()
	reg := NewRegistry(RegistryOptions{})
	f := LoadFetcherFunc(func(context.Context, *Worker) (EngineLoad, error) { return EngineLoad{}, nil })
	for _, tt := range []struct {
		name  string
		fetch LoadFetcher
		cfg   LoadMonitorConfig
		ok    bool
	}{
		{"ok", f, LoadMonitorConfig{Interval: time.Second}, true},
		{"no fetcher", nil, LoadMonitorConfig{Interval: time.Second}, false},
		{"no interval", f, LoadMonitorConfig{}, false},
		{"negative timeout", f, LoadMonitorConfig{Interval: time.Second, Timeout: -1}, false},
		{"negative concurrency", f, LoadMonitorConfig{Interval: time.Second, Concurrency: -1}, false},
	} {
		m, err := NewLoadMonitor(reg, tt.fetch, tt.cfg, nil)
		if (err == nil) != tt.ok {
			t.Errorf("%s: err = %v", tt.name, err)
		}
		if m != nil && m.cfg.Timeout != time.Second {
			t.Errorf("%s: default timeout %v, want min(interval, 5s)", tt.name, m.cfg.Timeout)
		}
	}
}
