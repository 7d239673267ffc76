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

func (c *wordCache) get(word string) ([]int, bool) {
	if hot := c.hot.Load(); hot != nil {
		if ids, ok := hot.get(word); ok {
			return ids, true
		}
	}
	if c.waiting.Load() == 0 {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ids, ok := c.fresh[word]
	if ok {
		c.freshHits++
		c.maybePromote()
	}
	return ids, ok
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
	if hot := c.hot.Load(); hot != nil {
		if _, ok := hot.get(word); ok {
			return
		}
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
// linearly. A lookup is one hash of the word and, nearly always, one slot: about half the time of a Go
// map's lookup, which was a third of encoding a chat.
type wordTable struct {
	slots []wordSlot // a power of two of them
	ids   []int      // every word's ids, end to end
	words int
	seed  maphash.Seed // the cache's, the same for every snapshot, so a copy keeps the hashes
}

type wordSlot struct {
	hash   uint64 // 0 marks an empty slot (hashes are made odd)
	word   string
	off, n uint32 // the word's ids are ids[off:off+n]
}

func wordHash(seed maphash.Seed, word string) uint64 { return maphash.String(seed, word) | 1 }

// newWordTable returns a table of old's words and fresh's; seed is old's.
func newWordTable(seed maphash.Seed, old *wordTable, fresh map[string][]int) *wordTable {
	words, nids := len(fresh), 0
	for _, ids := range fresh {
		nids += len(ids)
	}
	if old != nil {
		words += old.words
		nids += len(old.ids)
	}
	size := 64
	for size < 2*words {
		size *= 2
	}
	t := &wordTable{slots: make([]wordSlot, size), ids: make([]int, 0, nids), words: words, seed: seed}
	if old != nil {
		for _, s := range old.slots {
			if s.hash != 0 {
				t.insert(s.hash, s.word, old.ids[s.off:s.off+s.n])
			}
		}
	}
	for w, ids := range fresh {
		t.insert(wordHash(seed, w), w, ids)
	}
	return t
}

func (t *wordTable) insert(h uint64, word string, ids []int) {
	mask := uint64(len(t.slots) - 1)
	i := h & mask
	for t.slots[i].hash != 0 {
		i = (i + 1) & mask
	}
	t.slots[i] = wordSlot{hash: h, word: word, off: uint32(len(t.ids)), n: uint32(len(ids))}
	t.ids = append(t.ids, ids...)
}

func (t *wordTable) get(word string) ([]int, bool) {
	h := wordHash(t.seed, word)
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.hash == h && s.word == word {
			end := s.off + s.n
			return t.ids[s.off:end:end], true
		}
		if s.hash == 0 {
			return nil, false
		}
	}
}
