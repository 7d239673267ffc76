package placement

import (
	"container/heap"
	"strings"
)

// tree is an approximate radix tree of prompt text for one model. Each node
// records which workers (tenants, by interned id) were sent text through it
// and when (a logical clock), so a prefix match says which worker probably
// holds that prefix in its KV cache. "Approximate": the gateway never sees
// the engines' real caches; it assumes what it sent is cached until evicted
// here by size.
//
// Invariant: a tenant present on a node is present on all its ancestors
// (insert stamps the whole path; eviction removes leaves first), so a walk
// may stop at the first node without a wanted tenant.
//
// Not safe for concurrent use; CacheAware guards each tree with a mutex.
type tree struct {
	root  node
	clock uint64
	// size[id] is the number of text bytes held by tenant id: the sum of
	// the label lengths of the nodes carrying it.
	size []int
}

type node struct {
	// A step of a walk reads a child's tenants, label and children, in that order; they come first,
	// and the first tenant and the first children live in the node itself. On a tree near its budget
	// every separate allocation a step touches is a cache miss: with a map of children and a slice of
	// tenants apart, a step cost four or five of them, most of a pick's time.
	tenants []stamp
	label   string
	kids    kids
	parent  *node
	one     [1]stamp // tenants' storage while the node has a single tenant, as most do
}

// newNode returns a node with label under parent, its tenants kept in the node.
func newNode(label string, parent *node) *node {
	n := &node{label: label, parent: parent}
	n.tenants = n.one[:0]
	return n
}

type stamp struct {
	id   int32
	last uint64
}

// inlineKids is how many children a node keeps in itself; the rest go to a map. Below the tree's
// top levels most nodes have fewer.
const inlineKids = 4

// kids maps a child's first label byte to the child. A key is inline or in more, never both.
type kids struct {
	n    uint8
	key  [inlineKids]byte
	node [inlineKids]*node
	more map[byte]*node
}

func (k *kids) get(c byte) *node {
	for i := range k.n {
		if k.key[i] == c {
			return k.node[i]
		}
	}
	if k.more != nil {
		return k.more[c]
	}
	return nil
}

// put sets c's child to n, replacing any.
func (k *kids) put(c byte, n *node) {
	for i := range k.n {
		if k.key[i] == c {
			k.node[i] = n
			return
		}
	}
	if _, ok := k.more[c]; ok {
		k.more[c] = n
		return
	}
	if k.n < inlineKids {
		k.key[k.n], k.node[k.n] = c, n
		k.n++
		return
	}
	if k.more == nil {
		k.more = make(map[byte]*node, 4)
	}
	k.more[c] = n
}

func (k *kids) del(c byte) {
	for i := range k.n {
		if k.key[i] == c {
			last := k.n - 1
			k.key[i], k.node[i] = k.key[last], k.node[last]
			k.node[last] = nil
			k.n--
			return
		}
	}
	delete(k.more, c)
}

func (k *kids) len() int { return int(k.n) + len(k.more) }

// all yields every child with its key. The yielded child may be deleted during the loop (forget's
// walk prunes it): the inline ones are visited last to first, so the swap a deletion makes moves an
// already visited child, and deleting from a map while ranging over it is allowed.
func (k *kids) all(yield func(byte, *node) bool) {
	for i := int(k.n) - 1; i >= 0; i-- {
		if !yield(k.key[i], k.node[i]) {
			return
		}
	}
	for c, n := range k.more {
		if !yield(c, n) {
			return
		}
	}
}

func (n *node) tenantIndex(id int32) int {
	for i := range n.tenants {
		if n.tenants[i].id == id {
			return i
		}
	}
	return -1
}

func commonPrefixLen(a, b string) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// match walks text down the tree and returns the number of matched bytes and
// the deepest matched node that carries at least one tenant accepted by ok.
func (t *tree) match(text string, ok func(id int32) bool) (matched int, at *node) {
	n := &t.root
	pos := 0
	for pos < len(text) {
		child := n.kids.get(text[pos])
		if child == nil {
			break
		}
		has := false
		for _, s := range child.tenants {
			if ok(s.id) {
				has = true
				break
			}
		}
		if !has {
			break
		}
		l := commonPrefixLen(child.label, text[pos:])
		pos += l
		matched, at = pos, child
		if l < len(child.label) {
			break
		}
		n = child
	}
	return matched, at
}

