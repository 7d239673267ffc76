package admission_test

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicegw/sluice/internal/admission"
)

// fairMode is one of --tenant-fairness's modes in admission's terms.
type fairMode int

const (
	modeOff        fairMode = iota // one FIFO (a per-tenant bound may still apply)
	modeRoundRobin                 // deficit round robin
	modeShare                      // under-share tenants first, round robin otherwise
)

func (m fairMode) String() string { return [...]string{"off", "round-robin", "share"}[m] }

// apply returns ts with m's fairness; weights, bound and burst are kept.
func (m fairMode) apply(ts admission.TenantSettings) admission.TenantSettings {
	ts.Fair, ts.UnderShareFirst = m != modeOff, m == modeShare
	return ts
}

// TestPropertyTenantInvariants runs the invariants of
// TestPropertyAdmissionInvariants with three tenants (t0 weighing 2), a
// fairness mode drawn (off, round robin or share, with or without a burst)
// and a per-tenant queue bound: the same checks hold (head-only selection,
// no overtaking of a strict target, cancellation, no lost wake-up, each
// slot released once), with FIFO within each tenant of each queue instead
// of within each queue, and tenant_queue_full among the expected outcomes.
// With live modes, each update switches to the mode it drew, which rebuilds
// the per-tenant state around the waiters (tenancy itself goes off and on
// when the mode is off and there is no bound).
func TestPropertyTenantInvariants(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		limit := rapid.IntRange(1, 2).Draw(rt, "limit")
		size := rapid.IntRange(0, 8).Draw(rt, "size")
		mode := fairMode(rapid.IntRange(0, 2).Draw(rt, "mode"))
		live := rapid.Bool().Draw(rt, "live")
		ts := mode.apply(admission.TenantSettings{
			Weights:   map[string]int{"t0": 2},
			MaxQueued: rapid.IntRange(0, 2).Draw(rt, "maxQueued"),
			Burst:     rapid.IntRange(0, 3).Draw(rt, "burst"),
		})
		if mode == modeOff && ts.MaxQueued == 0 && !live {
			ts.MaxQueued = 1 // else tenancy is off throughout: TestPropertyAdmissionInvariants
		}
		// Longer runs than the seed's, with more arrivals and drained at
		// most at the end: the orders of the round robin and of share mode
		// need several queued grants of several tenants.
		ops := rapid.SliceOfN(genOpOf(tenantOpKinds, false), 40, 120).Draw(rt, "ops")
		if rapid.IntRange(0, 9).Draw(rt, "drain") == 0 {
			ops = append(ops, op{Kind: opDrain})
		}
		var problems []string
		synctest.Test(t, func(t *testing.T) {
			problems = runProperty(limit, size, ops, ts, live)
		})
		if len(problems) > 0 {
			rt.Fatalf("invariants broken:\n%v", problems)
		}
	})
}

// tenantOpKinds weigh the ops of TestPropertyTenantInvariants towards
// arrivals and releases, so that queues stay long.
var tenantOpKinds = []opKind{opAcquire, opAcquire, opAcquire, opAcquire, opAcquire, opAcquire,
	opRelease, opRelease, opRelease, opRelease, opCancel, opAdvance, opAdvance,
	opRemoveWorker, opAddWorker, opToggleBreaker, opUpdate, opWake}

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

