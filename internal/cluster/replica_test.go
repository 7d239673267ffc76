package cluster

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

const (
	testPeriod = 50 * time.Millisecond
	testLease  = 400 * time.Millisecond
	w1         = "http://prefill-1:30000"
)

func staticCfg() Config { return Config{Mode: ModeStatic, Period: testPeriod, Lease: testLease} }

// checkBound fails the test if the running replicas hold more than limit slots on w.
func checkBound(t *testing.T, f *fleet, w string, limit int, when string) {
	t.Helper()
	if n := f.held(w); n > limit {
		t.Fatalf("%s: the fleet holds %d slots on %s, limit %d", when, n, w, limit)
	}
}

// TestStaticFleetFollowsDemand: three replicas elect the lowest, admit nothing before their first grant,
// then share the limit by demand (the busy replica gets what the others leave) without ever exceeding it.
func TestStaticFleetFollowsDemand(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFleet(t, 3, staticCfg())
		defer f.stopAll()
		for i := range 3 {
			f.start(i, 8, w1)
		}
		f.node(0).local.setWaiting(w1, 20) // the busy replica
		if f.node(0).local.admit(w1) {
			t.Fatal("a replica admitted before its first grant")
		}
		f.node(1).local.setWaiting(w1, 1)
		f.node(2).local.setWaiting(w1, 1)
		for range 40 {
			step(testPeriod)
			f.fill(w1)
			checkBound(t, f, w1, 8, "converging")
		}
		if got := f.coordinators(); !slices.Equal(got, []string{f.ids[0]}) {
			t.Fatalf("coordinators %v, want the lowest id only", got)
		}
		got := []int{f.node(0).local.held(w1), f.node(1).local.held(w1), f.node(2).local.held(w1)}
		if got[0]+got[1]+got[2] != 8 || got[0] < 6 {
			t.Fatalf("slots held %v: want all 8 in use, at least 6 on the busy replica", got)
		}
		st := f.node(0).r.Status()
		if !st.IsCoordinator || st.RaisesBlocked || len(st.Replicas) != 3 || st.FleetLimit != 8 {
			t.Fatalf("coordinator status %+v", st)
		}

		// The load moves to replica 2: shares follow once replica 0's slots drain, never over the limit.
		f.node(0).local.setWaiting(w1, 0)
		f.node(2).local.setWaiting(w1, 20)
		for range 40 {
			f.node(0).local.release(w1) // replica 0's prefills end one by one
			step(testPeriod)
			f.fill(w1)
			checkBound(t, f, w1, 8, "moving")
		}
		if n := f.node(2).local.held(w1); n < 6 {
			t.Fatalf("replica 2 holds %d after the load moved to it, want >= 6", n)
		}
	})
}

// TestStaticKillCoordinator: the coordinator dies; the next lowest takes over within two leases, and its
// share returns to the survivors within one lease after they last heard from it, with the bound intact.
func TestStaticKillCoordinator(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFleet(t, 3, staticCfg())
		defer f.stopAll()
		for i := range 3 {
			f.start(i, 6, w1)
			f.node(i).local.setWaiting(w1, 10)
		}
		for range 20 {
			step(testPeriod)
			f.fill(w1)
			checkBound(t, f, w1, 6, "before")
		}
		f.kill(0)
		killed := time.Now()
		var elected time.Duration
		for time.Since(killed) < 3*testLease {
			step(testPeriod)
			f.fill(w1)
			checkBound(t, f, w1, 6, "after the kill")
			if elected == 0 && slices.Equal(f.coordinators(), []string{f.ids[1]}) && f.node(1).r.Status().RaisesBlocked == false && len(f.node(2).r.Status().Members) > 0 && f.node(2).r.Status().Coordinator == f.ids[1] {
				elected = time.Since(killed)
			}
		}
		if elected == 0 || elected > 2*testLease {
			t.Fatalf("new coordinator after %v, want within two leases (%v)", elected, 2*testLease)
		}
		if got := f.held(w1); got != 6 {
			t.Fatalf("survivors hold %d after the coordinator died, want the whole limit 6", got)
		}
	})
}

