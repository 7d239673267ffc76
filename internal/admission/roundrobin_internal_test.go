package admission

import (
	"fmt"
	"math"
	"testing"

	"pgregory.net/rapid"
)

// The round robin serves each tenant FIFO, and tenants that stay backlogged
// get grants in proportion to their weights: after any number of grants,
// two backlogged tenants' grants per weight differ by at most 2 (one turn
// each in progress).
func TestPropertyRoundRobinWeightedTurns(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		tenants := rapid.IntRange(1, 4).Draw(rt, "tenants")
		ts := TenantSettings{Fair: true, Weights: map[string]int{}}
		for i := range tenants {
			ts.Weights[fmt.Sprint("t", i)] = rapid.IntRange(1, 3).Draw(rt, "weight")
		}
		rr := newRoundRobin(&ts)
		r := &orderRig{o: rr}
		for range rapid.IntRange(0, 50).Draw(rt, "churn") { // any history first
			if h := r.step(rt, tenants, 1); h != nil {
				r.checkTenantFIFO(rt, h)
			}
		}
		for i := range tenants { // then a backlog of every tenant, served without arrivals
			for range 40 {
				r.push(0, fmt.Sprint("t", i))
			}
		}
		grants := map[string]int{}
		for range 30 {
			h := rr.head()
			r.checkTenantFIFO(rt, h)
			r.remove(h, true)
			grants[h.tenant]++
			lo, hi := math.Inf(1), math.Inf(-1)
			for name, w := range ts.Weights {
				x := float64(grants[name]) / float64(w)
				lo, hi = min(lo, x), max(hi, x)
			}
			if hi-lo > 2 {
				rt.Fatalf("grants %v with weights %v: per weight %.2f to %.2f", grants, ts.Weights, lo, hi)
			}
		}
		if rr.len() != len(r.waiting) {
			rt.Fatalf("len %d, want %d", rr.len(), len(r.waiting))
		}
	})
}
