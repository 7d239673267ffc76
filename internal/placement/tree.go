package placement

import (
	"sync/atomic"
	"unsafe"
)

// tree is an approximate radix tree of prompt text for one model. Each node
// records which workers (tenants, by interned id) were sent text through it,
// and each worker's nodes are listed in the order they were last sent (lru),
// so a prefix match says which worker probably holds that prefix in its KV
// cache. "Approximate": the gateway never sees the engines' real caches; it
// assumes what it sent is cached until evicted here by size, least recently
// sent first.
//
// Invariant: a tenant present on a node is present on all its ancestors
// (insert stamps the whole path; eviction removes leaves first), so a walk
// may stop at the first node without a wanted tenant.
//
// The tree is the gateway's largest live structure (MaxTreeSize bytes of text per worker, and a
// node per few dozen bytes), so it is kept out of the garbage collector's way: nodes are values
// in arrays of 4,096, linked by index, and labels are spans of a few large byte slices
// (labelText), so neither holds a pointer the collector must trace. As pointers, a million nodes
// and their labels were objects that every GC cycle marked, and each step of a walk chased
// several of them. Only a node's children past the first four and its tenants past the first two
// live in maps. Neither the nodes nor the text is ever copied whole, so no pick waits on a copy.
//
// Not safe for concurrent use; CacheAware guards each tree with a mutex.
type tree struct {
	// nodes holds the nodes in chunks that never move, so a pick never waits on a copy of them as
	// the tree grows (a slice of 400,000 nodes took up to 44 ms to grow); node(0) is the root once
	// anything was inserted.
	nodes []*nodeChunk
	count nodeID    // the nodes in use or free
	free  []nodeID  // pruned nodes, for newNode to reuse
	txt   labelText // the labels
	// sweep is the next node whose label the sweep looks at (sweepNodes).
	sweep nodeID
	// A node's children and tenants past its inline ones; a node has entries only while its inline
	// slots are full (a deletion refills them from here).
	wide  map[nodeID][]kid
	extra map[nodeID][]stamp
	// size[id] is the number of text bytes held by tenant id: the sum of
	// the label lengths of the nodes carrying it.
	size []int
	// lru[id] lists the nodes carrying tenant id, most recently sent first. An insert moves its
	// path to the front deepest node first, so a node is always ahead of its descendants and the
	// last node is a leaf for id: eviction takes from the back, one node at a time, and never
	// walks the tree.
	lru  []ends
	path []nodeID // insert's scratch

	// mem is the tree's memory outside the heap (bulk.go), made at its first insert; chunks are
	// node chunks mapped and not yet used; mapped counts the bytes mapped (nil: uncounted).
	mem    *bulkMem
	chunks []*nodeChunk
	mapped *atomic.Int64
}

const nodeChunkBits = 12

// nodeChunk is 4,096 nodes, 256 KiB.
type nodeChunk [1 << nodeChunkBits]node

// nodeChunkBytes is a chunk's size: eight fill a huge page.
const nodeChunkBytes = int(unsafe.Sizeof(nodeChunk{}))

// node returns node n.
func (t *tree) node(n nodeID) *node {
	return &t.nodes[n>>nodeChunkBits][n&(1<<nodeChunkBits-1)]
}

// add appends a node under parent and returns it.
func (t *tree) add(parent nodeID) nodeID {
	n := t.count
	if int(n>>nodeChunkBits) == len(t.nodes) {
		t.nodes = append(t.nodes, t.newChunk())
	}
	t.count++
	*t.node(n) = node{parent: parent}
	return n
}

// newChunk returns a zeroed chunk of nodes: on the heap for the tree's first heapNodeChunks, then
// carved from a huge page, eight at a time (bulk.go). A node holds no pointer, so the collector need
// not see the mapped ones.
func (t *tree) newChunk() *nodeChunk {
	if len(t.nodes) >= heapNodeChunks && t.mem != nil {
		if len(t.chunks) == 0 {
			if b := t.mem.alloc(hugeBytes); b != nil {
				for off := 0; off+nodeChunkBytes <= len(b); off += nodeChunkBytes {
					t.chunks = append(t.chunks, (*nodeChunk)(unsafe.Pointer(&b[off])))
				}
			}
		}
		if len(t.chunks) > 0 {
			c := t.chunks[0]
			t.chunks = t.chunks[1:]
			return c
		}
	}
	return new(nodeChunk)
}

// ends are the first and last node of a tenant's lru list.
type ends struct{ head, tail nodeID }

// nodeID names a node of a tree (tree.node).
type nodeID = int32

const (
	root      nodeID = 0
	noNode    nodeID = -1
	inlineKid        = 4
	inlineTen        = 2
)