// TestStaticKillFollower: a follower dies with slots; its share returns to the others within a lease of its
// last contact (plus the exchange that delivers it).
func TestStaticKillFollower(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFleet(t, 3, staticCfg())
		defer f.stopAll()
		for i := range 3 {
			f.start(i, 9, w1)
			f.node(i).local.setWaiting(w1, 10)
		}
		for range 20 {
			step(testPeriod)
			f.fill(w1)
		}
		if got := f.node(2).local.held(w1); got != 3 {
			t.Fatalf("replica 2 holds %d, want an even 3", got)
		}
		f.kill(2)
		killed := time.Now()
		returned := time.Duration(0)
		for time.Since(killed) < 2*testLease {
			step(testPeriod / 5)
			f.fill(w1)
			checkBound(t, f, w1, 9, "after the kill")
			if returned == 0 && f.held(w1) == 9 {
				returned = time.Since(killed)
			}
		}
		if returned == 0 || returned > testLease+2*testPeriod {
			t.Fatalf("share returned after %v, want within a lease plus two periods (%v)", returned, testLease+2*testPeriod)
		}
	})
}

// TestPartition: a replica that cannot reach the coordinator (one way, or both ways) keeps its share until
// its lease ends, then falls back to an even split no larger than its share; the bound holds throughout,
// and the fleet reconverges when the partition heals.
func TestPartition(t *testing.T) {
	for _, twoWay := range []bool{false, true} {
		name := "one way"
		if twoWay {
			name = "two ways"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFleet(t, 3, staticCfg())
				defer f.stopAll()
				for i := range 3 {
					f.start(i, 9, w1)
				}
				f.node(1).local.setWaiting(w1, 30) // replica 1 is busy: it holds most of the limit
				for range 20 {
					step(testPeriod)
					f.fill(w1)
				}
				before := f.node(1).local.held(w1)
				if before < 7 {
					t.Fatalf("replica 1 holds %d before the partition, want most of 9", before)
				}
				f.net.partition(f.ids[1], f.ids, twoWay)
				// The others get busy too; replica 1's prefills end slowly (one per lease).
				f.node(0).local.setWaiting(w1, 30)
				f.node(2).local.setWaiting(w1, 30)
				for i := range 60 {
					step(testPeriod)
					if i%8 == 0 {
						f.node(1).local.release(w1)
					}
					f.fill(w1)
					checkBound(t, f, w1, 9, "partitioned")
				}
				// Cut off one way it still hears the coordinator's pings, follows it and falls back; cut off
				// both ways it coordinates itself, but can raise itself to no more than its even split.
				st := f.node(1).r.Status()
				if c := f.node(1).local.cap(w1); c > 3 || st.Fallback == twoWay || st.IsCoordinator != twoWay {
					t.Fatalf("partitioned replica: cap %d, fallback %v, coordinator %v; want at most an even 3, fallback %v, coordinator %v",
						c, st.Fallback, st.IsCoordinator, !twoWay, twoWay)
				}
				f.net.heal()
				for range 40 {
					step(testPeriod)
					f.fill(w1)
					checkBound(t, f, w1, 9, "healed")
				}
				if st := f.node(1).r.Status(); st.Fallback || st.Coordinator != f.ids[0] {
					t.Fatalf("after healing: fallback %v, coordinator %q", st.Fallback, st.Coordinator)
				}
			})
		})
	}
}

