package cluster

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"
)

type propOp struct {
	Kind    string
	Replica int
	To      int
	Worker  int
	N       int
	D       time.Duration
}

// TestBoundProperty drives three replicas through random load, early releases, time, network cuts (one
// way or both, between any pair, which can split the fleet into sides that each elect a coordinator),
// kills and restarts, and checks after every step that the running replicas never hold more than the limit
// on any worker. Every prefill ends within a lease of its admission: the package doc's condition for the
// bound to hold exactly under partitions. A decode worker's seats (under their own, different limit) are
// one more key: the fleet never holds more seats on it than the decode limit either.
func TestBoundProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		limit := rapid.IntRange(1, 6).Draw(rt, "limit")
		decLimit := rapid.IntRange(1, 6).Draw(rt, "decode_limit")
		ops := rapid.SliceOfN(rapid.Custom(func(rt *rapid.T) propOp {
			return propOp{
				Kind:    rapid.SampledFrom([]string{"arrive", "arrive", "release", "step", "step", "cut", "heal", "kill", "restart"}).Draw(rt, "kind"),
				Replica: rapid.IntRange(0, 2).Draw(rt, "replica"),
				To:      rapid.IntRange(0, 2).Draw(rt, "to"),
				Worker:  rapid.IntRange(0, 2).Draw(rt, "worker"),
				N:       rapid.IntRange(1, 5).Draw(rt, "n"),
				D:       rapid.SampledFrom([]time.Duration{testPeriod / 2, testPeriod, testLease / 2, testLease, 2 * testLease}).Draw(rt, "d"),
			}
		}), 5, 60).Draw(rt, "ops")
		var problem string
		synctest.Test(t, func(t *testing.T) { problem = runBoundProperty(t, limit, decLimit, ops) })
		if problem != "" {
			rt.Fatal(problem)
		}
	})
}

func runBoundProperty(t *testing.T, limit, decLimit int, ops []propOp) string {
	workers := []string{"http://p1:1", "http://p2:1", DecodeKey("http://d1:1")}
	f := newFleet(t, 3, staticCfg())
	defer f.stopAll()
	prefills := []time.Duration{testPeriod, testLease / 4, testLease / 2, testLease * 9 / 10}
	n := 0
	prefill := func() time.Duration { n++; return prefills[n%len(prefills)] }
	start := func(i int) { f.startDec(i, limit, decLimit, workers...).local.prefill = prefill }
	for i := range 3 {
		start(i)
	}
	cut := map[[2]int]bool{}
	for k, op := range ops {
		nd := f.node(op.Replica)
		w := workers[op.Worker]
		switch op.Kind {
		case "arrive":
			if nd != nil {
				nd.local.setWaiting(w, nd.local.waitingOn(w)+op.N)
			}
		case "release":
			if nd != nil {
				nd.local.release(w)
			}
		case "step":
			for end := time.Now().Add(op.D); time.Now().Before(end); {
				step(min(testPeriod/4, time.Until(end)))
				for _, nd := range f.nodes {
					nd.local.expire()
				}
			}
		case "cut":
			if op.To != op.Replica {
				cut[[2]int{op.Replica, op.To}] = true
				f.net.mu.Lock()
				f.net.cut[[2]string{f.ids[op.Replica], f.ids[op.To]}] = true
				f.net.mu.Unlock()
			}
		case "heal":
			clear(cut)
			f.net.heal()
		case "kill":
			if nd != nil && len(f.nodes) > 1 {
				f.kill(op.Replica)
			}
		case "restart":
			if nd == nil {
				start(op.Replica)
			}
		}
		for _, w := range workers {
			f.fill(w)
			if n, l := f.held(w), limitOf(w, limit, decLimit); n > l {
				return fmt.Sprintf("after op %d (%+v): the fleet holds %d on %s, limit %d", k, op, n, w, l)
			}
		}
	}
	return ""
}

// TestBoundRestartBehindOneWayCut is a case TestBoundProperty found: replica 0 dies, its limit-1 slot
// goes to replica 1, and it restarts where nobody can reach it though it reaches them. The others then
// follow it, cannot exchange, and fall back; replica 1's fallback was an even split over its last
// grant's members (itself and replica 2), 1, while replica 0 counted it at its even split over all
// three, 0, and took the slot too.
func TestBoundRestartBehindOneWayCut(t *testing.T) {
	ops := []propOp{
		{Kind: "kill", Replica: 0}, {Kind: "cut", Replica: 2, To: 0}, {Kind: "step", D: testLease},
		{Kind: "arrive", Replica: 1, Worker: 1, N: 2}, {Kind: "cut", Replica: 1, To: 0}, {Kind: "restart", Replica: 0},
		{Kind: "step", D: 2 * testLease}, {Kind: "arrive", Replica: 0, Worker: 1, N: 2},
	}
	synctest.Test(t, func(t *testing.T) {
		if problem := runBoundProperty(t, 1, 5, ops); problem != "" {
			t.Error(problem)
		}
	})
}
