package worker

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func addWorker(t *testing.T, reg *Registry, spec Spec) *Worker {
	t.Helper()
	w, err := reg.Add(spec)
	if err != nil {
		t.Fatalf("Add(%+v): %v", spec, err)
	}
	return w
}

func TestLoadGuard(t *testing.T) {
	t.Parallel()
	reg := NewRegistry(RegistryOptions{})
	w := addWorker(t, reg, Spec{URL: "http://a:1"})

	g1 := w.AcquireLoad()
	g2 := w.AcquireLoad()
	if got := w.Load(); got != 2 {
		t.Fatalf("Load = %d, want 2", got)
	}
	g1.Release()
	g1.Release() // no-op
	if got := w.Load(); got != 1 {
		t.Fatalf("after double release Load = %d, want 1", got)
	}
	if g2.Worker() != w {
		t.Fatal("guard names the wrong worker")
	}
	g2.Release()
	if got := w.Load(); got != 0 {
		t.Fatalf("Load = %d, want 0", got)
	}
	var nilGuard *LoadGuard
	nilGuard.Release() // must not panic
	if nilGuard.Worker() != nil {
		t.Fatal("nil guard has a worker")
	}
}

func TestLoadGuardConcurrent(t *testing.T) {
	t.Parallel()
	reg := NewRegistry(RegistryOptions{})
	w := addWorker(t, reg, Spec{URL: "http://a:1"})
	const goroutines, per = 8, 500
	guards := make(chan *LoadGuard, goroutines*per)
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range per {
				guards <- w.AcquireLoad()
			}
		})
	}
	wg.Wait()
	close(guards)
	if got := w.Load(); got != goroutines*per {
		t.Fatalf("Load = %d, want %d", got, goroutines*per)
	}
	all := make([]*LoadGuard, 0, goroutines*per)
	for g := range guards {
		all = append(all, g)
	}
	// Every guard is released by two goroutines at once: exactly one wins.
	for range 2 {
		wg.Go(func() {
			for _, g := range all {
				g.Release()
			}
		})
	}
	wg.Wait()
	if got := w.Load(); got != 0 {
		t.Fatalf("Load after racing releases = %d, want 0", got)
	}
}

func TestServesModel(t *testing.T) {
	t.Parallel()
	reg := NewRegistry(RegistryOptions{})
	any := addWorker(t, reg, Spec{URL: "http://any:1"})
	some := addWorker(t, reg, Spec{URL: "http://some:1", Models: []string{"m2", "m1"}})
	tests := []struct {
		w     *Worker
		model string
		want  bool
	}{
		{any, "whatever", true},
		{some, "m1", true},
		{some, "m2", true},
		{some, "m3", false},
	}
	for _, tt := range tests {
		if got := tt.w.ServesModel(tt.model); got != tt.want {
			t.Errorf("%s.ServesModel(%q) = %v, want %v", tt.w.URL(), tt.model, got, tt.want)
		}
	}
	ms := some.Models()
	ms[0] = "changed"
	if !some.ServesModel("m1") {
		t.Fatal("Models() exposed internal slice")
	}
}

func TestDrainWaitIdle(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		reg := NewRegistry(RegistryOptions{StartReady: true})
		w := addWorker(t, reg, Spec{URL: "http://a:1"})
		g1, g2 := w.AcquireLoad(), w.AcquireLoad()

		if err := reg.Drain(w.ID()); err != nil {
			t.Fatal(err)
		}
		if w.Routable(time.Now()) {
			t.Fatal("draining worker is routable")
		}
		if err := reg.SetHealth(w.ID(), HealthReady); err == nil {
			t.Fatal("leaving Draining was allowed")
		}

		done := make(chan error, 1)
		go func() { done <- reg.WaitIdle(context.Background(), w.ID()) }()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("WaitIdle returned early: %v", err)
		default:
		}
		g1.Release()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("WaitIdle returned with load 1: %v", err)
		default:
		}
		g2.Release()
		synctest.Wait()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("WaitIdle = %v", err)
			}
		default:
			t.Fatal("WaitIdle did not return at load 0")
		}
		if err := reg.Remove(w.ID()); err != nil {
			t.Fatal(err)
		}
	})
}

