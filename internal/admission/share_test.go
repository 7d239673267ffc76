package admission_test

import (
	"context"
	"errors"
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

// Early rejection in share mode predicts a quiet tenant's position from the
// tenants under their share, not from the round robin's turns. Behind a
// flood served at about one grant a second (alone, so not under its share)
// with 4 waiting, and a 4.5 s timeout: the quiet tenant's burst of three is
// predicted to go first, at positions 1-3, and waits; its fourth would
// follow one of the flood's (the quiet rate per weight is above the flood's
// by then), at 5: rejected. The round robin puts the quiet tenant's second
// behind the flood's next turn (position 4) and its third behind two (6):
// the third and fourth are rejected. The flood's newcomers are rejected in
// both.
func TestTenantShareEarlyRejection(t *testing.T) {
	for _, tc := range []struct {
		mode      fairMode
		quietKept int // of the quiet tenant's 4
	}{
		{modeShare, 3},
		{modeRoundRobin, 2},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := newPlacement(map[string][]string{"m": {"A"}})
				s := early(4500 * time.Millisecond)
				s.Tenants = tc.mode.apply(admission.TenantSettings{})
				c := mustNew(t, s, admission.Deps{})
				ctx, cancel := context.WithCancel(bg)
				defer cancel()
				// 21 queued grants of the flood one second apart: the release
				// rate is about 1/s, and the flood's rate is measured. One of
				// its requests always waits (a backlog, as in a flood).
				held := mustAdmit(t, "flood", goAcquireNow(c, tenantReq(p, "flood", "flood")))
				next := goAcquire(ctx, c, tenantReq(p, "warm", "flood"))
				synctest.Wait()
				for i := range 21 {
					ch := goAcquire(ctx, c, tenantReq(p, fmt.Sprint("warm", i), "flood"))
					synctest.Wait()
					time.Sleep(time.Second)
					held.Release(admission.ReleaseCompleted)
					synctest.Wait()
					held, next = mustAdmit(t, "warm", next), ch
				}
				waiting := []<-chan result{next} // the flood's first waiter
				try := func(id, tenant string) bool {
					ch := goAcquire(ctx, c, tenantReq(p, id, tenant))
					synctest.Wait()
					if r, ok := done(ch); ok {
						if !errors.Is(r.err, admission.ErrPredictedTimeout) {
							t.Fatalf("%s: %v, want waiting or a predicted timeout", id, r.err)
						}
						return false
					}
					waiting = append(waiting, ch)
					return true
				}
				for i := range 3 { // positions 2-4: within 4.5 s
					if !try(fmt.Sprint("flood", i), "flood") {
						t.Fatalf("flood's %d-th rejected, want it waiting", i+2)
					}
				}
				if try("flood3", "flood") {
					t.Fatal("flood's 5th waits, want a predicted timeout")
				}
				var kept []string
				for i := 1; i <= 4; i++ {
					if id := fmt.Sprint("q", i); try(id, "quiet") {
						kept = append(kept, id)
					}
				}
				if want := []string{"q1", "q2", "q3", "q4"}[:tc.quietKept]; !slices.Equal(kept, want) {
					t.Errorf("quiet requests waiting %v, want %v", kept, want)
				}
				if try("flood4", "flood") {
					t.Error("flood's newcomer after the quiet burst waits, want a predicted timeout")
				}
				cancel()
				for _, ch := range waiting {
					<-ch
				}
				held.Release(admission.ReleaseCompleted)
			})
		})
	}
}

// A flood's rate outlives a moment with nobody waiting (the empty queue is
// dropped, its rates kept for the next queue of the model): served ten
// times, one request queued at a time, then with three more queued behind
// a quiet tenant's burst of three, the flood is over its share and the
// burst goes first. Without the kept rates the first grant would go to the
// round robin's head, the flood's.
func TestTenantShareRatesOutliveAnEmptyQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newShareRig(t, nil, true)
		for i := range 10 {
			r.arrive(fmt.Sprint("w", i), "f")
			if got := r.next(); got != "f" {
				t.Fatalf("warm grant %d to %s", i, got)
			}
		}
		for i := range 3 {
			r.arrive(fmt.Sprint("f", i), "f")
		}
		for i := range 3 {
			r.arrive(fmt.Sprint("q", i), "q")
		}
		var got []string
		for len(r.waiting) > 0 {
			got = append(got, r.next())
		}
		r.drain()
		if want := []string{"q", "q", "q", "f", "f", "f"}; !slices.Equal(got, want) {
			t.Fatalf("grants %v, want %v", got, want)
		}
	})
}
