package placement

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/worker"
)

// sessionPolicies builds cache_aware and kv_aware (on an index tracking every worker with no
// match, so kv_aware itself decides) with session affinity on or off.
func sessionPolicies(t *testing.T, on bool, now func() time.Time) map[string]Policy {
	t.Helper()
	cfg := DefaultConfig()
	cfg.SessionAffinity = on
	cfg.Now = now
	cfg.StickyIdle = time.Hour
	tracked := map[string]bool{}
	for i := range 3 {
		tracked[fmt.Sprintf("http://w%04d:8000", i)] = true
	}
	kv, err := NewKVAware(cfg, fakeIndex{tokens: map[string]int{}, tracked: tracked})
	if err != nil {
		t.Fatal(err)
	}
	return map[string]Policy{PolicyCacheAware: mustNew(t, PolicyCacheAware, cfg), PolicyKVAware: kv}
}

// A session's turns, each with text unlike the last, stay on the worker its first turn took; without
// affinity the same turns spread (the policies place new text on the emptiest/least loaded worker).
func TestSessionAffinitySticks(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{true, false} {
		for name, p := range sessionPolicies(t, on, time.Now) {
			t.Run(fmt.Sprintf("%s/affinity=%v", name, on), func(t *testing.T) {
				_, cands := newFleet(t, worker.RolePrefill, "m", 3)
				used := map[string]map[int]bool{"a": {}, "b": {}}
				for turn := range 6 {
					for _, s := range []string{"a", "b"} {
						req := &Request{Model: "m", Text: fmt.Sprintf("turn %d of %s: %040d", turn, s, turn), RoutingKey: s,
							TokenIDs: []uint32{uint32(turn)}, TargetWorker: -1}
						i := p.Pick(cands, req)
						used[s][i] = true
						// The in-flight request holds load, so kv_aware's least-loaded choice moves on.
						g := cands[i].AcquireLoad()
						t.Cleanup(g.Release)
					}
				}
				if !on {
					if len(used["a"]) == 1 && len(used["b"]) == 1 {
						t.Fatalf("without affinity the sessions stuck anyway (%v): the test cannot tell", used)
					}
					return
				}
				if len(used["a"]) != 1 || len(used["b"]) != 1 {
					t.Fatalf("workers used per session = %v, want one each", used)
				}
			})
		}
	}
}

// The pin yields when its worker leaves the candidates or is overloaded by the balance rule, and the
// session then stays on the worker it moved to.
func TestSessionAffinityFallsBack(t *testing.T) {
	t.Parallel()
	for name, p := range sessionPolicies(t, true, time.Now) {
		t.Run(name, func(t *testing.T) {
			_, cands := newFleet(t, worker.RolePrefill, "m", 3)
			req := &Request{Model: "m", Text: "first", RoutingKey: "s", TokenIDs: []uint32{1}, TargetWorker: -1}
			first := p.Pick(cands, req)
			// Not a candidate any more (unhealthy, at its limit): another worker, then that one sticks.
			rest := append(append([]*worker.Worker{}, cands[:first]...), cands[first+1:]...)
			req.Text = "second"
			moved := p.Pick(rest, req)
			if rest[moved] == cands[first] {
				t.Fatal("picked a worker that is not a candidate")
			}
			req.Text = "third"
			if again := p.Pick(cands, req); cands[again] != rest[moved] {
				t.Fatalf("after the move the session went to %s, want %s", cands[again].URL(), rest[moved].URL())
			}
			// Overloaded by the balance rule (64 above the least loaded and 1.5x it): fall back.
			setLoad(t, rest[moved], 65)
			req.Text = "fourth"
			if i := p.Pick(cands, req); cands[i] == rest[moved] {
				t.Fatal("the session stayed on an overloaded worker")
			}
		})
	}
}

// Idle keys are forgotten on Evict; the table stays bounded under a flood of keys.
func TestSessionTableBounded(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	cfg := DefaultConfig()
	cfg.SessionAffinity, cfg.Now, cfg.StickyIdle = true, clock, time.Minute
	s := newSessions(cfg)
	s.capacity = 64
	_, cands := newFleet(t, worker.RolePrefill, "m", 2)
	for i := range 1000 {
		s.remember(fmt.Sprint("k", i), cands[i%2])
		if s.len() > s.capacity {
			t.Fatalf("%d keys held, capacity %d", s.len(), s.capacity)
		}
	}
	s.remember("kept", cands[1])
	if s.lookup("kept", cands) != 1 {
		t.Fatal("a fresh key is not found")
	}
	now = now.Add(2 * time.Minute)
	s.evict()
	if n := s.len(); n != 0 {
		t.Fatalf("%d keys survive their idle time", n)
	}
	if s.lookup("kept", cands) != -1 || s.lookup("", cands) != -1 {
		t.Fatal("a forgotten or empty key is pinned")
	}
	var off *sessions
	off.remember("x", cands[0])
	if off.lookup("x", cands) != -1 || off.len() != 0 {
		t.Fatal("a nil table pins")
	}
}