func TestWaitIdleCancel(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		reg := NewRegistry(RegistryOptions{})
		w := addWorker(t, reg, Spec{URL: "http://a:1"})
		g := w.AcquireLoad()
		defer g.Release()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- reg.WaitIdle(ctx, w.ID()) }()
		synctest.Wait()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("WaitIdle = %v, want context.Canceled", err)
		}
		if err := reg.WaitIdle(ctx, "nope"); err == nil {
			t.Fatal("WaitIdle on unknown id succeeded")
		}
	})
}

// A data-parallel engine's rank views share its health, breaker and spec, and their loads count on the
// engine too (WaitIdle waits for all ranks).
func TestRankViews(t *testing.T) {
	t.Parallel()
	reg := NewRegistry(RegistryOptions{})
	w, err := reg.Add(Spec{URL: "http://e:1", Role: RolePrefill, Protocol: ProtocolSGLang, DPSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	ranks := w.Ranks()
	if len(ranks) != 3 {
		t.Fatalf("%d rank views, want 3", len(ranks))
	}
	for i, r := range ranks {
		if r.Rank() != i || r.Key() != "http://e:1@"+strconv.Itoa(i) || r.URL() != w.URL() || r.Engine() != w || r.ID() != w.ID() {
			t.Errorf("rank %d: rank %d key %q url %q", i, r.Rank(), r.Key(), r.URL())
		}
	}
	if w.Rank() != -1 || w.Key() != w.URL() || w.Engine() != w {
		t.Errorf("engine: rank %d key %q", w.Rank(), w.Key())
	}
	now := time.Now()
	if ranks[1].Routable(now) {
		t.Error("a rank of a pending engine is routable")
	}
	if err := reg.SetHealth(w.ID(), HealthReady); err != nil {
		t.Fatal(err)
	}
	if !ranks[1].Routable(now) || ranks[1].Health() != HealthReady {
		t.Error("a rank does not share its engine's health")
	}
	if err := reg.Update(w.ID(), func(s *Spec) { s.APIKey = "k" }); err != nil {
		t.Fatal(err)
	}
	if ranks[2].APIKey() != "k" {
		t.Error("a rank does not share its engine's spec")
	}
	g := ranks[1].AcquireLoad()
	if ranks[1].Load() != 1 || ranks[0].Load() != 0 || w.Load() != 1 {
		t.Errorf("loads after one rank-1 request: ranks %d/%d, engine %d", ranks[0].Load(), ranks[1].Load(), w.Load())
	}
	idle := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { idle <- reg.WaitIdle(ctx, w.ID()) }()
	g.Release()
	g.Release()
	if err := <-idle; err != nil {
		t.Fatalf("WaitIdle: %v", err)
	}
	if ranks[1].Load() != 0 || w.Load() != 0 {
		t.Errorf("loads after release: rank %d engine %d", ranks[1].Load(), w.Load())
	}
	snap := reg.Snapshot()
	if got := snap.RankCandidates(RolePrefill, ""); len(got) != 3 || got[0] != ranks[0] {
		t.Errorf("RankCandidates = %d workers", len(got))
	}
	if got := snap.Candidates(RolePrefill, ""); len(got) != 1 || got[0] != w {
		t.Errorf("Candidates = %d workers, want the engine", len(got))
	}
	if err := reg.Update(w.ID(), func(s *Spec) { s.DPSize = 4 }); err == nil {
		t.Error("changing the dp size in place was accepted; it needs Replace")
	}
	if err := reg.Remove(w.ID()); err != nil {
		t.Fatal(err)
	}
	if !ranks[0].Removed() {
		t.Error("a rank of a removed engine is not removed")
	}
}
