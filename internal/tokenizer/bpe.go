package tokenizer

import "sync"

// bpe is a byte-level BPE model: a word's bytes start as the ids of their one-byte tokens and are merged
// pair by pair, lowest merge rank first (leftmost on ties), as Hugging Face tokenizers' BPE::merge_word
// does (tokenizers/src/models/bpe/word.rs).
type bpe struct {
	byteID [256]int
	merges map[uint64]merge // (left id, right id) -> rank and merged id

	// Words repeat; the cache keeps their ids (wordCache).
	cache wordCache
	// batches are lookup's scratch (*wordBatch), reused across calls.
	batches sync.Pool

	// With model.ignore_merges (Llama 3, gpt-oss), a word that is a token is that token, whatever its
	// merges would make (tokenizers' BPE::tokenize_with_cache); keyed by the token's bytes.
	whole map[string]int
}

type merge struct {
	rank, id int32
}

func pairKey(a, b int) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// appendWord appends the ids of word (raw bytes, before the byte-level mapping) to dst.
func (m *bpe) appendWord(dst []int, word string) []int {
	if len(word) == 1 {
		return append(dst, m.byteID[word[0]])
	}
	if out, ok := m.cache.appendGet(dst, word); ok {
		return out
	}
	start := len(dst)
	if id, ok := m.whole[word]; ok {
		// Cached as well: one lookup the next time instead of a miss and this larger, colder map.
		dst = append(dst, id)
		m.cache.put(word, append([]int(nil), id))
		return dst
	}
	dst = m.mergeWord(dst, word)
	m.cache.put(word, append([]int(nil), dst[start:]...))
	return dst
}

// wordBatch is up to batchWords of a text's words with their hashes, looked up together (lookup).
type wordBatch struct {
	words   []string
	hashes  []uint64
	touched uint64 // the slots' first words summed: the loads must happen, so the result is kept
}

// batchWords is how many words are looked up together: enough for their cache misses to overlap, few
// enough that their slots (64 bytes each) are still cached when each word's turn comes.
const batchWords = 64

// batch returns an empty wordBatch: add a text's words to it, then lookup the rest and release it.
func (m *bpe) batch() *wordBatch {
	if b, ok := m.batches.Get().(*wordBatch); ok {
		return b
	}
	return &wordBatch{words: make([]string, 0, batchWords), hashes: make([]uint64, 0, batchWords)}
}

// add appends word to b, looking the batch up once it is full.
func (m *bpe) add(dst []int, b *wordBatch, word string) []int {
	b.words = append(b.words, word)
	if len(b.words) == batchWords {
		dst = m.lookup(dst, b)
	}
	return dst
}

// lookup appends the ids of b's words, a text's pieces in order, to dst, as appendWord would one by
// one, and empties b. A gateway's word cache is megabytes and cold between requests, so nearly every
// lookup misses the CPU's caches, and words looked up one by one wait for those misses one at a time.
// Here the slots of the batch's words are loaded first, in a loop with nothing else to do, so their
// misses overlap, and the lookups that follow find them cached (BenchmarkEncodeColdCache).
func (m *bpe) lookup(dst []int, b *wordBatch) []int {
	hot := m.cache.hot.Load()
	if hot == nil || len(b.words) < 4 {
		for _, w := range b.words {
			dst = m.appendWord(dst, w)
		}
		b.words = b.words[:0]
		return dst
	}
	hashes := b.hashes[:0]
	for _, w := range b.words {
		hashes = append(hashes, wordHash(hot.seed, w))
	}
	mask := uint64(len(hot.slots) - 1)
	touched := uint64(0)
	for _, h := range hashes {
		touched += hot.slots[h&mask].hash
	}
	b.hashes, b.touched = hashes, touched
	for i, w := range b.words {
		if len(w) > 1 {
			if s := hot.findHashed(w, hashes[i]); s != nil {
				dst = hot.appendSlot(dst, s)
				continue
			}
		}
		dst = m.appendWord(dst, w)
	}
	b.words = b.words[:0]
	return dst
}

// release returns b for reuse, holding no word: they are slices of the caller's text.
func (m *bpe) release(b *wordBatch) {
	clear(b.words[:cap(b.words)])
	b.words = b.words[:0]
	m.batches.Put(b)
}

type symbol struct {
	id         int
	prev, next int // -1 at the ends
}

type candidate struct {
	rank, pos int32
	id        int32
}

func (a candidate) less(b candidate) bool {
	return a.rank < b.rank || a.rank == b.rank && a.pos < b.pos
}

func (m *bpe) mergeWord(dst []int, word string) []int {
	var symBuf [32]symbol
	var heapBuf [32]candidate
	syms := symBuf[:0]
	h := candidates(heapBuf[:0])
	for i := range len(word) {
		syms = append(syms, symbol{id: m.byteID[word[i]], prev: i - 1, next: i + 1})
	}
	syms[len(syms)-1].next = -1
	return mergeSymbols(dst, m.merges, syms, h)
}

// mergeSymbols applies merges to syms (linked in order, the last one's next -1), lowest rank first and
// leftmost on ties, and appends the ids left; h is an empty heap to reuse.
func mergeSymbols(dst []int, merges map[uint64]merge, syms []symbol, h candidates) []int {
	for i := 0; i+1 < len(syms); i++ {
		if mg, ok := merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
			h.push(candidate{rank: mg.rank, pos: int32(i), id: mg.id})
		}
	}
	for len(h) > 0 {
		c := h.pop()
		s := &syms[c.pos]
		if s.id < 0 || s.next < 0 {
			continue // merged away, or now last
		}
		// Still the pair this candidate was made for?
		nx := s.next
		if mg, ok := merges[pairKey(s.id, syms[nx].id)]; !ok || mg.id != c.id {
			continue
		}
		s.id = int(c.id)
		s.next = syms[nx].next
		syms[nx].id = -1
		if s.next >= 0 {
			syms[s.next].prev = int(c.pos)
			if mg, ok := merges[pairKey(s.id, syms[s.next].id)]; ok {
				h.push(candidate{rank: mg.rank, pos: c.pos, id: mg.id})
			}
		}
		if s.prev >= 0 {
			if mg, ok := merges[pairKey(syms[s.prev].id, s.id)]; ok {
				h.push(candidate{rank: mg.rank, pos: int32(s.prev), id: mg.id})
			}
		}
	}
	for i := 0; i >= 0; i = syms[i].next {
		dst = append(dst, syms[i].id)
	}
	return dst
}

// candidates is a binary min-heap (container/heap's interface costs an allocation per push).
type candidates []candidate

func (h *candidates) push(c candidate) {
	*h = append(*h, c)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s[i].less(s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *candidates) pop() candidate {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	for i := 0; ; {
		l, small := 2*i+1, i
		if l < n && s[l].less(s[small]) {
			small = l
		}
		if r := l + 1; r < n && s[r].less(s[small]) {
			small = r
		}
		if small == i {
			break
		}
		s[i], s[small] = s[small], s[i]
		i = small
	}
	*h = s
	return top
}
