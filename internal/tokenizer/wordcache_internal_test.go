package tokenizer

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
)

// TestWordCacheKeepsEveryWord puts words through several snapshots (each a quarter larger) and reads
// them back, from hot and from fresh, alongside words it never put, words too long to cache and words
// past the cap; concurrent readers run under -race.
func TestWordCacheKeepsEveryWord(t *testing.T) {
	c := wordCache{max: 3000, maxBytes: 12}
	idsOf := func(i int) []int { return []int{i, i * 7, i % 3}[:1+i%3] } // one to three ids
	word := func(i int) string { return fmt.Sprintf("w%d", i) }
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				for i := range 3500 {
					if ids, ok := c.get(word(i)); ok && !slices.Equal(ids, idsOf(i)) {
						t.Errorf("concurrent get(%q) = %v, want %v", word(i), ids, idsOf(i))
						return
					}
				}
			}
		})
	}
	for i := range 3500 {
		c.put(word(i), idsOf(i))
		c.put(word(i), []int{-1}) // a second put of a word keeps the first
	}
	c.put("a-word-longer-than-twelve", []int{1})
	close(stop)
	wg.Wait()
	if c.hot.Load() == nil || c.hot.Load().words < 1000 {
		t.Fatalf("no snapshot of 1000 words or more after 3000 puts: %+v", c.hot.Load())
	}
	for i := range 3500 {
		ids, ok := c.get(word(i))
		if want := i < 3000; ok != want {
			t.Fatalf("get(%q) found %v, want %v (the cap is 3000 words)", word(i), ok, want)
		}
		if ok && !slices.Equal(ids, idsOf(i)) {
			t.Fatalf("get(%q) = %v, want %v", word(i), ids, idsOf(i))
		}
	}
	for _, w := range []string{"", "w", "w-1", "a-word-longer-than-twelve", "w30000"} {
		if ids, ok := c.get(w); ok {
			t.Errorf("get(%q) = %v, a word never cached", w, ids)
		}
	}
}

// TestWordCachePromotesOnReads: words left in fresh (too few to fill a quarter of the snapshot) move to
// a snapshot once lookups have found them there often enough, so a warm cache reads without the lock.
func TestWordCachePromotesOnReads(t *testing.T) {
	c := wordCache{max: 1 << 16, maxBytes: 64}
	for i := range 1000 {
		c.put(fmt.Sprint(i), []int{i})
	}
	c.put("late", []int{7})
	if c.waiting.Load() == 0 {
		t.Fatal("the last word went straight to a snapshot: the test does not exercise promotion on reads")
	}
	for range 1000 {
		if ids, ok := c.get("late"); !ok || !slices.Equal(ids, []int{7}) {
			t.Fatalf("get(late) = %v, %v", ids, ok)
		}
		if c.waiting.Load() == 0 {
			break
		}
	}
	if c.waiting.Load() != 0 {
		t.Fatal("fresh words still wait after 1000 lookups found them")
	}
	if ids, ok := c.hot.Load().get("late"); !ok || !slices.Equal(ids, []int{7}) {
		t.Fatalf("the snapshot has late = %v, %v", ids, ok)
	}
}

// BenchmarkWordCacheGet looks up the words of a chat's worth of English in a warm cache: the Go map the
// snapshot used to be (the baseline, same run) against wordTable.
func BenchmarkWordCacheGet(b *testing.B) {
	var words []string
	for i := range 1500 {
		words = append(words, fmt.Sprintf(" w%dx", i%900)) // 900 distinct, as a chat repeats words
	}
	m := map[string][]int{}
	for i, w := range words {
		m[w] = []int{i}
	}
	c := wordCache{max: 1 << 16, maxBytes: 64}
	for w, ids := range m {
		c.put(w, ids)
	}
	c.mu.Lock()
	c.freshHits = 1 << 30
	c.maybePromote() // everything in the snapshot, as in a warm gateway
	c.mu.Unlock()
	b.Run("map", func(b *testing.B) {
		n := 0
		for b.Loop() {
			for _, w := range words {
				ids := m[w]
				n += len(ids)
			}
		}
		if n != b.N*len(words) {
			b.Fatal("a word is missing")
		}
	})
	b.Run("wordTable", func(b *testing.B) {
		hot := c.hot.Load()
		n := 0
		var buf []int
		for b.Loop() {
			for _, w := range words {
				buf, _ = hot.appendGet(buf[:0], w)
				n += len(buf)
			}
		}
		if n != b.N*len(words) {
			b.Fatal("a word is missing")
		}
	})
}

// TestWordTableLongWords: words of every length up to the cache's bound, with from one to nine ids (so
// inline, and out of their slot for their bytes, their ids or both), survive the copies into larger
// snapshots; a word is never confused with another of the same prefix or length.
func TestWordTableLongWords(t *testing.T) {
	c := wordCache{max: 1 << 16, maxBytes: 64}
	word := func(i int) string {
		if i%3 == 0 {
			return fmt.Sprintf("w%d", i) // inline
		}
		return fmt.Sprintf("%s-%d", strings.Repeat("long word ", 1+i%5), i) // in text
	}
	idsOf := func(i int) []int {
		ids := make([]int, 1+i%9)
		for k := range ids {
			ids[k] = i*10 + k
		}
		return ids
	}
	const n = 2000
	for half := range 2 { // two snapshots: the second copies the first's words
		for i := half * n / 2; i < (half+1)*n/2; i++ {
			c.put(word(i), idsOf(i))
		}
		c.mu.Lock()
		c.freshHits = 1 << 30
		c.maybePromote()
		c.mu.Unlock()
	}
	hot := c.hot.Load()
	if hot == nil || hot.words != n {
		t.Fatalf("snapshot holds %v words, want %d", hot, n)
	}
	for i := range n {
		if ids, ok := hot.get(word(i)); !ok || !slices.Equal(ids, idsOf(i)) {
			t.Fatalf("%q: %v, %v; want %v", word(i), ids, ok, idsOf(i))
		}
	}
	for _, w := range []string{"w", "w1x", strings.Repeat("long word ", 2) + "-9999", strings.Repeat("x", 17), ""} {
		if ids, ok := hot.get(w); ok {
			t.Errorf("%q found (%v), never put", w, ids)
		}
	}
}

// get is appendGet into a fresh slice, for the tests.
func (c *wordCache) get(word string) ([]int, bool) { return c.appendGet(nil, word) }

// get is appendGet into a fresh slice, for the tests.
func (t *wordTable) get(word string) ([]int, bool) { return t.appendGet(nil, word) }
