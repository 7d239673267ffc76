package worker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// fakeProber answers from a per-URL switch and counts probes.
type fakeProber struct {
	mu      sync.Mutex
	failing map[string]bool
	probes  map[string]int
}

func newFakeProber() *fakeProber {
	return &fakeProber{failing: map[string]bool{}, probes: map[string]int{}}
}

func (p *fakeProber) set(url string, failing bool) {
	p.mu.Lock()
	p.failing[url] = failing
	p.mu.Unlock()
}

func (p *fakeProber) count(url string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.probes[url]
}

func (p *fakeProber) Probe(_ context.Context, w *Worker) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.probes[w.URL()]++
	if p.failing[w.URL()] {
		return errors.New("unhealthy")
	}
	return nil
}

func newChecker(t *testing.T, reg *Registry, p Prober, cfg HealthConfig) *HealthChecker {
	t.Helper()
	hc, err := NewHealthChecker(reg, p, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return hc
}

func TestHealthCheckerThresholds(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		reg := NewRegistry(RegistryOptions{})
		var log eventLog
		defer reg.Subscribe(log.record)()
		p := newFakeProber()
		w := addWorker(t, reg, Spec{URL: "http://a:1"})
		hc := newChecker(t, reg, p, HealthConfig{Interval: 10 * time.Second, SuccessThreshold: 2, FailureThreshold: 3})

		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { hc.Run(ctx); close(done) }()

		// step waits for one round (the first runs at start).
		step := func(first bool) {
			if !first {
				time.Sleep(10 * time.Second) // fake time inside the bubble
			}
			synctest.Wait()
		}
		step(true)
		if got := w.Health(); got != HealthPending {
			t.Fatalf("after 1 success health = %v, want pending", got)
		}
		step(false)
		if got := w.Health(); got != HealthReady {
			t.Fatalf("after 2 successes health = %v, want ready", got)
		}
		p.set(w.URL(), true)
		step(false)
		step(false)
		if got := w.Health(); got != HealthReady {
			t.Fatalf("after 2 failures health = %v, want ready", got)
		}
		step(false)
		if got := w.Health(); got != HealthNotReady {
			t.Fatalf("after 3 failures health = %v, want not_ready", got)
		}
		p.set(w.URL(), false)
		step(false)
		if got := w.Health(); got != HealthNotReady {
			t.Fatalf("after 1 success health = %v, want not_ready", got)
		}
		step(false)
		if got := w.Health(); got != HealthReady {
			t.Fatalf("after 2 successes health = %v, want ready", got)
		}

		// Draining workers are not probed.
		n := p.count(w.URL())
		if err := reg.Drain(w.ID()); err != nil {
			t.Fatal(err)
		}
		step(false)
		if got := p.count(w.URL()); got != n {
			t.Fatalf("draining worker probed: %d -> %d", n, got)
		}

		cancel()
		<-done
		want := []string{
			"added w1 http://a:1",
			"health_changed w1 http://a:1 pending->ready",
			"health_changed w1 http://a:1 ready->not_ready",
			"health_changed w1 http://a:1 not_ready->ready",
			"health_changed w1 http://a:1 ready->draining",
		}
		if got := log.take(); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
}

func TestHealthCheckerBoundedConcurrency(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		reg := NewRegistry(RegistryOptions{})
		for i := range 20 {
			addWorker(t, reg, Spec{URL: fmt.Sprintf("http://w%d:1", i)})
		}
		var inflight, peak, total atomic.Int32
		release := make(chan struct{})
		p := ProberFunc(func(ctx context.Context, _ *Worker) error {
			n := inflight.Add(1)
			defer inflight.Add(-1)
			total.Add(1)
			for {
				old := peak.Load()
				if n <= old || peak.CompareAndSwap(old, n) {
					break
				}
			}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		hc := newChecker(t, reg, p, HealthConfig{Concurrency: 4, Timeout: time.Hour, Interval: 2 * time.Hour})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { hc.Run(ctx); close(done) }()
		synctest.Wait()
		if got := inflight.Load(); got != 4 {
			t.Fatalf("in-flight probes = %d, want 4", got)
		}
		close(release)
		synctest.Wait()
		if got, max := total.Load(), peak.Load(); got != 20 || max != 4 {
			t.Fatalf("probes = %d (want 20), peak = %d (want 4)", got, max)
		}
		cancel()
		<-done
	})
}

// A probe that hangs is cut by the timeout and counted as a failure; Run
// returns promptly on cancel even with probes in flight.
func TestHealthCheckerTimeoutAndStop(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		reg := NewRegistry(RegistryOptions{StartReady: true})
		w := addWorker(t, reg, Spec{URL: "http://a:1"})
		p := ProberFunc(func(ctx context.Context, _ *Worker) error {
			<-ctx.Done()
			return ctx.Err()
		})
		hc := newChecker(t, reg, p, HealthConfig{Timeout: 5 * time.Second, Interval: time.Minute, FailureThreshold: 1})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { hc.Run(ctx); close(done) }()
		time.Sleep(5 * time.Second) // fake time inside the synctest bubble: past the probe timeout
		synctest.Wait()
		if got := w.Health(); got != HealthNotReady {
			t.Fatalf("health after timed-out probe = %v, want not_ready", got)
		}
		// Now a probe is in flight for the next round; cancel mid-probe.
		time.Sleep(time.Minute + time.Second) // fake time: into the next round, whose probe hangs
		synctest.Wait()
		cancel()
		<-done
		if got := w.Health(); got != HealthNotReady {
			t.Fatalf("cancelled probe changed health to %v", got)
		}
	})
}

