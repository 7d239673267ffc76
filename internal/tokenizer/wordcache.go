package tokenizer

import (
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
)

// wordCache maps words to their ids. Hits, nearly every word of a running gateway, read an immutable
// snapshot through one atomic load, so cores never contend on a lock or a shared counter; new words wait
// in a locked map and are copied into a new snapshot once they are a quarter of it, or once lookups have
// found them there as many times (so a warm cache stops taking the lock even when few words are new).
// The snapshots grow geometrically, so all the copying costs a few times the cache's size. Hugging Face
// bounds its cache the same way: once full it stops inserting, so memory is bounded and nothing is
// evicted.
type wordCache struct {
	hot       atomic.Pointer[wordTable]
	waiting   atomic.Int32 // len(fresh): a miss takes the lock only when words wait there
	mu        sync.Mutex
	fresh     map[string][]int
	freshHits int // lookups fresh answered since the last snapshot
	n         int // words in hot and fresh
	max       int // words
	maxBytes  int // longer words are not cached
	seed      maphash.Seed
}

// appendGet appends word's ids to dst; false (dst unchanged) when word is not cached.
func (c *wordCache) appendGet(dst []int, word string) ([]int, bool) {
	if hot := c.hot.Load(); hot != nil {
		if out, ok := hot.appendGet(dst, word); ok {
			return out, true
		}
	}
	if c.waiting.Load() == 0 {
		return dst, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ids, ok := c.fresh[word]
	if !ok {
		return dst, false
	}
	c.freshHits++
	c.maybePromote()
	return append(dst, ids...), true
}

func (c *wordCache) put(word string, ids []int) {
	if len(word) > c.maxBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n >= c.max {
		return
	}
	if _, ok := c.fresh[word]; ok {
		return
	}
	if hot := c.hot.Load(); hot != nil && hot.has(word) {
		return
	}
	if c.fresh == nil {
		c.fresh = map[string][]int{}
	}
	// Cloned: word is a slice of the caller's text, which the cache must not keep alive.
	c.fresh[strings.Clone(word)] = ids
	c.waiting.Store(int32(len(c.fresh)))
	c.n++
	c.maybePromote()
}

// maybePromote copies fresh into a new snapshot once it holds a quarter of the snapshot's words or has
// answered as many lookups (at least 64 either way); c.mu is held.
func (c *wordCache) maybePromote() {
	hot := c.hot.Load()
	words := 0
	if hot != nil {
		words = hot.words
	} else {
		c.seed = maphash.MakeSeed()
	}
	if bound := max(64, words/4); len(c.fresh) < bound && c.freshHits < bound {
		return
	}
	c.hot.Store(newWordTable(c.seed, hot, c.fresh))
	c.fresh, c.freshHits = nil, 0
	c.waiting.Store(0)
}

// wordTable is a snapshot of wordCache: an open-addressing hash table, at most half full, probed
// linearly. A lookup is one hash of the word and, nearly always, one slot. A slot is one cache line
// holding the word and its ids themselves when they fit, as nearly all do. In a gateway the cache is
// tens of thousands of words and cold between requests: a lookup that followed pointers to the word's
// bytes and to its ids missed the CPU's caches three times rather than once, and was most of the
// tokenizer's 5% of a gRPC-mode gateway's CPU (perf, docs/benchmarks.md). In a small, warm cache
// (BenchmarkWordCacheGet) a Go map is faster; a gateway's cache is neither.
type wordTable struct {
	slots []wordSlot // a power of two of them
	text  string     // the words too long for their slot, end to end
	ids   []int      // the ids of words whose ids or bytes do not fit their slot, end to end
	words int
	seed  maphash.Seed // the cache's, the same for every snapshot, so a copy keeps the hashes
}

const (
	slotWordBytes = 24
	slotIDs       = 6
)

// wordSlot is 64 bytes. A word of at most slotWordBytes bytes with at most slotIDs ids is inline;
// otherwise the word is text[off:off+wlen] and its ids are ids[ids[0]:ids[0]+n] (the first inline id
// holds their offset).
type wordSlot struct {
	hash uint64 // 0 marks an empty slot (hashes are made odd)
	wlen uint16
	n    uint16
	off  uint32
	word [slotWordBytes]byte
	id   [slotIDs]int32
}

func (s *wordSlot) inline() bool { return s.wlen <= slotWordBytes && s.n <= slotIDs }

func wordHash(seed maphash.Seed, word string) uint64 { return maphash.String(seed, word) | 1 }

// newWordTable returns a table of old's words and fresh's; seed is old's.
func newWordTable(seed maphash.Seed, old *wordTable, fresh map[string][]int) *wordTable {
	words := len(fresh)
	if old != nil {
		words += old.words
	}
	size := 64
	for size < 2*words {
		size *= 2
	}
	t := &wordTable{slots: make([]wordSlot, size), words: words, seed: seed}
	var text strings.Builder
	var buf []int
	if old != nil {
		for i := range old.slots {
			if s := &old.slots[i]; s.hash != 0 {
				buf = old.appendSlot(buf[:0], s)
				t.insert(&text, s.hash, old.slotWord(s), buf)
			}
		}
	}
	for w, ids := range fresh {
		t.insert(&text, wordHash(seed, w), w, ids)
	}
	t.text = text.String()
	return t
}

func (t *wordTable) insert(text *strings.Builder, h uint64, word string, ids []int) {
	mask := uint64(len(t.slots) - 1)
	i := h & mask
	for t.slots[i].hash != 0 {
		i = (i + 1) & mask
	}
	s := &t.slots[i]
	s.hash, s.wlen, s.n = h, uint16(len(word)), uint16(len(ids))
	if s.inline() {
		copy(s.word[:], word)
		for k, id := range ids {
			s.id[k] = int32(id)
		}
		return
	}
	s.off = uint32(text.Len())
	text.WriteString(word)
	s.id[0] = int32(len(t.ids))
	t.ids = append(t.ids, ids...)
}

// slotWord is the word of a slot of t; it may alias t's memory.
func (t *wordTable) slotWord(s *wordSlot) string {
	if s.inline() {
		return string(s.word[:s.wlen])
	}
	return t.text[s.off : s.off+uint32(s.wlen)]
}

// appendSlot appends the ids of a slot of t to dst.
func (t *wordTable) appendSlot(dst []int, s *wordSlot) []int {
	if !s.inline() {
		off := int(s.id[0])
		return append(dst, t.ids[off:off+int(s.n)]...)
	}
	if s.n == 1 { // the commonest word, one token
		return append(dst, int(s.id[0]))
	}
	for _, id := range s.id[:s.n] {
		dst = append(dst, int(id))
	}
	return dst
}

// find returns the slot of word, or nil.
func (t *wordTable) find(word string) *wordSlot { return t.findHashed(word, wordHash(t.seed, word)) }

// findHashed is find with word's hash h already known (wordHash with t.seed).
func (t *wordTable) findHashed(word string, h uint64) *wordSlot {
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.hash == h && int(s.wlen) == len(word) {
			if s.inline() {
				if string(s.word[:s.wlen]) == word {
					return s
				}
			} else if t.text[s.off:s.off+uint32(s.wlen)] == word {
				return s
			}
		}
		if s.hash == 0 {
			return nil
		}
	}
}

func (t *wordTable) has(word string) bool { return t.find(word) != nil }

// appendGet appends word's ids to dst; false (dst unchanged) when word is not in t.
func (t *wordTable) appendGet(dst []int, word string) ([]int, bool) {
	s := t.find(word)
	if s == nil {
		return dst, false
	}
	return t.appendSlot(dst, s), true
}