// TestPropertyTenantShareBound checks fair queueing's bound with bursts: with
// one slot and random arrivals of three tenants (t0 weighing 2) between
// releases, over every run of consecutive grants during which a tenant Y had
// a waiter at each grant and the queue never emptied, any other tenant X was
// granted at most
// w_X*((n_Y+B)/w_Y + 2) + B, n_Y being Y's grants in that run and B the
// burst: its share of Y's turns (the debt Y may still owe counted as B
// grants), one turn either side, and one burst. A grant that leaves nobody
// waiting ends the run: an empty band owes nobody (roundrobin.go), so every
// tenant's next turn is a new one, Y's included (rapid found Y "backlogged"
// across two such resets, getting two fresh bursts while X got three).
func TestPropertyTenantShareBound(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		burst := rapid.IntRange(0, 4).Draw(rt, "burst")
		weights := map[string]int{"t0": 2, "t1": 1, "t2": 1}
		// An op is k arrivals of a tenant (0-2), k releases (3), or t2 gaming
		// the burst (4): it sends a burst's worth, waits for all of it and for
		// k more grants, when without the debt it would be new again.
		type op struct{ what, k int }
		ops := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) op {
			return op{rapid.IntRange(0, 4).Draw(t, "what"), rapid.IntRange(1, 5).Draw(t, "k")}
		}), 1, 40).Draw(rt, "ops")
		// A backlog of t0 first, so that the runs the bound covers do not
		// all end where the queue empties.
		backlog := rapid.IntRange(0, 30).Draw(rt, "backlog")
		var grants []string
		var backlogged []map[string]bool // per grant: the tenants with a waiter when it was made
		var emptied []bool               // per grant: whether it left nobody waiting
		synctest.Test(t, func(t *testing.T) {
			s := on(1, 100)
			s.Tenants = admission.TenantSettings{Fair: true, Weights: map[string]int{"t0": 2}, Burst: burst}
			p := newPlacement(map[string][]string{"m": {"W"}})
			c := mustNew(t, s, admission.Deps{})
			cur, err := c.Acquire(bg, tenantReq(p, "hold", "x"))
			if err != nil {
				t.Fatal(err)
			}
			type pending struct {
				tenant string
				ch     <-chan result
			}
			var waiting []pending
			release := func() bool {
				if len(waiting) == 0 {
					return false
				}
				queued := map[string]bool{}
				for _, w := range waiting {
					queued[w.tenant] = true
				}
				cur.Release(admission.ReleaseCompleted)
				synctest.Wait()
				for i, w := range waiting {
					if r, ok := done(w.ch); ok {
						if r.err != nil {
							t.Fatalf("%s: %v", w.tenant, r.err)
						}
						cur = r.slot
						grants, backlogged = append(grants, w.tenant), append(backlogged, queued)
						waiting = slices.Delete(waiting, i, i+1)
						emptied = append(emptied, len(waiting) == 0)
						return true
					}
				}
				t.Fatal("a release admitted nobody")
				return false
			}
			arrive := func(id, tenant string) {
				waiting = append(waiting, pending{tenant, goAcquire(bg, c, tenantReq(p, id, tenant))})
				synctest.Wait()
			}
			for k := range backlog {
				arrive(fmt.Sprint("b", k), "t0")
			}
			for i, o := range ops {
				if o.what == 4 {
					const tenant = "t2"
					for k := range max(burst, 1) {
						arrive(fmt.Sprint("r", i, ".", k), tenant)
					}
					for slices.ContainsFunc(waiting, func(w pending) bool { return w.tenant == tenant }) {
						release()
					}
					for range o.k {
						release()
					}
					continue
				}
				for k := range o.k {
					if o.what == 3 {
						release()
						continue
					}
					arrive(fmt.Sprint("r", i, ".", k), fmt.Sprint("t", o.what))
				}
			}
			for release() {
			}
			cur.Release(admission.ReleaseCompleted)
		})
		if msg := shareBoundViolation(grants, backlogged, emptied, weights, burst); msg != "" {
			rt.Fatal(msg)
		}
	})
}

// shareBoundViolation checks the bound of TestPropertyTenantShareBound on a
// grant sequence and, per grant, the tenants that had a waiter when it was
// made and whether it left nobody waiting; it describes the first violation,
// or returns "".
func shareBoundViolation(grants []string, backlogged []map[string]bool, emptied []bool, weights map[string]int, burst int) string {
	b := max(burst, 1)
	for y, wy := range weights {
		for i := range grants {
			n := map[string]int{}
			for j := i; j < len(grants) && backlogged[j][y] && (j == i || !emptied[j-1]); j++ {
				n[grants[j]]++
				for x, wx := range weights {
					if x != y && n[x]*wy > wx*(n[y]+b+2*wy)+b*wy {
						return fmt.Sprintf("grants %d..%d of %v: %s got %d while %s, backlogged, got %d (burst %d)", i, j, grants, x, n[x], y, n[y], burst)
					}
				}
			}
		}
	}
	return ""
}

