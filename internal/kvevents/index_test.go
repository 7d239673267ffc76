package kvevents_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/sluicegw/sluice/internal/kvevents"
)

func h(n uint64) kvevents.EngineHash { return kvevents.IntHash(n) }

func storedEv(hashes []uint64, parent *uint64, ids []uint32, bs int, medium string) kvevents.Event {
	ev := kvevents.Event{Kind: kvevents.BlockStored, TokenIDs: ids, BlockSize: bs, Medium: medium}
	for _, x := range hashes {
		ev.BlockHashes = append(ev.BlockHashes, h(x))
	}
	if parent != nil {
		ev.Parent, ev.HasParent = h(*parent), true
	}
	return ev
}

func removedEv(medium string, hashes ...uint64) kvevents.Event {
	ev := kvevents.Event{Kind: kvevents.BlockRemoved, Medium: medium}
	for _, x := range hashes {
		ev.BlockHashes = append(ev.BlockHashes, h(x))
	}
	return ev
}

func ptr(v uint64) *uint64 { return &v }

func newIndex(t testing.TB, cfg kvevents.IndexConfig) *kvevents.Index {
	t.Helper()
	idx, err := kvevents.NewIndex(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

func TestIndexEvents(t *testing.T) {
	t.Parallel()
	idx := newIndex(t, kvevents.IndexConfig{MaxBlocksPerWorker: 5})
	apply := func(evs ...kvevents.Event) kvevents.ApplyStats {
		return idx.Apply("w", 0, &kvevents.Batch{Events: evs})
	}
	// Chain 1..8 on GPU, 9..12 a child on CPU (offloaded), a LoRA block, a wrong block size, an orphan.
	st := apply(
		storedEv([]uint64{1, 2}, nil, seqTokens(1, 8), 4, "GPU"),
		storedEv([]uint64{3}, ptr(2), seqTokens(9, 12), 4, "CPU"),
		kvevents.Event{Kind: kvevents.BlockStored, BlockHashes: []kvevents.EngineHash{h(50)}, TokenIDs: seqTokens(1, 4), BlockSize: 4, LoRA: true},
		storedEv([]uint64{51}, nil, seqTokens(1, 2), 2, "GPU"),
		storedEv([]uint64{52}, ptr(999), seqTokens(1, 4), 4, "GPU"),
	)
	if st.Stored != 5 || st.Dropped["lora"] != 1 || st.Dropped["block_size"] != 1 || st.Dropped["orphan"] != 1 {
		t.Errorf("stats %+v", st)
	}
	m := idx.Match("w", 0, seqTokens(1, 14))
	if m.Blocks != 3 || m.Tokens != 12 || m.PerTier != [3]int{2, 1, 0} || m.Score != 2.5 {
		t.Errorf("match %+v, want 2 GPU + 1 CPU blocks, score 2.5", m)
	}
	// The same block in both tiers counts once, at the faster tier; removing the GPU copy leaves CPU.
	apply(storedEv([]uint64{1}, nil, seqTokens(1, 4), 4, "CPU"))
	if st := idx.Stats("w", 0); st.Blocks != 3 || st.PerTier != [3]int{2, 2, 0} {
		t.Errorf("stats %+v, want 3 blocks, 2 GPU copies and 2 CPU", st)
	}
	apply(removedEv("GPU", 1))
	if m := idx.Match("w", 0, seqTokens(1, 12)); m.Blocks != 3 || m.PerTier != [3]int{1, 2, 0} {
		t.Errorf("after removing block 1's GPU copy: %+v", m)
	}
	apply(removedEv("CPU", 1), removedEv("GPU", 12345))
	if b, tok := idx.MatchedPrefix("w", 0, seqTokens(1, 12)); b != 0 || tok != 0 {
		t.Errorf("after removing block 1 everywhere: %d blocks %d tokens, want 0 (the chain starts there)", b, tok)
	}
	if b, _ := idx.MatchedPrefix("w", 0, seqTokens(5, 8)); b != 0 {
		t.Error("block 2's tokens matched at the root")
	}
	// The bound: 2 blocks held, room for 3 more; a 4-block store keeps 3 and drops 1.
	st = apply(storedEv([]uint64{60, 61, 62, 63}, nil, seqTokens(100, 115), 4, ""))
	if st.Dropped["full"] != 1 || idx.Stats("w", 0).Blocks != 5 {
		t.Errorf("bounded store: %+v, %d blocks", st, idx.Stats("w", 0).Blocks)
	}
	// Re-storing what is held is idempotent (at-least-once delivery).
	apply(storedEv([]uint64{60}, nil, seqTokens(100, 103), 4, ""))
	if idx.Stats("w", 0).Blocks != 5 {
		t.Error("a re-stored block was counted twice")
	}
	apply(kvevents.Event{Kind: kvevents.AllBlocksCleared})
	if st := idx.Stats("w", 0); st.Blocks != 0 || st.PerTier != [3]int{} {
		t.Errorf("after AllBlocksCleared: %+v", st)
	}
	apply(storedEv([]uint64{1}, nil, seqTokens(1, 4), 4, ""))
	idx.Apply("w", 1, &kvevents.Batch{Events: []kvevents.Event{storedEv([]uint64{1}, nil, seqTokens(1, 4), 4, "")}})
	idx.Clear("w", 0)
	if b, _ := idx.MatchedPrefix("w", 0, seqTokens(1, 4)); b != 0 {
		t.Error("Clear left rank 0's blocks")
	}
	if b, _ := idx.MatchedPrefix("w", 1, seqTokens(1, 4)); b != 1 {
		t.Error("Clear of rank 0 touched rank 1")
	}
	idx.RemoveWorker("w")
	if b, _ := idx.MatchedPrefix("w", 1, seqTokens(1, 4)); b != 0 {
		t.Error("RemoveWorker left blocks")
	}
}

func TestNewIndexConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []kvevents.IndexConfig{
		{MaxBlocksPerWorker: -1},
		{TierWeights: [3]float64{1, 2, 0}},
		{TierWeights: [3]float64{1, -0.1, 0}},
	} {
		if _, err := kvevents.NewIndex(cfg); err == nil {
			t.Errorf("NewIndex(%+v) accepted", cfg)
		}
	}
	for _, ep := range []kvevents.Endpoint{
		{Publisher: "tcp://127.0.0.1:5557"},
		{Worker: "w"},
		{Worker: "w", Publisher: "tcp://*:5557"},
		{Worker: "w", Publisher: "http://h:1"},
		{Worker: "w", Publisher: "tcp://h:1", Replay: "udp://h:2"},
		{Worker: "w", Publisher: "tcp://h:1", Rank: -1},
	} {
		if _, err := kvevents.NewSubscriber(kvevents.SubscriberConfig{Endpoint: ep, Index: newIndex(t, kvevents.IndexConfig{})}); err == nil {
			t.Errorf("NewSubscriber(%+v) accepted", ep)
		}
	}
}

// TestIndexConcurrent races readers against a writer (run with -race): every read sees a whole batch.
func TestIndexConcurrent(t *testing.T) {
	t.Parallel()
	idx := newIndex(t, kvevents.IndexConfig{})
	prompt := seqTokens(1, 64)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if b, _ := idx.MatchedPrefix("w", 0, prompt); b != 0 && b != 16 {
					t.Errorf("saw %d blocks: half a batch", b)
					return
				}
			}
		})
	}
	hashes := make([]uint64, 16)
	for i := range hashes {
		hashes[i] = uint64(i + 1)
	}
	for range 200 {
		idx.Apply("w", 0, &kvevents.Batch{Events: []kvevents.Event{storedEv(hashes, nil, prompt, 4, "")}})
		idx.Apply("w", 0, &kvevents.Batch{Events: []kvevents.Event{{Kind: kvevents.AllBlocksCleared}}})
	}
	close(stop)
	wg.Wait()
}

