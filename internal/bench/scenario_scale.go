package bench

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/placement"
	"github.com/sluicegw/sluice/internal/sim"
)

// ScenarioScale measures the gateway with many workers registered (routing cost, memory) and the
// admission queue with many waiters (memory per waiter, handoff time).
func ScenarioScale(ctx context.Context, o ScenarioOptions) (*ScenarioResult, error) {
	s := newScenarioRun("scale", o)
	n, rate, dur, picks, waiters := 500, 1000.0, 10*time.Second, 200000, 10000
	if o.Short {
		n, rate, dur, picks, waiters = 50, 200, 2*time.Second, 20000, 1000
	}
	s.res.Table = [][]string{{"measurement", "value"}}
	row := func(k, v string) { s.res.Table = append(s.res.Table, []string{k, v}) }

	c, err := sim.StartCluster(ctx, sim.ClusterConfig{Regular: n, Mode: sim.ModeInstant, Logger: o.Logger})
	if err != nil {
		return s.res, fmt.Errorf("%d in-process engines: %w", n, err)
	}
	defer c.Close()
	row("workers registered", strconv.Itoa(n))

	for _, policy := range []string{"round_robin", "cache_aware"} {
		// Gateway memory: one worker registered vs n, so the gateway's fixed footprint cancels out.
		flags := []string{"--disable-health-check", "--policy", policy}
		heap0 := heapAfterGC()
		g1, err := startGatewayInProcess(ctx, append(flags, "--worker-urls", c.Engines[0].URL()), o.Logger)
		if err != nil {
			return s.res, err
		}
		heap1 := heapAfterGC()
		_ = g1.close()
		for _, e := range c.Engines {
			flags = append(flags, "--worker-urls", e.URL())
		}
		heap0n := heapAfterGC()
		g, err := startGatewayInProcess(ctx, flags, o.Logger)
		if err != nil {
			return s.res, err
		}
		heapN := heapAfterGC()
		perWorker := (float64(heapN) - float64(heap0n) - (float64(heap1) - float64(heap0))) / float64(max(n-1, 1))
		row(policy+": gateway heap", fmt.Sprintf("%.1f MiB with %d workers, %.1f MiB with 1 (%.1f KiB per extra worker)",
			(float64(heapN)-float64(heap0n))/(1<<20), n, (float64(heap1)-float64(heap0))/(1<<20), perWorker/1024))
		s.res.Measurements[policy+"_heap_bytes_per_worker"] = round3(perWorker)

		cpu0 := processCPU()
		cfg := Config{URL: g.url, Model: "sim-model", Rate: rate, Duration: dur, Seed: 3,
			Workload: WorkloadConfig{Kind: WorkloadFixed, PromptTokens: 64, MaxTokens: 8}}
		res, err := s.load(ctx, policy+"-"+strconv.Itoa(n)+"-workers", cfg, nil, nil)
		cpu := processCPU() - cpu0
		if err != nil {
			_ = g.close()
			return s.res, err
		}
		sum := res.Summary
		cpu1k := cpu / float64(max(res.TotalSent, 1)) * 1000
		s.res.Runs[len(s.res.Runs)-1].Extra = map[string]any{"process_cpu_sec_per_1k_requests": cpu1k}
		row(policy+": e2e p50 / p99 at "+fmt.Sprintf("%.0f req/s", rate), fmt.Sprintf("%.2f / %.2f ms (%d ok, %d failed)", sum.E2E.P50, sum.E2E.P99, sum.Succeeded, sum.Failed+sum.Dropped))
		row(policy+": whole-process CPU per 1k requests", fmt.Sprintf("%.3f s (load generator + engines + gateway)", cpu1k))

		// Routing alone: the gateway's own selection over its registry snapshot.
		pol, err := placement.New(policy, placement.DefaultConfig())
		if err != nil {
			_ = g.close()
			return s.res, err
		}
		nsPerPick, allocs := measurePicks(g, pol, picks)
		row(policy+": SelectRegular over "+strconv.Itoa(n)+" workers", fmt.Sprintf("%.0f ns/pick, %.2f allocs/pick", nsPerPick, allocs))
		s.res.Measurements[policy+"_ns_per_pick"] = round3(nsPerPick)
		if err := g.close(); err != nil {
			s.note("gateway close: %v", err)
		}
	}

	perWaiterHeap, perWaiterTotal, handoff, err := measureAdmissionQueue(ctx, waiters)
	if err != nil {
		return s.res, err
	}
	s.res.Measurements["admission_waiters"] = waiters
	s.res.Measurements["admission_heap_bytes_per_waiter"] = round3(perWaiterHeap)
	s.res.Measurements["admission_heap_and_stack_bytes_per_waiter"] = round3(perWaiterTotal)
	s.res.Measurements["admission_handoff_ns"] = round3(handoff)
	row(fmt.Sprintf("admission: %d waiters, heap per waiter", waiters), fmt.Sprintf("%.0f B", perWaiterHeap))
	row(fmt.Sprintf("admission: %d waiters, heap + goroutine stack per waiter", waiters), fmt.Sprintf("%.0f B", perWaiterTotal))
	row("admission: slot handoff (release -> next waiter granted and releasing)", fmt.Sprintf("%.0f ns per waiter", handoff))
	s.note("engines run in-process (instant mode); the whole-process CPU includes the load generator and the engines")
	s.note("admission figures come from internal/admission directly: one worker, limit 1, the waiters chained (each releases as soon as granted)")
	return s.res, nil
}

