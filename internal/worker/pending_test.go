package worker

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// A worker registered before its engine answers is probed on the pending pace (1 s, then backing off to
// 2 s), not once per Interval, so it is ready within PendingMaxInterval of its engine coming up.
func TestPendingWorkerProbedFast(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		reg := NewRegistry(RegistryOptions{})
		w := addWorker(t, reg, Spec{URL: "http://late:1"})
		p := newFakeProber()
		p.set(w.URL(), true) // still loading
		hc := newChecker(t, reg, p, HealthConfig{Interval: time.Minute})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { hc.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()

		time.Sleep(20 * time.Second) // fake time inside the bubble
		synctest.Wait()
		// One probe at start, then 1 s, 2 s, and every 2 s: about 11 in 20 s (one per minute would be 1).
		if n := p.count(w.URL()); n < 9 || n > 12 {
			t.Fatalf("%d probes of a pending worker in 20 s, want about 11", n)
		}
		p.set(w.URL(), false) // the engine is up
		up := time.Now()
		for w.Health() != HealthReady {
			time.Sleep(100 * time.Millisecond) // fake time: step until the checker's next probe
			synctest.Wait()
		}
		if waited := time.Since(up); waited > hc.Config().PendingMaxInterval {
			t.Fatalf("ready %v after the engine answered, want within the pending pace's %v", waited, hc.Config().PendingMaxInterval)
		}
		n := p.count(w.URL())
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if got := p.count(w.URL()); got != n {
			t.Fatalf("a ready worker is probed on the pending pace: %d -> %d in 30 s (Interval 1 min)", n, got)
		}
	})
}

// A worker marked DetectPending is not made ready by a passing probe before its Redetector has run;
// a failing detection keeps it not ready (and is retried); the replacement it returns is the worker
// the probe counts for.
func TestDetectionBeforeReady(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		reg := NewRegistry(RegistryOptions{})
		w := addWorker(t, reg, Spec{URL: "http://late:1", DetectPending: true, ProtocolSource: ProtocolPending})
		hc := newChecker(t, reg, newFakeProber(), HealthConfig{Interval: time.Hour})
		var calls atomic.Int32
		answer := errors.New("engine has not listed its models yet")
		hc.SetRedetect(func(ctx context.Context, cur *Worker) (*Worker, error) {
			calls.Add(1)
			if answer != nil {
				return nil, answer
			}
			return reg.Replace(cur.ID(), Spec{URL: cur.URL(), Protocol: ProtocolVLLM, Models: []string{"m"}})
		})

		if h, err := hc.CheckNow(context.Background(), w.ID()); h != HealthPending || err == nil {
			t.Fatalf("CheckNow with detection failing: %v, %v; want pending and the detection error", h, err)
		}
		answer = nil
		h, err := hc.CheckNow(context.Background(), w.ID())
		if err != nil || h != HealthReady {
			t.Fatalf("CheckNow once detection answers: %v, %v; want ready", h, err)
		}
		nw, _ := reg.Get(w.ID())
		if nw == w || nw.Protocol() != ProtocolVLLM || nw.Spec().DetectPending {
			t.Fatalf("worker after detection: replaced %t, protocol %s, pending %t", nw != w, nw.Protocol(), nw.Spec().DetectPending)
		}
		if got := calls.Load(); got != 2 {
			t.Fatalf("detection ran %d times, want 2 (once failing, once answering)", got)
		}
		// A ready worker whose spec is no longer pending is not asked again on every probe.
		if _, err := hc.CheckNow(context.Background(), nw.ID()); err != nil {
			t.Fatal(err)
		}
		if got := calls.Load(); got != 2 {
			t.Fatalf("detection ran again for a ready, detected worker (%d calls)", got)
		}
	})
}