// BenchmarkMatchedPrefix measures a routing lookup of a 2k-token prompt fully cached on the worker,
// with a writer applying batches to the same worker meanwhile.
func BenchmarkMatchedPrefix(b *testing.B) {
	idx := newIndex(b, kvevents.IndexConfig{})
	prompt := seqTokens(1, 2048)
	hashes := make([]uint64, 2048/16)
	for i := range hashes {
		hashes[i] = uint64(i + 1)
	}
	idx.Apply("w", 0, &kvevents.Batch{Events: []kvevents.Event{storedEv(hashes, nil, prompt, 16, "")}})
	for _, writer := range []bool{false, true} {
		b.Run(fmt.Sprintf("writer=%v", writer), func(b *testing.B) {
			stop := make(chan struct{})
			var wg sync.WaitGroup
			if writer {
				wg.Go(func() {
					other := storedEv([]uint64{1 << 40}, nil, seqTokens(9000, 9015), 16, "")
					for {
						select {
						case <-stop:
							return
						default:
						}
						idx.Apply("w", 0, &kvevents.Batch{Events: []kvevents.Event{other}})
						idx.Apply("w", 0, &kvevents.Batch{Events: []kvevents.Event{removedEv("", 1<<40)}})
					}
				})
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if n, _ := idx.MatchedPrefix("w", 0, prompt); n != 128 {
						b.Errorf("matched %d blocks", n)
						return
					}
				}
			})
			close(stop)
			wg.Wait()
		})
	}
}
