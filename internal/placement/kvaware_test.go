package placement

import (
	"testing"

	"github.com/sluicegw/sluice/internal/kvevents"
	"github.com/sluicegw/sluice/internal/worker"
)

var _ PrefixIndex = (*kvevents.Index)(nil)

// fakeIndex is a PrefixIndex with fixed matches, by engine URL.
type fakeIndex struct {
	tokens  map[string]int
	tracked map[string]bool
}

func (f fakeIndex) MatchedPrefix(url string, _ int, _ []uint32) (int, int) {
	return f.tokens[url] / 16, f.tokens[url]
}
func (f fakeIndex) Tracks(url string) bool { return f.tracked[url] }

func TestKVAware(t *testing.T) {
	t.Parallel()
	ids := make([]uint32, 100)
	tests := []struct {
		name   string
		index  PrefixIndex
		ids    []uint32
		load   []int
		want   int
		wantCA bool // decided by the cache_aware fallback
	}{
		{name: "longest match wins", index: fakeIndex{map[string]int{"http://w0001:8000": 64, "http://w0002:8000": 96}, map[string]bool{"http://w0000:8000": true}}, ids: ids, want: 2},
		{name: "tie goes to the less loaded", index: fakeIndex{map[string]int{"http://w0001:8000": 64, "http://w0002:8000": 64}, map[string]bool{"http://w0001:8000": true}}, ids: ids, load: []int{0, 5, 1}, want: 2},
		{name: "below the threshold: least loaded", index: fakeIndex{map[string]int{"http://w0001:8000": 30}, map[string]bool{"http://w0001:8000": true}}, ids: ids, load: []int{3, 2, 1}, want: 2},
		{name: "imbalanced: least loaded despite a match", index: fakeIndex{map[string]int{"http://w0001:8000": 100}, map[string]bool{"http://w0001:8000": true}}, ids: ids, load: []int{0, 200, 10}, want: 0},
		{name: "no tokens: cache_aware", index: fakeIndex{map[string]int{"http://w0001:8000": 100}, map[string]bool{"http://w0001:8000": true}}, wantCA: true},
		{name: "no worker tracked: cache_aware", index: fakeIndex{map[string]int{"http://w0001:8000": 100}, nil}, ids: ids, wantCA: true},
		{name: "no index: cache_aware", ids: ids, wantCA: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, cands := newFleet(t, worker.RolePrefill, "m", 3)
			for i, n := range tc.load {
				setLoad(t, cands[i], n)
			}
			p, err := NewKVAware(DefaultConfig(), tc.index)
			if err != nil {
				t.Fatal(err)
			}
			req := &Request{Model: "m", Text: "hello world", TokenIDs: tc.ids, TargetWorker: -1}
			got := p.Pick(cands, req)
			if tc.wantCA {
				// The fallback's tree learnt the pick: the same text now goes to the same worker.
				if again := p.Pick(cands, req); again != got || p.fallback.CachedPrefixLen("m", req.Text, cands[got].URL()) != len(req.Text) {
					t.Errorf("fallback did not decide: picks %d then %d", got, again)
				}
				return
			}
			if got != tc.want {
				t.Errorf("Pick = %d, want %d", got, tc.want)
			}
			if p.fallback.CachedPrefixLen("m", req.Text, cands[got].URL()) != 0 {
				t.Error("a kv_aware decision was written into the fallback's tree")
			}
		})
	}
	p, _ := NewKVAware(DefaultConfig(), nil)
	if p.Pick(nil, &Request{}) != -1 || p.Name() != PolicyKVAware {
		t.Error("empty candidates or name")
	}
}

// TestKVAwareWithIndex routes by a real kvevents.Index fed one engine rank's events.
func TestKVAwareWithIndex(t *testing.T) {
	t.Parallel()
	_, cands := newFleet(t, worker.RolePrefill, "m", 2)
	idx, err := kvevents.NewIndex(kvevents.IndexConfig{})
	if err != nil {
		t.Fatal(err)
	}
	prompt := make([]uint32, 64)
	for i := range prompt {
		prompt[i] = uint32(i + 7)
	}
	idx.Apply(cands[1].URL(), 0, &kvevents.Batch{Events: []kvevents.Event{{
		Kind: kvevents.BlockStored, BlockSize: 16, TokenIDs: prompt[:48],
		BlockHashes: []kvevents.EngineHash{kvevents.IntHash(1), kvevents.IntHash(2), kvevents.IntHash(3)},
	}}})
	p, err := NewKVAware(DefaultConfig(), idx)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Pick(cands, &Request{Model: "m", TokenIDs: prompt, TargetWorker: -1}); got != 1 {
		t.Errorf("Pick = %d, want 1 (holds 48 of 64 tokens)", got)
	}
}

// TestKVAwareByName: New builds kv_aware over Config.KVIndex, and CachedTokens reports the best rank
// of an engine (what admission charges by).
func TestKVAwareByName(t *testing.T) {
	t.Parallel()
	reg := worker.NewRegistry(worker.RegistryOptions{StartReady: true})
	w, err := reg.Add(worker.Spec{URL: "http://dp:8000", Role: worker.RolePrefill, Models: []string{"m"}, DPSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	idx, err := kvevents.NewIndex(kvevents.IndexConfig{})
	if err != nil {
		t.Fatal(err)
	}
	prompt := make([]uint32, 40)
	for i := range prompt {
		prompt[i] = uint32(i + 3)
	}
	idx.Apply(w.URL(), 1, &kvevents.Batch{Events: []kvevents.Event{{
		Kind: kvevents.BlockStored, BlockSize: 16, TokenIDs: prompt[:32],
		BlockHashes: []kvevents.EngineHash{kvevents.IntHash(1), kvevents.IntHash(2)},
	}}})
	cfg := DefaultConfig()
	cfg.KVIndex = idx
	p, err := New(PolicyKVAware, cfg)
	if err != nil {
		t.Fatal(err)
	}
	kv, ok := p.(*KVAware)
	if !ok || p.Name() != PolicyKVAware {
		t.Fatalf("New(kv_aware) = %T %q", p, p.Name())
	}
	if got := kv.CachedTokens(w, prompt); got != 32 {
		t.Errorf("CachedTokens = %d, want 32 (rank 1 holds two blocks of 16)", got)
	}
	if got := kv.CachedTokens(w, prompt[:8]); got != 0 {
		t.Errorf("CachedTokens of a prompt shorter than a block = %d, want 0", got)
	}
	if got := kv.CachedTokens(nil, prompt); got != 0 {
		t.Errorf("CachedTokens of no worker = %d, want 0", got)
	}
	cands := reg.Snapshot().RankCandidates(worker.RolePrefill, "m")
	if got := p.Pick(cands, &Request{Model: "m", TokenIDs: prompt, TargetWorker: -1}); got < 0 || cands[got].Rank() != 1 {
		t.Errorf("Pick = %d, want rank 1's view", got)
	}
}
