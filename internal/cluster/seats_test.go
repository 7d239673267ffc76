package cluster

import (
	"testing"
	"testing/synctest"
)

// TestDecodeSeatsShareOneBound: two replicas, each busy on one prefill worker and one decode worker. The
// decode seat limit (3) is the fleet's, not each replica's, and the prefill limit (8) is kept apart from
// it: together they never hold more than 3 seats on the decode worker, both get seats (demand-weighted),
// and the prefill side uses its own limit in full. When the load moves to one replica, the seats follow
// as the other's drain.
func TestDecodeSeatsShareOneBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d1 := DecodeKey("http://decode-1:30000")
		f := newFleet(t, 2, staticCfg())
		defer f.stopAll()
		for i := range 2 {
			f.startDec(i, 8, 3, w1, d1)
			f.node(i).local.setWaiting(w1, 10)
			f.node(i).local.setWaiting(d1, 10)
		}
		for range 40 {
			step(testPeriod)
			f.fill(w1)
			f.fill(d1)
			checkBound(t, f, d1, 3, "converging (decode)")
			checkBound(t, f, w1, 8, "converging (prefill)")
		}
		s0, s1 := f.node(0).local.held(d1), f.node(1).local.held(d1)
		if s0+s1 != 3 || s0 == 0 || s1 == 0 {
			t.Fatalf("seats held %d + %d: want all 3 in use, on both replicas", s0, s1)
		}
		if n := f.held(w1); n != 8 {
			t.Fatalf("the fleet holds %d prefill slots, want 8 (the prefill limit, not the decode one)", n)
		}
		if st := f.node(0).r.Status(); st.FleetLimit != 8 || st.FleetDecodeLimit != 3 {
			t.Fatalf("fleet limits %d (prefill) and %d (decode), want 8 and 3", st.FleetLimit, st.FleetDecodeLimit)
		}

		f.node(0).local.setWaiting(d1, 0)
		for range 40 {
			f.node(0).local.release(d1) // replica 0's decodes end one by one
			step(testPeriod)
			f.fill(d1)
			checkBound(t, f, d1, 3, "moving (decode)")
		}
		if n := f.node(1).local.held(d1); n != 3 {
			t.Fatalf("replica 1 holds %d seats after the load moved to it, want 3", n)
		}
	})
}
