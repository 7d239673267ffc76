package admission_test

import (
	"testing"
	"testing/synctest"

	"pgregory.net/rapid"

	"github.com/sluicegw/sluice/internal/admission"
)

// TestPropertyTenantInvariants runs the invariants of
// TestPropertyAdmissionInvariants with three tenants, fair queueing (t0
// weighing 2) and a per-tenant queue bound: the same checks hold, with FIFO
// within each tenant of each queue instead of within each queue, and
// tenant_queue_full among the expected outcomes.
func TestPropertyTenantInvariants(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		limit := rapid.IntRange(1, 3).Draw(rt, "limit")
		size := rapid.IntRange(0, 4).Draw(rt, "size")
		ts := admission.TenantSettings{
			Fair:      rapid.Bool().Draw(rt, "fair"),
			Weights:   map[string]int{"t0": 2},
			MaxQueued: rapid.IntRange(0, 2).Draw(rt, "maxQueued"),
		}
		if !ts.Fair && ts.MaxQueued == 0 {
			ts.Fair = true
		}
		ops := rapid.SliceOfN(genOp(), 1, 50).Draw(rt, "ops")
		var problems []string
		synctest.Test(t, func(t *testing.T) {
			problems = runProperty(limit, size, ops, ts)
		})
		if len(problems) > 0 {
			rt.Fatalf("invariants broken:\n%v", problems)
		}
	})
}

// fairLivenessWaiter returns a waiter of queue q that stands for its head in
// the liveness check: any of them when they all share one target (so that
// whichever is the head could use the same workers); ok is false when their
// targets differ, since the head is then unknown to the test.
func fairLivenessWaiter(pending []propWaiter, q string, targets map[string]string) (w propWaiter, ok bool) {
	first := true
	for _, p := range pending {
		if p.id[:2] != q {
			continue
		}
		if first {
			w, first = p, false
			continue
		}
		if targets[p.id] != targets[w.id] {
			return w, false
		}
	}
	return w, !first
}
