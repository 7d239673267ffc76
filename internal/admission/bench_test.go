package admission_test

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/benchcpu"
)

// benchSelect picks the first of workers with capacity; built once so the
// benchmark measures the controller, not closure allocation.
func benchSelect(workers ...string) admission.Request {
	return admission.Request{Queue: "m", Select: func(hasCap func(string) bool) (string, error) {
		for _, w := range workers {
			if hasCap(w) {
				return w, nil
			}
		}
		return "", admission.ErrNoCapacity
	}}
}

func BenchmarkAcquireRelease(b *testing.B) {
	for _, bc := range []struct {
		name string
		s    admission.Settings
		deps admission.Deps
	}{
		{name: "enabled", s: on(1, 100)},
		{name: "enabled-noop-tracer", s: on(1, 100), deps: admission.Deps{Tracer: noop.NewTracerProvider().Tracer("")}},
		{name: "disabled", s: admission.DefaultSettings()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := mustNew(b, bc.s, bc.deps)
			req := benchSelect("A")
			ctx := context.Background()
			b.ReportAllocs()
			stop := benchcpu.Start(b)
			for b.Loop() {
				s, err := c.Acquire(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				s.Release(admission.ReleaseCompleted)
			}
			stop()
		})
	}
}

// BenchmarkAcquireReleaseParallel runs 8 goroutines per CPU. "no-queue" has
// room for all of them (lock contention only); "queueing" has 2 slots, so
// most Acquires wait and are handed a slot by a release.
func BenchmarkAcquireReleaseParallel(b *testing.B) {
	for _, bc := range []struct {
		name    string
		workers []string
		limit   int
	}{
		{name: "no-queue", workers: []string{"A", "B", "C", "D"}, limit: 64},
		{name: "queueing", workers: []string{"A", "B"}, limit: 1},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := mustNew(b, admission.Settings{MaxInflightPerWorker: bc.limit, QueueSize: 1 << 20, QueueTimeout: time.Hour}, admission.Deps{})
			req := benchSelect(bc.workers...)
			b.SetParallelism(8)
			b.ReportAllocs()
			stop := benchcpu.Start(b)
			defer stop()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					s, err := c.Acquire(ctx, req)
					if err != nil {
						b.Error(err)
						return
					}
					s.Release(admission.ReleaseCompleted)
				}
			})
		})
	}
}

// BenchmarkHandoff1000Waiters keeps 1,000 requests queued on one slot: each
// op is one release handing the slot to the head of the queue, the granted
// goroutine then releasing and queueing again at the back.
func BenchmarkHandoff1000Waiters(b *testing.B) {
	const waiters = 1000
	c := mustNew(b, admission.Settings{MaxInflightPerWorker: 1, QueueSize: waiters + 1, QueueTimeout: time.Hour}, admission.Deps{})
	req := benchSelect("A")
	ctx := context.Background()
	held, err := c.Acquire(ctx, req)
	if err != nil {
		b.Fatal(err)
	}
	var ops atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range waiters {
		wg.Go(func() {
			for !stop.Load() {
				s, err := c.Acquire(ctx, req)
				if err != nil {
					b.Error(err)
					return
				}
				if ops.Add(1) >= int64(b.N) {
					stop.Store(true)
				}
				s.Release(admission.ReleaseCompleted)
			}
		})
	}
	for c.Status().QueuedTotal < waiters {
		runtime.Gosched() // setup: let every goroutine queue
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu := benchcpu.Start(b)
	held.Release(admission.ReleaseCompleted)
	wg.Wait()
	b.StopTimer()
	cpu()
}

// benchPair picks the first prefill worker with a slot and the first decode
// worker with a seat, decode first (as dispatch does).
func benchPair(prefill, decode []string) admission.Request {
	r := benchSelect(prefill...)
	r.SelectPair = func(hasSlot, hasSeat func(string) bool) (string, string, error) {
		dec := ""
		for _, d := range decode {
			if hasSeat(d) {
				dec = d
				break
			}
		}
		if dec == "" {
			return "", "", admission.ErrNoSeat
		}
		for _, w := range prefill {
			if hasSlot(w) {
				return w, dec, nil
			}
		}
		return "", "", admission.ErrNoCapacity
	}
	return r
}

// BenchmarkSlotVsSlotAndSeat measures, in one run, acquire + release of a
// prefill slot alone and of a slot plus a decode seat, under contention (8
// goroutines per CPU): "free" has room for all (lock contention only),
// "queueing" has 2 slots (or 2 seats), so most acquires wait and are handed
// their grant by a release. The seat's cost is the ratio of the pairs.
func BenchmarkSlotVsSlotAndSeat(b *testing.B) {
	prefill, decode := []string{"A", "B", "C", "D"}, []string{"X", "Y", "Z", "W"}
	for _, bc := range []struct {
		name  string
		s     admission.Settings
		seats bool
	}{
		{name: "free/slot", s: admission.Settings{MaxInflightPerWorker: 64, QueueSize: 1 << 20, QueueTimeout: time.Hour}},
		{name: "free/slot+seat", s: admission.Settings{MaxInflightPerWorker: 64, DecodeMaxInflightPerWorker: 64, QueueSize: 1 << 20, QueueTimeout: time.Hour}, seats: true},
		{name: "queueing/slot", s: admission.Settings{MaxInflightPerWorker: 1, QueueSize: 1 << 20, QueueTimeout: time.Hour}},
		{name: "queueing/slot+seat", s: admission.Settings{MaxInflightPerWorker: 64, DecodeMaxInflightPerWorker: 1, QueueSize: 1 << 20, QueueTimeout: time.Hour}, seats: true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := mustNew(b, bc.s, admission.Deps{})
			req := benchPair(prefill, decode)
			if bc.name == "queueing/slot" {
				req = benchPair(prefill[:2], decode)
			}
			if bc.name == "queueing/slot+seat" {
				req = benchPair(prefill, decode[:2])
			}
			b.SetParallelism(8)
			b.ReportAllocs()
			stop := benchcpu.Start(b)
			defer stop()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					s, err := c.Acquire(ctx, req)
					if err != nil {
						b.Error(err)
						return
					}
					s.Release(admission.ReleaseCompleted)
					if bc.seats {
						s.Seat().Release(admission.ReleaseCompleted)
					}
				}
			})
		})
	}
}
