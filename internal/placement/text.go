package placement

// labelText stores the tree's labels in chunks that are never grown or copied whole, so no insert
// waits on a copy of the text. As one byte slice, the text was grown by copying while the tree
// filled and compacted by copying every live label when half of it was dead: at the default budget
// that held the tree's lock for up to 90 ms, once per budget's worth of prompts.
//
// A label is an offset (chunk index << 32 | position in the chunk) and a length, and never spans
// two chunks. New labels are appended to the current chunk; a label longer than a chunk gets a
// chunk of its own. live counts, per chunk, the bytes some label still spans: a chunk whose count
// falls to zero is freed, and one that falls under half full is sparse, and the tree's sweep moves
// its labels to the current chunk a few nodes per insert (tree.sweep). So the text holds at most
// about twice its live bytes, as the compaction kept it, without a pause.
type labelText struct {
	chunks [][]byte // nil: a free slot
	live   []int    // live[c] is the number of bytes of chunks[c] that labels span
	cur    int      // the chunk labels are appended to; -1: none yet
	slots  []int    // free slots of chunks
	spare  []byte   // an emptied chunk kept for the next one, so a steady state allocates none
	sparse int      // chunks under half live, other than cur (the sweep has work while > 0)
	moved  int      // bytes the sweep has copied, for tests
	size   int      // a heap chunk's capacity; 0: textChunk (a mapped chunk holds hugeBytes)
	mem    *bulkMem // the tree's, for chunks past the first heapTextChunks (nil: all on the heap)
}

// textChunk is a chunk's capacity: small enough that allocating one is no pause, large enough that
// few labels are longer.
const textChunk = 1 << 20

// offShift puts an offset's chunk above 32 bits of position (int is 64 bits wide: on a 32-bit
// platform the masks below do not compile).
const offShift = 32

func (x *labelText) chunkSize() int {
	if x.size > 0 {
		return x.size
	}
	return textChunk
}

// bytes returns the n bytes at off.
func (x *labelText) bytes(off, n int) []byte {
	w := off & (1<<offShift - 1)
	return x.chunks[off>>offShift][w : w+n]
}

// at returns the byte at off.
func (x *labelText) at(off int) byte {
	return x.chunks[off>>offShift][off&(1<<offShift-1)]
}

// add stores s and returns its offset.
func (x *labelText) add(s string) int {
	off, dst := x.reserve(len(s))
	copy(dst, s)
	return off
}

// reserve returns the offset of n new live bytes and the slice to fill them in.
func (x *labelText) reserve(n int) (int, []byte) {
	if n > x.chunkSize() {
		c := x.slot(make([]byte, n))
		x.live[c] = n
		return c << offShift, x.chunks[c]
	}
	if x.cur < 0 || len(x.chunks) == 0 || len(x.chunks[x.cur])+n > cap(x.chunks[x.cur]) {
		x.retire()
		buf := x.spare
		x.spare = nil
		if buf == nil {
			buf = x.newChunk()
		}
		x.cur = x.slot(buf)
	}
	buf := x.chunks[x.cur]
	w := len(buf)
	x.chunks[x.cur] = buf[:w+n]
	x.live[x.cur] += n
	return x.cur<<offShift | w, x.chunks[x.cur][w : w+n]
}

// newChunk returns an empty chunk: on the heap for the text's first heapTextChunks, then a huge page
// (bulk.go). Tests that set size keep every chunk on the heap.
func (x *labelText) newChunk() []byte {
	if x.size == 0 && x.mem != nil && len(x.chunks) >= heapTextChunks {
		if b := x.mem.alloc(hugeBytes); b != nil {
			return b[:0]
		}
	}
	return make([]byte, 0, x.chunkSize())
}

// slot puts buf in a free slot of chunks and returns its index.
func (x *labelText) slot(buf []byte) int {
	if k := len(x.slots); k > 0 {
		c := x.slots[k-1]
		x.slots = x.slots[:k-1]
		x.chunks[c], x.live[c] = buf, 0
		return c
	}
	x.chunks = append(x.chunks, buf)
	x.live = append(x.live, 0)
	return len(x.chunks) - 1
}

// retire stops appending to the current chunk: it is freed if no label spans it, and counted as
// sparse if under half of it is live.
func (x *labelText) retire() {
	c := x.cur
	x.cur = -1
	switch {
	case c < 0 || len(x.chunks) == 0:
	case x.live[c] == 0:
		x.free(c)
	case x.isSparse(c):
		x.sparse++
	}
}

func (x *labelText) isSparse(c int) bool { return 2*x.live[c] < len(x.chunks[c]) }

// release records that the n bytes at off are no label's any more.
func (x *labelText) release(off, n int) {
	c := off >> offShift
	was := x.isSparse(c)
	x.live[c] -= n
	switch {
	case c == x.cur:
		if x.live[c] == 0 {
			x.chunks[c] = x.chunks[c][:0] // start the chunk over
		}
	case x.live[c] == 0:
		if was {
			x.sparse--
		}
		x.free(c)
	case !was && x.isSparse(c):
		x.sparse++
	}
}

// free empties slot c, keeping its buffer as the spare if it is a whole chunk and none is kept; a
// mapped chunk not kept is unmapped.
func (x *labelText) free(c int) {
	switch buf := x.chunks[c]; {
	case x.spare == nil && (cap(buf) == x.chunkSize() || cap(buf) == hugeBytes && x.mem.owns(buf)):
		x.spare = buf[:0]
	default:
		x.mem.free(buf)
	}
	x.chunks[c], x.live[c] = nil, 0
	x.slots = append(x.slots, c)
}

// inSparse reports whether the label at off is in a sparse chunk, one the sweep empties.
func (x *labelText) inSparse(off int) bool {
	c := off >> offShift
	return c != x.cur && x.isSparse(c)
}

// move copies the n bytes at off to the current chunk (or a chunk of their own) and returns their
// new offset.
func (x *labelText) move(off, n int) int {
	src := x.bytes(off, n)
	to, dst := x.reserve(n)
	copy(dst, src)
	x.release(off, n)
	x.moved += n
	return to
}

// footprint is the bytes the text holds, live or not.
func (x *labelText) footprint() int {
	n := cap(x.spare)
	for _, c := range x.chunks {
		n += cap(c)
	}
	return n
}