type node struct {
	off    int // the label is txt.bytes(off, n)
	n      int32
	parent nodeID
	nkid   uint8 // children in key/kid (the rest are in tree.wide)
	nten   uint8 // tenants in ten (the rest are in tree.extra)
	key    [inlineKid]byte
	tail   [2]byte // the label's second and third bytes, as far as it has them (see prefixLen)
	kid    [inlineKid]nodeID
	ten    [inlineTen]stamp
}

type kid struct {
	c  byte
	id nodeID
}

// stamp is a tenant on a node, and the node's neighbours in that tenant's lru list.
type stamp struct {
	id         int32
	prev, next nodeID
}

func (t *tree) label(n nodeID) []byte {
	nd := t.node(n)
	return t.txt.bytes(nd.off, int(nd.n))
}

// setLabel makes n's label the length bytes of text at off.
func (t *tree) setLabel(n nodeID, off, length int) {
	nd := t.node(n)
	nd.off, nd.n = off, int32(length)
	nd.tail = [2]byte{}
	if length > 1 {
		copy(nd.tail[:], t.txt.bytes(off+1, length-1))
	}
}

// prefixLen is the length of the common prefix of ch's label and s, where s[0] is the byte ch is
// keyed by. A label of up to three bytes is compared from the node (its first byte is its key, the
// next two are in tail): in a tree of unrelated prompts nine steps of ten are such labels, and
// reading them from text was a cache miss each.
func (t *tree) prefixLen(ch nodeID, s string) int {
	nd := t.node(ch)
	if nd.n > 3 {
		return commonPrefixLen(t.txt.bytes(nd.off, int(nd.n)), s)
	}
	l := 1
	for l < int(nd.n) && l < len(s) && nd.tail[l-1] == s[l] {
		l++
	}
	return l
}

// child returns n's child keyed c, or noNode.
func (t *tree) child(n nodeID, c byte) nodeID {
	nd := t.node(n)
	for i := range nd.nkid {
		if nd.key[i] == c {
			return nd.kid[i]
		}
	}
	if nd.nkid == inlineKid {
		for _, k := range t.wide[n] {
			if k.c == c {
				return k.id
			}
		}
	}
	return noNode
}

// setChild sets n's child keyed c to ch, replacing any.
func (t *tree) setChild(n nodeID, c byte, ch nodeID) {
	nd := t.node(n)
	for i := range nd.nkid {
		if nd.key[i] == c {
			nd.kid[i] = ch
			return
		}
	}
	if nd.nkid < inlineKid {
		nd.key[nd.nkid], nd.kid[nd.nkid] = c, ch
		nd.nkid++
		return
	}
	w := t.wide[n]
	for i := range w {
		if w[i].c == c {
			w[i].id = ch
			return
		}
	}
	if t.wide == nil {
		t.wide = make(map[nodeID][]kid)
	}
	t.wide[n] = append(w, kid{c, ch})
}

// delChild removes n's child keyed c. Inline slots stay filled first: one from the wide list takes
// a freed inline slot.
func (t *tree) delChild(n nodeID, c byte) {
	nd := t.node(n)
	w := t.wide[n]
	for i := range nd.nkid {
		if nd.key[i] != c {
			continue
		}
		if len(w) > 0 {
			last := w[len(w)-1]
			nd.key[i], nd.kid[i] = last.c, last.id
			t.setWide(n, w[:len(w)-1])
			return
		}
		l := nd.nkid - 1
		nd.key[i], nd.kid[i] = nd.key[l], nd.kid[l]
		nd.nkid--
		return
	}
	for i := range w {
		if w[i].c == c {
			w[i] = w[len(w)-1]
			t.setWide(n, w[:len(w)-1])
			return
		}
	}
}

func (t *tree) setWide(n nodeID, w []kid) {
	if len(w) == 0 {
		delete(t.wide, n)
	} else {
		t.wide[n] = w
	}
}

// children appends n's children to dst; a walk that prunes while it goes must not range over the
// node itself.
func (t *tree) children(dst []nodeID, n nodeID) []nodeID {
	nd := t.node(n)
	dst = append(dst, nd.kid[:nd.nkid]...)
	for _, k := range t.wide[n] {
		dst = append(dst, k.id)
	}
	return dst
}

// stampOf returns tenant id's stamp on n, or nil. The pointer is good until the next change of
// n's extra tenants.
func (t *tree) stampOf(n nodeID, id int32) *stamp {
	nd := t.node(n)
	for i := range nd.nten {
		if nd.ten[i].id == id {
			return &nd.ten[i]
		}
	}
	if nd.nten == inlineTen {
		x := t.extra[n]
		for i := range x {
			if x[i].id == id {
				return &x[i]
			}
		}
	}
	return nil
}