func TestCheckNow(t *testing.T) {
	t.Parallel()
	reg := NewRegistry(RegistryOptions{})
	p := newFakeProber()
	hc := newChecker(t, reg, p, HealthConfig{SuccessThreshold: 3, FailureThreshold: 2})
	ctx := context.Background()

	w := addWorker(t, reg, Spec{URL: "http://a:1"})
	h, err := hc.CheckNow(ctx, w.ID())
	if err != nil || h != HealthReady {
		t.Fatalf("CheckNow(new healthy) = %v, %v; want ready", h, err)
	}
	if got := p.count(w.URL()); got != 3 {
		t.Fatalf("probes = %d, want 3 (success threshold)", got)
	}

	bad := addWorker(t, reg, Spec{URL: "http://bad:1"})
	p.set(bad.URL(), true)
	h, err = hc.CheckNow(ctx, bad.ID())
	if err == nil || h != HealthPending {
		t.Fatalf("CheckNow(new failing) = %v, %v; want pending with error", h, err)
	}
	if got := p.count(bad.URL()); got != 1 {
		t.Fatalf("probes of failing worker = %d, want 1", got)
	}

	// A Ready worker is probed once per CheckNow.
	p.set(w.URL(), true)
	if h, _ := hc.CheckNow(ctx, w.ID()); h != HealthReady {
		t.Fatalf("after 1 failure health = %v, want ready", h)
	}
	if h, _ := hc.CheckNow(ctx, w.ID()); h != HealthNotReady {
		t.Fatalf("after 2 failures health = %v, want not_ready", h)
	}
	if _, err := hc.CheckNow(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("CheckNow(unknown) = %v, want ErrNotFound", err)
	}

	// Disabled: Ready at once, no probe.
	off := newChecker(t, reg, p, HealthConfig{Disabled: true})
	w2 := addWorker(t, reg, Spec{URL: "http://c:1"})
	if h, err := off.CheckNow(ctx, w2.ID()); err != nil || h != HealthReady {
		t.Fatalf("disabled CheckNow = %v, %v; want ready", h, err)
	}
	if got := p.count(w2.URL()); got != 0 {
		t.Fatalf("disabled checker probed %d times", got)
	}
}

func TestHTTPProber(t *testing.T) {
	t.Parallel()
	var status atomic.Int32
	status.Store(200)
	var gotAuth atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		gotAuth.Store(r.Header.Get("Authorization"))
		w.WriteHeader(int(status.Load()))
	}))
	defer srv.Close()

	reg := NewRegistry(RegistryOptions{})
	w := addWorker(t, reg, Spec{URL: srv.URL, APIKey: "k"})
	p := HTTPProber{Client: srv.Client(), Endpoint: "/healthz"}
	ctx := context.Background()
	if err := p.Probe(ctx, w); err != nil {
		t.Fatalf("Probe(200) = %v", err)
	}
	if got := gotAuth.Load(); got != "Bearer k" {
		t.Fatalf("Authorization = %q", got)
	}
	status.Store(503)
	if err := p.Probe(ctx, w); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("Probe(503) = %v", err)
	}
	g := addWorker(t, reg, Spec{URL: "grpc://127.0.0.1:1"})
	if err := p.Probe(ctx, g); err == nil {
		t.Fatal("Probe(grpc) succeeded")
	}
	srv.Close()
	if err := p.Probe(ctx, w); err == nil {
		t.Fatal("Probe(closed server) succeeded")
	}
}

func TestHealthConfigNormalized(t *testing.T) {
	t.Parallel()
	got, err := HealthConfig{}.Normalized()
	if err != nil || got != DefaultHealthConfig() {
		t.Fatalf("zero config = %+v, %v; want defaults", got, err)
	}
	if _, err := (HealthConfig{Interval: -1, Endpoint: "health"}).Normalized(); err == nil {
		t.Fatal("bad config accepted")
	}
}