// shareWindow is admission's share.go constant of the same name (the
// averages' time constant, 2 s), which the bound below depends on.
const shareWindow = 2 * time.Second

// TestPropertyShareFairness checks share mode's long-run fairness: with one
// slot, 2-4 tenants of weights 1-4 all backlogged throughout and prefills of
// random lengths, after each grant every tenant's grants stay within a bound
// of its weighted max-min share (with all backlogged, w_i/W of the grants).
//
// The bound the averages permit: let r_i be tenant i's grants decayed with
// time constant tau (each grant adds 1, then e^(-age/tau)) over its weight.
// Share mode grants the tenant of lowest r_i whenever they are not all equal
// (the lowest is then under the weighted mean, its share), the round robin
// otherwise, and decay scales all alike; so the spread max r - min r never
// exceeds the largest step, M = 1/w_min (a grant lifts the lowest by at most
// M; if it becomes the highest the spread is at most M, else it does not
// grow). Checked first, from the grant times. Since dG_i = w_i (dr_i + r_i
// dt/tau), G_i/w_i = r_i(t) + (1/tau) * integral of r_i up to t, so for any two
// tenants |G_i/w_i - G_j/w_j| <= M (1 + t/tau), and as the weighted mean of
// G_j/w_j is n/W: |G_i - w_i n/W| <= w_i M (1 + t/tau), t being the time since
// the first grant. The t/tau term is the averages' lag: they forget, so an
// excess as old as several windows is no longer corrected.
func TestPropertyShareFairness(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		k := rapid.IntRange(2, 4).Draw(rt, "tenants")
		weights := map[string]int{}
		names := make([]string, k)
		wmin, wsum := math.MaxInt, 0
		for i := range names {
			names[i] = fmt.Sprint("t", i)
			weights[names[i]] = rapid.IntRange(1, 4).Draw(rt, "weight")
			wmin, wsum = min(wmin, weights[names[i]]), wsum+weights[names[i]]
		}
		prefills := rapid.SliceOfN(rapid.SampledFrom([]time.Duration{
			time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond, 60 * time.Millisecond, 300 * time.Millisecond,
		}), 1, 8).Draw(rt, "prefills")
		n := rapid.IntRange(50, 250).Draw(rt, "grants")
		m := 1 / float64(wmin)
		const eps = 1e-9
		var problem string
		synctest.Test(t, func(t *testing.T) {
			r := newShareRig(t, weights, true)
			for _, name := range names {
				for j := range 3 { // each keeps 3 waiting: one comes back as one is granted
					r.arrive(fmt.Sprint(name, ".", j), name)
				}
			}
			got := map[string]int{}
			decayed := map[string]float64{}
			var start, last time.Time
			for i := range n {
				tenant := r.nextAfter(prefills[i%len(prefills)])
				now := time.Now()
				if i == 0 {
					start, last = now, now
				}
				decay := math.Exp(-float64(now.Sub(last)) / float64(shareWindow))
				for name := range decayed {
					decayed[name] *= decay
				}
				last = now
				got[tenant]++
				decayed[tenant] += 1 / float64(weights[tenant])
				r.arrive(fmt.Sprint(tenant, "+", i), tenant)
				if problem != "" {
					continue
				}
				lo, hi := math.Inf(1), math.Inf(-1)
				for _, name := range names {
					lo, hi = min(lo, decayed[name]), max(hi, decayed[name])
				}
				if hi-lo > m+eps {
					problem = fmt.Sprintf("grant %d: decayed grants per weight spread %.3f, above 1/w_min = %.3f (%v)", i, hi-lo, m, decayed)
					continue
				}
				bound := func(name string) float64 {
					return float64(weights[name]) * m * (1 + float64(now.Sub(start))/float64(shareWindow))
				}
				for _, name := range names {
					share := float64(weights[name]) * float64(i+1) / float64(wsum)
					if math.Abs(float64(got[name])-share) > bound(name)+eps {
						problem = fmt.Sprintf("after %d grants (%v): %s got %d, share %.1f, bound %.1f (%v)",
							i+1, now.Sub(start), name, got[name], share, bound(name), got)
					}
				}
			}
			r.drain()
		})
		if problem != "" {
			rt.Fatal(problem)
		}
	})
}
