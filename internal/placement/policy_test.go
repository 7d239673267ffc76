package placement

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicegw/sluice/internal/worker"
)

func TestConfig(t *testing.T) {
	tests := []struct {
		name    string
		mod     func(*Config)
		wantErr string
	}{
		{name: "default", mod: func(*Config) {}},
		{name: "zero values default", mod: func(c *Config) { *c = Config{} }},
		{name: "unknown policy", mod: func(c *Config) { c.Policy = "fastest" }, wantErr: `policy "fastest" is not a policy; valid: random, round_robin`},
		{name: "unknown prefill policy", mod: func(c *Config) { c.PrefillPolicy = "x" }, wantErr: `"x"`},
		{name: "threshold above 1", mod: func(c *Config) { c.CacheThreshold = 1.5 }, wantErr: "cache threshold"},
		{name: "negative abs", mod: func(c *Config) { c.BalanceAbsThreshold = -1 }, wantErr: "abs threshold"},
		{name: "negative rel", mod: func(c *Config) { c.BalanceRelThreshold = -1 }, wantErr: "rel threshold"},
		{name: "negative tree", mod: func(c *Config) { c.MaxTreeSize = -1 }, wantErr: "max tree size"},
		{name: "negative interval", mod: func(c *Config) { c.EvictionInterval = -time.Second }, wantErr: "eviction interval"},
		{name: "negative vnodes", mod: func(c *Config) { c.VirtualNodes = -1 }, wantErr: "virtual nodes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mod(&c)
			err := c.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate() = %v, want containing %q", err, tt.wantErr)
			}
		})
	}

	c := DefaultConfig()
	c.VirtualNodes = 1 << 20
	n, err := c.normalized()
	if err != nil || n.VirtualNodes != maxVirtualNodes {
		t.Fatalf("VirtualNodes not clamped: %d, %v", n.VirtualNodes, err)
	}
	if _, err := New("nope", DefaultConfig()); err == nil || !strings.Contains(err.Error(), "consistent_hashing") {
		t.Fatalf("New(unknown) = %v, want an error listing valid names", err)
	}
	for _, name := range PolicyNames() {
		p := mustNew(t, name, DefaultConfig())
		if p.Name() != name {
			t.Errorf("New(%q).Name() = %q", name, p.Name())
		}
		if got := p.Pick(nil, &Request{TargetWorker: -1}); got != -1 {
			t.Errorf("%s.Pick(empty) = %d, want -1", name, got)
		}
	}
}

func TestRoundRobinEven(t *testing.T) {
	_, cands := newFleet(t, worker.RoleRegular, "m", 5)
	p := mustNew(t, PolicyRoundRobin, DefaultConfig())
	counts := make([]int, len(cands))
	for range 500 {
		counts[p.Pick(cands, &Request{})]++
	}
	for i, c := range counts {
		if c != 100 {
			t.Fatalf("worker %d picked %d times, want 100 (counts %v)", i, c, counts)
		}
	}
}

func TestRandomCoversAll(t *testing.T) {
	_, cands := newFleet(t, worker.RoleRegular, "m", 4)
	cfg := DefaultConfig()
	cfg.Rand = seededRand(7)
	p := mustNew(t, PolicyRandom, cfg)
	counts := make([]int, len(cands))
	for range 4000 {
		counts[p.Pick(cands, &Request{})]++
	}
	for i, c := range counts {
		if c < 800 || c > 1200 {
			t.Fatalf("worker %d picked %d/4000 times, want about 1000 (counts %v)", i, c, counts)
		}
	}
}

func TestPowerOfTwoPrefersLessLoaded(t *testing.T) {
	_, cands := newFleet(t, worker.RoleRegular, "m", 4)
	for i, w := range cands {
		setLoad(t, w, 10*i)
	}
	cfg := DefaultConfig()
	cfg.Rand = seededRand(42)
	p := mustNew(t, PolicyPowerOfTwo, cfg)
	const picks = 12000
	counts := make([]int, len(cands))
	for range picks {
		counts[p.Pick(cands, &Request{})]++
	}
	// With distinct loads, worker i wins the pairs with all heavier ones:
	// expected shares 3/6, 2/6, 1/6, 0.
	if counts[3] != 0 {
		t.Fatalf("most loaded worker picked %d times (counts %v)", counts[3], counts)
	}
	want := []float64{0.5, 1.0 / 3, 1.0 / 6}
	for i, w := range want {
		got := float64(counts[i]) / picks
		if got < w-0.03 || got > w+0.03 {
			t.Fatalf("worker %d share %.3f, want %.3f±0.03 (counts %v)", i, got, w, counts)
		}
	}
	if got := p.Pick(cands[:1], &Request{}); got != 0 {
		t.Fatalf("Pick(one) = %d", got)
	}
}

func TestRunStopsOnCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.MaxTreeSize = 60
		cfg.EvictionInterval = time.Minute
		set, err := NewSet(cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, cands := newFleet(t, worker.RolePrefill, "m", 1)
		ca := set.Prefill.(*CacheAware)
		// A 100-byte prompt inserted behind the picks' back (a pick trims at once): only the tick
		// trims it.
		ca.trees.tree("m").t.insert(strings.Repeat("x", 100), ca.ci.lookup(cands).ids[0])
		if got := ca.TreeSize("m", cands[0].URL()); got != 100 {
			t.Fatalf("tree size = %d, want 100", got)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { set.Run(ctx); close(done) }()
		time.Sleep(time.Minute)
		synctest.Wait()
		if got := ca.TreeSize("m", cands[0].URL()); got > 60 {
			t.Fatalf("tree size after eviction tick = %d, want <= 60", got)
		}
		cancel()
		<-done
	})
}