func heapAfterGC() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func processCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

// measurePicks times placement over the gateway's live registry snapshot.
func measurePicks(g *gateway, pol placement.Policy, picks int) (nsPerPick, allocsPerPick float64) {
	snap := g.app.Registry.Snapshot()
	reqs := make([]placement.Request, 256)
	for i := range reqs {
		reqs[i] = placement.Request{Model: "sim-model", Text: Text(uint64(i%32), 256), TargetWorker: -1}
	}
	now := time.Now()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	start := time.Now()
	for i := 0; i < picks; i++ {
		_, _ = placement.SelectRegular(snap, &reqs[i&255], pol, nil, now)
	}
	el := time.Since(start)
	runtime.ReadMemStats(&m1)
	return float64(el.Nanoseconds()) / float64(picks), float64(m1.Mallocs-m0.Mallocs) / float64(picks)
}

// measureAdmissionQueue fills one worker's queue with waiters, measures their memory, then releases the
// slot and lets the waiters hand it on one after another.
func measureAdmissionQueue(ctx context.Context, waiters int) (heapPer, totalPer, handoffNS float64, err error) {
	ctrl, err := admission.New(admission.Settings{MaxInflightPerWorker: 1, QueueSize: waiters, QueueTimeout: 10 * time.Minute}, admission.Deps{})
	if err != nil {
		return 0, 0, 0, err
	}
	const w = "http://prefill-0"
	req := admission.Request{Queue: "m", Select: func(hasCapacity func(string) bool) (string, error) {
		if hasCapacity(w) {
			return w, nil
		}
		return "", admission.ErrNoCapacity
	}}
	first, err := ctrl.Acquire(ctx, req)
	if err != nil {
		return 0, 0, 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	var wg sync.WaitGroup
	errs := make(chan error, waiters)
	for range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := ctrl.Acquire(ctx, req)
			if err != nil {
				errs <- err
				return
			}
			s.Release(admission.ReleaseCompleted)
		}()
	}
	// Wait (polling, with a deadline) until every waiter is queued.
	deadline := time.Now().Add(60 * time.Second)
	for ctrl.Status().QueuedTotal < waiters {
		if time.Now().After(deadline) || len(errs) > 0 {
			first.Release(admission.ReleaseCompleted)
			cancel()
			wg.Wait()
			return 0, 0, 0, fmt.Errorf("admission: only %d of %d waiters queued", ctrl.Status().QueuedTotal, waiters)
		}
		time.Sleep(time.Millisecond)
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	heapPer = (float64(m1.HeapAlloc) - float64(m0.HeapAlloc)) / float64(waiters)
	totalPer = heapPer + (float64(m1.StackInuse)-float64(m0.StackInuse))/float64(waiters)
	start := time.Now()
	first.Release(admission.ReleaseCompleted)
	wg.Wait()
	handoffNS = float64(time.Since(start).Nanoseconds()) / float64(waiters)
	close(errs)
	for e := range errs {
		return heapPer, totalPer, handoffNS, fmt.Errorf("admission waiter: %w", e)
	}
	return heapPer, totalPer, handoffNS, nil
}
