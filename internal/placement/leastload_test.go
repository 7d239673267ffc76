package placement

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/worker"
)

// reportLoads makes each worker's engine report the given load through a
// real LoadMonitor round; a negative running count makes the fetch fail.
func reportLoads(t *testing.T, reg *worker.Registry, loads map[*worker.Worker]worker.EngineLoad) {
	t.Helper()
	m, err := worker.NewLoadMonitor(reg, worker.LoadFetcherFunc(func(_ context.Context, w *worker.Worker) (worker.EngineLoad, error) {
		l, ok := loads[w]
		if !ok || l.Running < 0 {
			return worker.EngineLoad{}, errors.New("no report")
		}
		return l, nil
	}), worker.LoadMonitorConfig{Interval: time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.Poll(context.Background())
}

func TestLeastLoadFollowsEngineReports(t *testing.T) {
	reg, cands := newFleet(t, worker.RolePrefill, "m", 3)
	p := mustNew(t, PolicyLeastLoad, DefaultConfig())
	reportLoads(t, reg, map[*worker.Worker]worker.EngineLoad{
		cands[0]: {Running: 2, Waiting: 6},
		cands[1]: {Running: 4, Waiting: 0, KVUsage: 0.9},
		cands[2]: {Running: 3, Waiting: 1, KVUsage: 0.2},
	})
	// 8, 4 (kv .9), 4 (kv .2): the tie goes to the emptier KV cache.
	if got := p.Pick(cands, &Request{}); got != 2 {
		t.Fatalf("Pick = %d, want 2", got)
	}
	// Requests sent since the report count: between polls, picks spread.
	var guards []*worker.LoadGuard
	var picks []int
	for range 6 {
		i := p.Pick(cands, &Request{})
		picks = append(picks, i)
		guards = append(guards, cands[i].AcquireLoad())
	}
	// Estimates 8, 4, 4: the two light workers take turns, ties to the emptier KV cache.
	want := []int{2, 1, 2, 1, 2, 1}
	for i := range want {
		if picks[i] != want[i] {
			t.Fatalf("picks %v, want %v", picks, want)
		}
	}
	for _, g := range guards {
		g.Release()
	}
	// A worker whose report failed counts its gateway load only.
	reportLoads(t, reg, map[*worker.Worker]worker.EngineLoad{cands[0]: {Running: -1}, cands[1]: {Running: 5}, cands[2]: {Running: 5}})
	g := cands[0].AcquireLoad()
	if got := p.Pick(cands, &Request{}); got != 0 {
		t.Errorf("Pick = %d, want 0 (no report, 1 in flight, vs 5 reported)", got)
	}
	g.Release()
	if got := p.Pick(nil, &Request{}); got != -1 {
		t.Errorf("Pick(empty) = %d", got)
	}
}

func TestSetUses(t *testing.T) {
	cfg := DefaultConfig()
	cfg.PrefillPolicy = PolicyLeastLoad
	set, err := NewSet(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !set.Uses(PolicyLeastLoad) || set.Uses(PolicyRandom) || !set.Uses(PolicyCacheAware) {
		t.Error("Uses does not reflect the configured policies")
	}
}

func TestCachedPrefixLen(t *testing.T) {
	p := newCacheAwareForTest(t, nil)
	_, cands := newFleet(t, worker.RolePrefill, "m", 2)
	sys := strings.Repeat("system prompt ", 20)
	req := &Request{Model: "m", Text: sys + "first question", TargetWorker: -1}
	i := p.Pick(cands, req)
	w, other := cands[i].URL(), cands[1-i].URL()
	if got := p.CachedPrefixLen("m", sys+"second question", w); got != len(sys) {
		t.Errorf("cached prefix on the chosen worker = %d, want %d", got, len(sys))
	}
	for _, tt := range []struct{ model, text, url string }{
		{"m", sys + "x", other}, {"other-model", sys, w}, {"m", "", w}, {"m", sys, "http://unknown:1"},
	} {
		if got := p.CachedPrefixLen(tt.model, tt.text, tt.url); got != 0 {
			t.Errorf("CachedPrefixLen(%q, %.10q..., %s) = %d, want 0", tt.model, tt.text, tt.url, got)
		}
	}
}