// unlink takes n out of s.id's lru list (s is n's stamp).
func (t *tree) unlink(n nodeID, s *stamp) {
	e := &t.lru[s.id]
	if s.prev != noNode {
		t.stampOf(s.prev, s.id).next = s.next
	} else {
		e.head = s.next
	}
	if s.next != noNode {
		t.stampOf(s.next, s.id).prev = s.prev
	} else {
		e.tail = s.prev
	}
	s.prev, s.next = noNode, noNode
}

// linkBefore puts n (stamp s, not in the list) ahead of at in s.id's list; at == noNode puts it
// at the front.
func (t *tree) linkBefore(n nodeID, s *stamp, at nodeID) {
	e := &t.lru[s.id]
	if at == noNode {
		s.prev, s.next = noNode, e.head
		if e.head != noNode {
			t.stampOf(e.head, s.id).prev = n
		} else {
			e.tail = n
		}
		e.head = n
		return
	}
	as := t.stampOf(at, s.id)
	s.prev, s.next = as.prev, at
	if as.prev != noNode {
		t.stampOf(as.prev, s.id).next = n
	} else {
		e.head = n
	}
	as.prev = n
}

// hasTenant reports whether some tenant of n is accepted by ok.
func (t *tree) hasTenant(n nodeID, ok func(id int32) bool) bool {
	nd := t.node(n)
	for i := range nd.nten {
		if ok(nd.ten[i].id) {
			return true
		}
	}
	if nd.nten == inlineTen {
		for _, s := range t.extra[n] {
			if ok(s.id) {
				return true
			}
		}
	}
	return false
}

// tenants yields n's tenants.
func (t *tree) tenants(n nodeID) func(yield func(int32) bool) {
	return func(yield func(int32) bool) {
		nd := t.node(n)
		for i := range nd.nten {
			if !yield(nd.ten[i].id) {
				return
			}
		}
		if nd.nten == inlineTen {
			for _, s := range t.extra[n] {
				if !yield(s.id) {
					return
				}
			}
		}
	}
}

func commonPrefixLen(a []byte, b string) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// match walks text down the tree and returns the number of matched bytes and
// the deepest matched node that carries at least one tenant accepted by ok
// (noNode if none).
func (t *tree) match(text string, ok func(id int32) bool) (matched int, at nodeID) {
	at = noNode
	if t.count == 0 {
		return 0, at
	}
	n := root
	pos := 0
	for pos < len(text) {
		ch := t.child(n, text[pos])
		if ch == noNode || !t.hasTenant(ch, ok) {
			break
		}
		l := t.prefixLen(ch, text[pos:])
		pos += l
		matched, at = pos, ch
		if l < int(t.node(ch).n) {
			break
		}
		n = ch
	}
	return matched, at
}

func (t *tree) growSize(id int32) {
	for int(id) >= len(t.size) {
		t.size = append(t.size, 0)
		t.lru = append(t.lru, ends{noNode, noNode})
	}
}

// newNode adds a node with label text[off:off+n] under parent.
func (t *tree) newNode(off, n int, parent nodeID) nodeID {
	var id nodeID
	if k := len(t.free); k > 0 {
		id = t.free[k-1]
		t.free = t.free[:k-1]
		*t.node(id) = node{parent: parent}
	} else {
		id = t.add(parent)
	}
	t.setLabel(id, off, n)
	return id
}

// addTenant puts tenant id on n (which does not carry it) with its bytes, and links it in id's
// list ahead of at (noNode: at the front).
func (t *tree) addTenant(n nodeID, id int32, at nodeID) {
	nd := t.node(n)
	t.size[id] += int(nd.n)
	st := stamp{id: id, prev: noNode, next: noNode}
	if nd.nten < inlineTen {
		nd.ten[nd.nten] = st
		nd.nten++
	} else {
		if t.extra == nil {
			t.extra = make(map[nodeID][]stamp)
		}
		t.extra[n] = append(t.extra[n], st)
	}
	t.linkBefore(n, t.stampOf(n, id), at)
}

// touch moves n to the front of tenant id's list, adding id (and its bytes) if absent.
func (t *tree) touch(n nodeID, id int32) {
	s := t.stampOf(n, id)
	if s == nil {
		t.addTenant(n, id, noNode)
		return
	}
	if t.lru[id].head != n {
		t.unlink(n, s)
		t.linkBefore(n, s, noNode)
	}
}