// TestRestartedReplicaStartsFromZero: a replica that comes back (new incarnation) admits nothing until the
// coordinator grants it a share, and gets one.
func TestRestartedReplicaStartsFromZero(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFleet(t, 2, staticCfg())
		defer f.stopAll()
		f.start(0, 4, w1)
		f.start(1, 4, w1)
		f.node(1).local.setWaiting(w1, 10)
		for range 20 {
			step(testPeriod)
			f.fill(w1)
		}
		f.kill(1)
		nd := f.start(1, 4, w1)
		nd.local.setWaiting(w1, 10)
		if nd.local.admit(w1) {
			t.Fatal("restarted replica admitted before a grant")
		}
		for range 20 {
			step(testPeriod)
			f.fill(w1)
			checkBound(t, f, w1, 4, "after the restart")
		}
		if nd.local.held(w1) == 0 {
			t.Fatal("restarted replica got no share")
		}
	})
}

// TestSplitBrainIdleSide: a replica that held little is cut off both ways and then gets busy. It elects
// itself and, a lease later, raises itself to its even split; meanwhile the coordinator on the other side
// counts it at its even split and lowers its own side, whose prefills end within a lease. The bound holds.
func TestSplitBrainIdleSide(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFleet(t, 3, staticCfg())
		defer f.stopAll()
		for i := range 3 {
			f.start(i, 9, w1)
		}
		f.node(0).local.setWaiting(w1, 100)
		f.node(1).local.setWaiting(w1, 100)
		for range 20 {
			step(testPeriod)
			f.fill(w1)
		}
		if n := f.node(2).local.held(w1); n != 0 {
			t.Fatalf("idle replica holds %d", n)
		}
		f.net.partition(f.ids[2], f.ids, true)
		f.node(2).local.setWaiting(w1, 100)
		for range 80 {
			step(testPeriod)
			f.node(0).local.release(w1) // short prefills: one ends per replica per period
			f.node(1).local.release(w1)
			f.fill(w1)
			checkBound(t, f, w1, 9, "split")
		}
		if n := f.node(2).local.held(w1); n == 0 || n > 3 {
			t.Fatalf("isolated replica holds %d, want its even split 3 at most, and some", n)
		}
	})
}

// TestColdStartUnreachablePeer: one listed peer's host is down (calls to it time out, nothing refuses).
// The two running replicas admit nothing while it might still be reporting somewhere, then, two leases
// into the term, count it at its even split and share the rest.
func TestColdStartUnreachablePeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFleet(t, 3, staticCfg())
		defer f.stopAll()
		f.net.partition(f.ids[2], f.ids, true) // never started; its address black-holes
		start := time.Now()
		f.start(0, 9, w1).local.setWaiting(w1, 20)
		f.start(1, 9, w1).local.setWaiting(w1, 20)
		first := time.Duration(0)
		for time.Since(start) < 4*testLease {
			step(testPeriod)
			f.fill(w1)
			checkBound(t, f, w1, 9, "cold start")
			if first == 0 && f.held(w1) > 0 {
				first = time.Since(start)
			}
		}
		if first < 2*testLease {
			t.Fatalf("first admission after %v, want no earlier than two leases (%v)", first, 2*testLease)
		}
		if got := f.held(w1); got != 6 {
			t.Fatalf("the running replicas hold %d, want 9 minus the unreachable peer's even split 3 = 6", got)
		}
	})
}

// TestColdStartRefusedPeer: a listed peer where nothing listens (not started, or a wrong port) is dead a
// lease into the term; the others share the whole limit.
func TestColdStartRefusedPeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFleet(t, 3, staticCfg())
		defer f.stopAll()
		f.start(0, 9, w1).local.setWaiting(w1, 20)
		f.start(1, 9, w1).local.setWaiting(w1, 20)
		for range 3 * testLease / testPeriod {
			step(testPeriod)
			f.fill(w1)
			checkBound(t, f, w1, 9, "cold start")
		}
		if got := f.held(w1); got != 9 {
			t.Fatalf("the running replicas hold %d, want the whole limit 9", got)
		}
		st := f.node(0).r.Status()
		dead := 0
		for _, m := range st.Replicas {
			if m.State == stateDead {
				dead++
			}
		}
		if dead != 1 || len(st.Members) != 2 {
			t.Fatalf("coordinator sees %d dead, grants over members %v; want the refused peer dead and two members", dead, st.Members)
		}
	})
}
