package placement

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/worker"
)

func randomText(r *rand.Rand, n int) string {
	const letters = "abcdefghijklmnopqrstuvwxyz     "
	b := make([]byte, n)
	for i := range b {
		b[i] = letters[r.IntN(len(letters))]
	}
	return string(b)
}

// BenchmarkPick measures each policy's Pick over 10, 100 and 1,000
// candidates with 256-byte prompts drawn from a pool of 1,024.
func BenchmarkPick(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	prompts := make([]string, 1024)
	for i := range prompts {
		prompts[i] = randomText(r, 256)
	}
	for _, name := range PolicyNames() {
		for _, n := range []int{10, 100, 1000} {
			b.Run(fmt.Sprintf("%s/workers=%d", name, n), func(b *testing.B) {
				_, cands := newFleet(b, worker.RolePrefill, "m", n)
				for i, w := range cands {
					setLoad(b, w, i%7)
				}
				p := mustNew(b, name, DefaultConfig())
				reqs := make([]Request, len(prompts))
				for i := range reqs {
					reqs[i] = Request{Model: "m", Text: prompts[i], TargetWorker: -1}
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					p.Pick(cands, &reqs[i&1023])
					i++
				}
			})
		}
	}
}

// cachedPrompts builds n 4 KiB prompts: 100 shared 1 KiB system prompts
// followed by a unique 3 KiB conversation.
func cachedPrompts(n int) []string {
	r := rand.New(rand.NewPCG(2, 2))
	systems := make([]string, 100)
	for i := range systems {
		systems[i] = randomText(r, 1024)
	}
	out := make([]string, n)
	for i := range out {
		out[i] = systems[i%len(systems)] + randomText(r, 3072)
	}
	return out
}

// BenchmarkCacheAwareMatchInsert: match+insert of a 4 KiB prompt against a
// tree holding 10,000 cached 4 KiB prompts over 16 workers.
func BenchmarkCacheAwareMatchInsert(b *testing.B) {
	_, cands := newFleet(b, worker.RolePrefill, "m", 16)
	p := mustNew(b, PolicyCacheAware, DefaultConfig()).(*CacheAware)
	prompts := cachedPrompts(10000)
	reqs := make([]Request, len(prompts))
	for i := range prompts {
		reqs[i] = Request{Model: "m", Text: prompts[i], TargetWorker: -1}
		p.Pick(cands, &reqs[i])
	}
	b.Run("hit", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			p.Pick(cands, &reqs[i%len(reqs)])
			i++
		}
	})
	// A known system prompt followed by a new 3 KiB conversation: a partial
	// match and a 3 KiB insert. The tree grows; eviction runs off the clock.
	b.Run("new_conversation", func(b *testing.B) {
		r := rand.New(rand.NewPCG(3, 3))
		fresh := make([]Request, 1024)
		for i := range fresh {
			fresh[i] = Request{Model: "m", Text: prompts[i%100][:1024] + randomText(r, 3072), TargetWorker: -1}
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if i > 0 && i%len(fresh) == 0 {
				b.StopTimer()
				for j := range fresh {
					fresh[j].Text = prompts[j%100][:1024] + randomText(r, 3072)
				}
				b.StartTimer()
			}
			p.Pick(cands, &fresh[i%len(fresh)])
			i++
		}
	})
}