// insert records that text was sent to tenant id.
func (t *tree) insert(text string, id int32) {
	if t.mem == nil {
		t.mem = newBulkMem(t, t.mapped)
		t.txt.mem = t.mem
	}
	if t.count == 0 {
		t.add(noNode)
	}
	t.growSize(id)
	path := t.path[:0]
	n := root
	pos := 0
	for pos < len(text) {
		c := text[pos]
		ch := t.child(n, c)
		if ch == noNode {
			leaf := t.newNode(t.txt.add(text[pos:]), len(text)-pos, n)
			t.setChild(n, c, leaf)
			path = append(path, leaf)
			break
		}
		l := t.prefixLen(ch, text[pos:])
		if cn := t.node(ch); l < int(cn.n) {
			// Split ch at l: mid takes the shared part and ch's tenants, each just ahead of ch in
			// its list (sizes are unchanged: the bytes are just divided, and so is the label's span
			// of text).
			off, length := cn.off, int(cn.n)
			c2 := t.txt.at(off + l)
			mid := t.newNode(off, l, n)
			t.setLabel(ch, off+l, length-l)
			t.node(ch).parent = mid
			for tid := range t.tenants(ch) {
				t.addTenant(mid, tid, ch)
				t.size[tid] -= l // the bytes were ch's
			}
			t.setChild(mid, c2, ch)
			t.setChild(n, c, mid)
			ch = mid
		}
		path = append(path, ch)
		pos += l
		n = ch
	}
	for i := len(path) - 1; i >= 0; i-- { // deepest first: each node ends ahead of its descendants
		t.touch(path[i], id)
	}
	t.path = path[:0]
	if t.txt.sparse > 0 {
		t.sweepNodes(sweepPerInsert)
	}
}

// sweepPerInsert is how many nodes an insert's sweep looks at while some chunk of text is sparse.
// A chunk turns sparse as the labels in it are evicted, and is empty once the sweep has been round
// the nodes, about len(nodes)/sweepPerInsert inserts later: at the default budget, about 50,000
// inserts, in which their text adds under a fifth of what is live. Eight nodes are 512 bytes read
// in order, a small part of an insert's cost.
const sweepPerInsert = 8

// sweepNodes looks at the labels of the next k nodes in slice order and moves those in a sparse
// chunk of text, so the chunk empties and is freed, a bounded amount of work per call where a
// compaction copied all the text at once.
func (t *tree) sweepNodes(k int) {
	for ; k > 0 && t.txt.sparse > 0; k-- {
		if t.sweep >= t.count {
			t.sweep = 0
		}
		nd := t.node(t.sweep)
		t.sweep++
		if nd.n > 0 && t.txt.inSparse(nd.off) {
			nd.off = t.txt.move(nd.off, int(nd.n))
		}
	}
}

// removeTenantAt removes tenant id from n and prunes n if it became empty.
// It reports whether n was pruned.
func (t *tree) removeTenantAt(n nodeID, id int32) bool {
	s := t.stampOf(n, id)
	if s == nil {
		return false
	}
	t.unlink(n, s)
	nd := t.node(n)
	x := t.extra[n]
	// The stamp's slot is refilled by the last extra tenant, or else the last inline one (links
	// name nodes, not slots, so a stamp may move).
	switch {
	case len(x) > 0:
		*s = x[len(x)-1]
		t.setExtra(n, x[:len(x)-1])
	default:
		*s = nd.ten[nd.nten-1]
		nd.nten--
	}
	t.size[id] -= int(nd.n)
	if nd.nten == 0 && nd.nkid == 0 && n != root {
		t.delChild(nd.parent, t.txt.at(nd.off))
		t.txt.release(nd.off, int(nd.n))
		*t.node(n) = node{parent: noNode}
		t.free = append(t.free, n)
		return true
	}
	return false
}

func (t *tree) setExtra(n nodeID, x []stamp) {
	if len(x) == 0 {
		delete(t.extra, n)
	} else {
		t.extra[n] = x
	}
}

// evictTenant removes tenant id's least recently sent text, a leaf at a time, until it holds at
// most max bytes.
func (t *tree) evictTenant(id int32, max int) {
	for int(id) < len(t.size) && t.size[id] > max && t.lru[id].tail != noNode {
		t.removeTenantAt(t.lru[id].tail, id)
	}
}

// evict trims every tenant to max bytes, and sweeps a bounded part of the nodes, so a text that
// eviction or forget left sparse is freed while no insert comes.
func (t *tree) evict(max int) {
	for id, sz := range t.size {
		if sz > max {
			t.evictTenant(int32(id), max)
		}
	}
	t.sweepNodes(sweepPerEvict)
}

// sweepPerEvict bounds the periodic eviction's sweep: 4 MiB of nodes read in order, and what
// they hold in sparse chunks copied, about a millisecond.
const sweepPerEvict = 1 << 16

// forget removes tenant id from the whole tree, from the back of its list: leaves first, so
// empty nodes prune bottom-up.
func (t *tree) forget(id int32) {
	if int(id) >= len(t.size) {
		return
	}
	for t.lru[id].tail != noNode {
		t.removeTenantAt(t.lru[id].tail, id)
	}
	t.size[id] = 0
}
