package placement

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/worker"
)

func newManualForTest(t *testing.T, mode string, now func() time.Time) *Manual {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Policy = PolicyManual
	cfg.AssignmentMode = mode
	cfg.Rand = seededRand(7)
	cfg.Now = now
	cfg.StickyIdle = time.Hour
	return mustNew(t, PolicyManual, cfg).(*Manual)
}

// without returns cands minus the worker at index i (it became unhealthy).
func without(cands []*worker.Worker, i int) []*worker.Worker {
	return slices.Delete(slices.Clone(cands), i, i+1)
}

func TestManualPinsKeys(t *testing.T) {
	_, cands := newFleet(t, worker.RoleRegular, "m", 4)
	m := newManualForTest(t, AssignRandom, time.Now)
	pinned := map[string]*worker.Worker{}
	for k := range 40 {
		key := fmt.Sprintf("session-%d", k)
		i := m.Pick(cands, &Request{RoutingKey: key})
		pinned[key] = cands[i]
	}
	spread := map[string]bool{}
	for key, w := range pinned {
		spread[w.Key()] = true
		for range 5 {
			if got := cands[m.Pick(cands, &Request{RoutingKey: key})]; got != w {
				t.Fatalf("key %s moved from %s to %s", key, w.URL(), got.URL())
			}
		}
	}
	if len(spread) < 2 {
		t.Fatalf("40 keys assigned at random all landed on %v", spread)
	}
	// A new worker moves no key (unlike consistent hashing).
	_, more := newFleet(t, worker.RoleRegular, "m", 5) // the same four URLs and one more
	for key, w := range pinned {
		if got := more[m.Pick(more, &Request{RoutingKey: key})]; got.URL() != w.URL() {
			t.Fatalf("adding a worker moved key %s from %s to %s", key, w.URL(), got.URL())
		}
	}
}

// TestManualFailover: a key whose worker is gone moves to another and remembers both; it goes back
// to the first when that returns (SMG keeps the oldest first), and forgets the oldest beyond two.
func TestManualFailover(t *testing.T) {
	_, cands := newFleet(t, worker.RoleRegular, "m", 3)
	m := newManualForTest(t, AssignMinLoad, time.Now)
	req := &Request{RoutingKey: "conv"}
	first := m.Pick(cands, req)
	down := without(cands, first)
	second := down[m.Pick(down, req)]
	if second == cands[first] {
		t.Fatal("failover picked the missing worker")
	}
	if got := cands[m.Pick(cands, req)]; got != cands[first] {
		t.Fatalf("after recovery the key went to %s, want its first worker %s", got.URL(), cands[first].URL())
	}
	// Both remembered workers gone: a third is assigned and the oldest forgotten.
	var third []*worker.Worker
	for _, w := range cands {
		if w != cands[first] && w != second {
			third = append(third, w)
		}
	}
	if got := third[m.Pick(third, req)]; got != third[0] {
		t.Fatalf("third assignment = %s", got.URL())
	}
	if got := cands[m.Pick(cands, req)]; got != second {
		t.Fatalf("with everyone back the key went to %s, want %s (the first was forgotten)", got.URL(), second.URL())
	}
}

func TestManualAssignmentModes(t *testing.T) {
	_, cands := newFleet(t, worker.RoleRegular, "m", 3)
	setLoad(t, cands[0], 5)
	setLoad(t, cands[2], 2)
	minLoad := newManualForTest(t, AssignMinLoad, time.Now)
	for k := range 10 {
		if i := minLoad.Pick(cands, &Request{RoutingKey: fmt.Sprint(k)}); i != 1 {
			t.Fatalf("min_load picked %s (load %d)", cands[i].URL(), cands[i].Load())
		}
	}
	delegate := newManualForTest(t, AssignDelegate, time.Now)
	if i := delegate.Pick(cands, &Request{RoutingKey: "x"}); i != 1 {
		t.Fatalf("delegate (= min_load in SMG's manual policy) picked %d", i)
	}
	minGroup := newManualForTest(t, AssignMinGroup, time.Now)
	counts := map[int]int{}
	for k := range 9 {
		counts[minGroup.Pick(cands, &Request{RoutingKey: fmt.Sprint(k)})]++
	}
	if counts[0] != 3 || counts[1] != 3 || counts[2] != 3 {
		t.Fatalf("min_group spread 9 keys as %v, want 3 each", counts)
	}
	// Without a key nothing is pinned.
	if minGroup.Pick(cands, &Request{}); minGroup.Keys() != 9 {
		t.Fatalf("a keyless request pinned a key: %d keys", minGroup.Keys())
	}
}

func TestManualEvictAndForget(t *testing.T) {
	_, cands := newFleet(t, worker.RoleRegular, "m", 2)
	var mu sync.Mutex
	now := time.Unix(1_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	m := newManualForTest(t, AssignRandom, clock)
	m.Pick(cands, &Request{RoutingKey: "old"})
	advance(50 * time.Minute)
	m.Pick(cands, &Request{RoutingKey: "fresh"})
	advance(20 * time.Minute) // "old" idle 70 min > 1h, "fresh" 20 min
	m.Evict()
	if m.Keys() != 1 {
		t.Fatalf("after eviction %d keys, want only the fresh one", m.Keys())
	}
	i := m.Pick(cands, &Request{RoutingKey: "fresh"})
	m.Forget(cands[i].Key())
	if m.Keys() != 0 {
		t.Fatalf("forgetting the key's only worker left %d keys", m.Keys())
	}
}