// BenchmarkSelectPrefill: filtering 100 workers plus a round_robin pick,
// with nothing filtered and with every fourth worker at capacity.
func BenchmarkSelectPrefill(b *testing.B) {
	reg, cands := newFleet(b, worker.RolePrefill, "m", 100)
	snap := reg.Snapshot()
	full := map[*worker.Worker]bool{}
	for i, w := range cands {
		if i%4 == 0 {
			full[w] = true
		}
	}
	now := time.Now()
	for _, pname := range []string{PolicyRoundRobin, PolicyPowerOfTwo, PolicyCacheAware} {
		pol := mustNew(b, pname, DefaultConfig())
		req := &Request{Model: "m", Text: strings.Repeat("hello world ", 20), TargetWorker: -1}
		b.Run(pname+"/all_free", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := SelectPrefill(snap, req, pol, func(*worker.Worker) bool { return true }, now); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(pname+"/quarter_full", func(b *testing.B) {
			hasCap := func(w *worker.Worker) bool { return !full[w] }
			b.ReportAllocs()
			for b.Loop() {
				if _, err := SelectPrefill(snap, req, pol, hasCap, now); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// threeLetterWords makes prompts of 256 bytes of random three-letter words, as the overhead scenario's
// load generator sends: prompts that share no more than their first letters.
func threeLetterWords(r *rand.Rand) func() string {
	return func() string {
		var sb strings.Builder
		for sb.Len() < 256 {
			for range 3 {
				sb.WriteByte(byte('a' + r.IntN(26)))
			}
			sb.WriteByte(' ')
		}
		return sb.String()
	}
}

// BenchmarkCacheAwareUnique: one worker, every prompt new (256 bytes of three-letter words, as the
// overhead scenario's load generator sends), against a tree already holding 100,000 of them: with one
// candidate there is nothing to match, so a pick is the insert, the cache_aware cost of a gateway with
// one worker per role.
func BenchmarkCacheAwareUnique(b *testing.B) {
	_, cands := newFleet(b, worker.RolePrefill, "m", 1)
	p := mustNew(b, PolicyCacheAware, DefaultConfig()).(*CacheAware)
	words := threeLetterWords(rand.New(rand.NewPCG(4, 4)))
	for range 100000 {
		p.Pick(cands, &Request{Model: "m", Text: words(), TargetWorker: -1})
	}
	reqs := make([]Request, 4096)
	for i := range reqs {
		reqs[i] = Request{Model: "m", Text: words(), TargetWorker: -1}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		p.Pick(cands, &reqs[i%len(reqs)])
		i++
	}
}

// BenchmarkCacheAwareColdTree: two workers, a tree in its steady state (a 16 MiB budget each, far
// past the CPU's caches, held there by the picks' trims; 300,000 prompts of 256 bytes of
// three-letter words, as the overhead scenario sends, put it there), and a new prompt every pick, as a
// gateway whose traffic shares no prefixes sees: the match walks nodes no recent pick touched, so its
// time is cache misses, and the garbage collector marks the tree. New prompts are made in batches off
// the clock.
func BenchmarkCacheAwareColdTree(b *testing.B) {
	_, cands := newFleet(b, worker.RolePrefill, "m", 2)
	cfg := DefaultConfig()
	cfg.MaxTreeSize = 16 << 20
	p := mustNew(b, PolicyCacheAware, cfg).(*CacheAware)
	words := threeLetterWords(rand.New(rand.NewPCG(5, 5)))
	for range 300000 {
		p.Pick(cands, &Request{Model: "m", Text: words(), TargetWorker: -1})
	}
	pickFresh(b, words, func(r *Request) { p.Pick(cands, r) })
}

// pickFresh runs pick on a new prompt from words each iteration; prompts are made in batches off the
// clock.
func pickFresh(b *testing.B, words func() string, pick func(*Request)) {
	fresh := make([]Request, 4096)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i%len(fresh) == 0 {
			b.StopTimer()
			for j := range fresh {
				fresh[j] = Request{Model: "m", Text: words(), TargetWorker: -1}
			}
			b.StartTimer()
		}
		pick(&fresh[i%len(fresh)])
		i++
	}
}

// BenchmarkCacheAwarePD: a PD request's two picks, prefill then decode, with a new prompt each time
// against trees in their steady state (16 MiB a worker), the prefill and decode policies keeping
// their prompts in one tree (NewSet) or in a tree each (as before). With one, the decode pick walks
// the path the prefill pick has just brought into the CPU's cache.
func BenchmarkCacheAwarePD(b *testing.B) {
	for _, n := range []int{1, 2} {
		for _, shared := range []bool{false, true} {
			b.Run(fmt.Sprintf("workers=%d+%d/shared=%v", n, n, shared), func(b *testing.B) {
				cfg := DefaultConfig()
				cfg.MaxTreeSize = 16 << 20
				set, err := NewSet(cfg)
				if err != nil {
					b.Fatal(err)
				}
				pre, dec := set.Prefill, set.Decode
				if !shared {
					dec = mustNew(b, PolicyCacheAware, cfg)
				}
				pc, dc := newPDFleet(b, n, n)
				words := threeLetterWords(rand.New(rand.NewPCG(5, 5)))
				for range 300000 {
					r := &Request{Model: "m", Text: words(), TargetWorker: -1}
					pre.Pick(pc, r)
					dec.Pick(dc, r)
				}
				pickFresh(b, words, func(r *Request) {
					pre.Pick(pc, r)
					dec.Pick(dc, r)
				})
			})
		}
	}
}
