package admission_test

import (
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
)

// shareRig is one slot of W, released one grant at a time on synctest's
// clock, with the order of grants by tenant.
type shareRig struct {
	t       *testing.T
	p       *placement
	c       *admission.Controller
	cur     *admission.Slot
	waiting []shareWaiter
	grants  []string // ids in grant order
	tenants []string // their tenants
}

type shareWaiter struct {
	id, tenant string
	ch         <-chan result
}

func newShareRig(t *testing.T, weights map[string]int, underShare bool) *shareRig {
	p := newPlacement(map[string][]string{"m": {"W"}})
	s := fair(weights)
	s.Tenants.UnderShareFirst = underShare
	c := mustNew(t, s, admission.Deps{})
	hold, err := c.Acquire(bg, tenantReq(p, "hold", "h"))
	if err != nil {
		t.Fatal(err)
	}
	return &shareRig{t: t, p: p, c: c, cur: hold}
}

func (r *shareRig) arrive(id, tenant string) {
	r.waiting = append(r.waiting, shareWaiter{id, tenant, goAcquire(bg, r.c, tenantReq(r.p, id, tenant))})
	synctest.Wait()
}

// next lets 10 ms of fake time pass (a prefill), releases the slot and
// returns the tenant granted it.
func (r *shareRig) next() string {
	r.t.Helper()
	return r.nextAfter(10 * time.Millisecond)
}

// nextAfter is next after a prefill of d.
func (r *shareRig) nextAfter(d time.Duration) string {
	r.t.Helper()
	time.Sleep(d) // synctest's clock: the grant rates need time to pass
	r.cur.Release(admission.ReleaseCompleted)
	synctest.Wait()
	for i, w := range r.waiting {
		if res, ok := done(w.ch); ok {
			if res.err != nil {
				r.t.Fatalf("%s: %v", w.id, res.err)
			}
			r.cur, r.waiting = res.slot, slices.Delete(r.waiting, i, i+1)
			r.grants, r.tenants = append(r.grants, w.id), append(r.tenants, w.tenant)
			return w.tenant
		}
	}
	r.t.Fatal("a release admitted nobody")
	return ""
}

func (r *shareRig) drain() {
	for len(r.waiting) > 0 {
		r.next()
	}
	r.cur.Release(admission.ReleaseCompleted)
}

// A quiet tenant's burst of 3 goes before a backlogged flood, although the
// quiet tenant's place in the ring is still held from its last request; the
// round robin alone serves it one a turn, between the flood's.
func TestTenantUnderShareBurstFirst(t *testing.T) {
	for _, tc := range []struct {
		underShare bool
		want       []string
	}{
		{true, []string{"q1", "q2", "q3", "f"}},
		{false, []string{"q1", "f", "q2", "f"}},
	} {
		t.Run(fmt.Sprint("underShare=", tc.underShare), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newShareRig(t, nil, tc.underShare)
				for i := range 30 {
					r.arrive(fmt.Sprint("f", i), "f")
				}
				r.arrive("q0", "q")
				for range 10 {
					r.next()
				}
				if !slices.Contains(r.grants, "q0") {
					t.Fatalf("q0 not served among the first grants %v", r.grants)
				}
				for i := 1; i <= 3; i++ {
					r.arrive(fmt.Sprint("q", i), "q")
				}
				var got []string
				for range 4 {
					if tenant := r.next(); tenant == "f" {
						got = append(got, "f")
					} else {
						got = append(got, r.grants[len(r.grants)-1])
					}
				}
				r.drain()
				if !slices.Equal(got, tc.want) {
					t.Fatalf("grants after the quiet burst %v, want %v", got, tc.want)
				}
			})
		})
	}
}

// Bound: a tenant that sends one request each time it is served (so it is
// always waiting, never new), or a burst each time it has none waiting,
// against backlogged floods gets no more than its weighted share in the long
// run, give or take the averages' lag: it is put first only while its
// measured rate is under its share, and its rate outlives its absences.
func TestTenantUnderShareGamingBound(t *testing.T) {
	for _, tc := range []struct {
		weights map[string]int
		floods  []string
		burst   int // g sends this many each time it has none waiting; 0: one each time it is served
	}{
		{nil, []string{"f"}, 0},
		{nil, []string{"f", "e"}, 0},
		{map[string]int{"g": 3}, []string{"f"}, 0},
		{map[string]int{"f": 3}, []string{"f", "e"}, 0},
		{nil, []string{"f"}, 5},
		{nil, []string{"f", "e"}, 20},
	} {
		t.Run(fmt.Sprint(tc.weights, tc.floods, tc.burst), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newShareRig(t, tc.weights, true)
				weight := func(n string) int {
					if w, ok := tc.weights[n]; ok {
						return w
					}
					return 1
				}
				total := weight("g")
				for _, f := range tc.floods {
					total += weight(f)
					for i := range 20 {
						r.arrive(fmt.Sprint(f, i), f)
					}
				}
				r.arrive("g0", "g")
				const grants, warm = 3000, 500 // 30 s of grants, 15 windows of the average
				gGot := 0
				for i := range grants {
					tenant := r.next()
					switch {
					case tenant != "g" || tc.burst == 0: // floods stay backlogged; g sends one each time it is served
						r.arrive(fmt.Sprint(tenant, "+", i), tenant)
					case !slices.ContainsFunc(r.waiting, func(w shareWaiter) bool { return w.tenant == "g" }):
						for k := range tc.burst { // g comes back from idle with a burst, at once
							r.arrive(fmt.Sprint("g+", i, ".", k), "g")
						}
					}
					if i >= warm && tenant == "g" {
						gGot++
					}
				}
				r.drain()
				share := float64(weight("g")) / float64(total)
				got := float64(gGot) / float64(grants-warm)
				t.Logf("g: %.3f of grants, share %.3f", got, share)
				if got > share*1.05 {
					t.Fatalf("g got %.3f of the grants, above its share %.3f by more than 5 %%", got, share)
				}
				if got < share*0.9 {
					t.Fatalf("g got %.3f of the grants, well below its share %.3f", got, share)
				}
			})
		})
	}
}
