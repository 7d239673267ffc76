package admission_test

import (
	"testing"
	"testing/synctest"

	"github.com/google/go-cmp/cmp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicegw/sluice/internal/admission"
)

// TestWorkerCaps: a cap bounds new grants below the limit, lowering it revokes nothing, raising it admits
// the head at once (no release needed), unlisted workers take the default cap, and clearing the caps
// restores the plain limit.
func TestWorkerCaps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPlacement(map[string][]string{"m": {"A", "B"}})
		m := newFakeMetrics()
		c := mustNew(t, on(4, 10), admission.Deps{Metrics: m})
		c.SetWorkerCaps(map[string]int{"A": 1}, 0) // B is unlisted: cap 0

		a1 := mustAdmit(t, "a1", goAcquireWait(c, p.req("m", "a1", "")))
		w2 := goAcquire(bg, c, p.req("m", "a2", ""))
		synctest.Wait()
		mustWait(t, "a2 (A at its cap 1, B capped at 0)", w2)

		c.SetWorkerCaps(map[string]int{"A": 2}, 0) // a raise admits the head without a release
		synctest.Wait()
		a2 := mustAdmit(t, "a2", w2)
		if a2.Worker() != "A" {
			t.Fatalf("a2 on %s, want A", a2.Worker())
		}
		w3 := goAcquire(bg, c, p.req("m", "a3", ""))
		synctest.Wait()
		mustWait(t, "a3", w3)

		c.SetWorkerCaps(map[string]int{"A": 0}, 0) // lowering below the slots held revokes nothing
		if got := c.Usage().Inflight["A"]; got != 2 {
			t.Fatalf("A holds %d after lowering its cap, want 2", got)
		}
		a1.Release(admission.ReleaseCompleted)
		synctest.Wait()
		mustWait(t, "a3 after a release under cap 0", w3)

		c.SetWorkerCaps(nil, 1) // every worker capped at 1: B is free, A still holds 1
		synctest.Wait()
		if s := mustAdmit(t, "a3", w3); s.Worker() != "B" {
			t.Fatalf("a3 on %s, want B", s.Worker())
		} else {
			defer s.Release(admission.ReleaseCompleted)
		}

		c.ClearWorkerCaps()
		for i := range 3 { // A has 3 of its 4 slots free again
			s := mustAdmit(t, "after clear", goAcquireWait(c, p.req("m", "c"+string(rune('0'+i)), "")))
			defer s.Release(admission.ReleaseCompleted)
		}
		a2.Release(admission.ReleaseCompleted)
		if v := m.snapshot().violations; len(v) > 0 {
			t.Errorf("metrics violations: %v", v)
		}
	})
}

// TestUsage: the snapshot cluster admission reports.
func TestUsage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPlacement(map[string][]string{"m": {"A"}, "n": {"A"}})
		c := mustNew(t, on(1, 10), admission.Deps{})
		s := mustAdmit(t, "held", goAcquireWait(c, p.req("m", "held", "")))
		w1 := goAcquire(bg, c, p.req("m", "q1", ""))
		w2 := goAcquire(bg, c, p.req("n", "q2", ""))
		synctest.Wait()
		want := admission.Usage{Limit: 1, Inflight: map[string]int{"A": 1}, Queued: map[string]int{"m": 1, "n": 1}}
		if diff := cmp.Diff(want, c.Usage()); diff != "" {
			t.Errorf("usage (-want +got):\n%s", diff)
		}
		s.Release(admission.ReleaseCompleted)
		pending := []<-chan result{w1, w2}
		for len(pending) > 0 { // each release admits one of the queues' heads (in rotating order)
			synctest.Wait()
			n := len(pending)
			for i, w := range pending {
				if r, ok := done(w); ok {
					if r.err != nil {
						t.Fatal(r.err)
					}
					r.slot.Release(admission.ReleaseCompleted)
					pending = append(pending[:i], pending[i+1:]...)
					break
				}
			}
			if len(pending) == n {
				t.Fatal("a release admitted nobody")
			}
		}
	})
}

// TestShareLimitedSpan: a wait that a cap caused is marked on its span; a wait the limit caused is not.
func TestShareLimitedSpan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		defer func() { _ = tp.Shutdown(bg) }()
		p := newPlacement(map[string][]string{"m": {"A"}})
		c := mustNew(t, on(1, 10), admission.Deps{Tracer: tp.Tracer("test")})

		// By the limit: A holds its one slot, the next request waits for the release.
		held := mustAdmit(t, "held", goAcquireWait(c, p.req("m", "held", "")))
		w := goAcquire(bg, c, p.req("m", "by-limit", ""))
		synctest.Wait()
		held.Release(admission.ReleaseCompleted)
		synctest.Wait()
		mustAdmit(t, "by-limit", w).Release(admission.ReleaseCompleted)

		// By the share: A is free but capped at 0 until the cap rises.
		c.SetWorkerCaps(nil, 0)
		w = goAcquire(bg, c, p.req("m", "by-share", ""))
		synctest.Wait()
		mustWait(t, "by-share", w)
		c.SetWorkerCaps(nil, 1)
		synctest.Wait()
		mustAdmit(t, "by-share", w).Release(admission.ReleaseCompleted)

		var limited []bool
		for _, s := range exp.GetSpans() {
			if s.Name != "sluice.admission.wait" {
				continue
			}
			v := false
			for _, kv := range s.Attributes {
				if kv.Key == "sluice.admission.share_limited" {
					v = kv.Value.AsBool()
				}
			}
			limited = append(limited, v)
		}
		if diff := cmp.Diff([]bool{false, false, true}, limited); diff != "" {
			t.Errorf("share_limited per wait span, in end order (held, by-limit, by-share) (-want +got):\n%s", diff)
		}
	})
}

// goAcquireWait runs Acquire and waits (inside a synctest bubble) until it returned or blocked.
func goAcquireWait(c *admission.Controller, r admission.Request) <-chan result {
	ch := goAcquire(bg, c, r)
	synctest.Wait()
	return ch
}