func (t *tree) growSize(id int32) {
	if int(id) >= len(t.size) {
		t.size = append(t.size, make([]int, int(id)+1-len(t.size))...)
	}
}

// touch stamps tenant id on n, adding it (and its bytes) if absent.
func (t *tree) touch(n *node, id int32, now uint64) {
	if i := n.tenantIndex(id); i >= 0 {
		n.tenants[i].last = now
		return
	}
	n.tenants = append(n.tenants, stamp{id: id, last: now})
	t.size[id] += len(n.label)
}

// insert records that text was sent to tenant id.
func (t *tree) insert(text string, id int32) {
	t.growSize(id)
	t.clock++
	now := t.clock
	n := &t.root
	pos := 0
	for pos < len(text) {
		c := text[pos]
		child := n.kids.get(c)
		if child == nil {
			// Clone: the request's text must not be pinned by the tree.
			leaf := newNode(strings.Clone(text[pos:]), n)
			n.kids.put(c, leaf)
			t.touch(leaf, id, now)
			return
		}
		l := commonPrefixLen(child.label, text[pos:])
		if l < len(child.label) {
			// Split child at l: mid takes the shared part and child's
			// tenants (sizes are unchanged: the bytes are just divided).
			mid := newNode(child.label[:l], n)
			mid.kids.put(child.label[l], child)
			mid.tenants = append(mid.tenants, child.tenants...)
			child.label = child.label[l:]
			child.parent = mid
			n.kids.put(c, mid)
			child = mid
		}
		t.touch(child, id, now)
		pos += l
		n = child
	}
}

// removeTenantAt removes tenant id from n and prunes n if it became empty.
// It reports whether n was pruned.
func (t *tree) removeTenantAt(n *node, id int32) bool {
	i := n.tenantIndex(id)
	if i < 0 {
		return false
	}
	n.tenants[i] = n.tenants[len(n.tenants)-1]
	n.tenants = n.tenants[:len(n.tenants)-1]
	t.size[id] -= len(n.label)
	if len(n.tenants) == 0 && n.kids.len() == 0 && n.parent != nil {
		n.parent.kids.del(n.label[0])
		n.parent = nil
		return true
	}
	return false
}

// isLeafFor reports whether n carries id and none of its children does.
func isLeafFor(n *node, id int32) bool {
	if n.tenantIndex(id) < 0 {
		return false
	}
	for _, c := range n.kids.all {
		if c.tenantIndex(id) >= 0 {
			return false
		}
	}
	return true
}

// evictTenant removes tenant id's least recently used leaves until it holds
// at most max bytes.
func (t *tree) evictTenant(id int32, max int) {
	if int(id) >= len(t.size) || t.size[id] <= max {
		return
	}
	var h lruHeap
	var walk func(n *node)
	walk = func(n *node) {
		for _, c := range n.kids.all {
			walk(c)
		}
		if n != &t.root && isLeafFor(n, id) {
			h = append(h, lruItem{n: n, last: n.tenants[n.tenantIndex(id)].last})
		}
	}
	walk(&t.root)
	heap.Init(&h)
	for t.size[id] > max && h.Len() > 0 {
		it := heap.Pop(&h).(lruItem)
		parent := it.n.parent
		t.removeTenantAt(it.n, id)
		if parent != nil && parent != &t.root && isLeafFor(parent, id) {
			heap.Push(&h, lruItem{n: parent, last: parent.tenants[parent.tenantIndex(id)].last})
		}
	}
}

// evict trims every tenant to max bytes.
func (t *tree) evict(max int) {
	for id, sz := range t.size {
		if sz > max {
			t.evictTenant(int32(id), max)
		}
	}
}

// forget removes tenant id from the whole tree.
func (t *tree) forget(id int32) {
	if int(id) >= len(t.size) {
		return
	}
	var walk func(n *node)
	walk = func(n *node) {
		for _, c := range n.kids.all {
			walk(c) // children first, so empty nodes prune bottom-up
		}
		if n != &t.root {
			t.removeTenantAt(n, id)
		}
	}
	walk(&t.root)
	t.size[id] = 0
}

type lruItem struct {
	n    *node
	last uint64
}

type lruHeap []lruItem

func (h lruHeap) Len() int           { return len(h) }
func (h lruHeap) Less(i, j int) bool { return h[i].last < h[j].last }
func (h lruHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *lruHeap) Push(x any)        { *h = append(*h, x.(lruItem)) }
func (h *lruHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}
