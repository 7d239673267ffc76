package placement

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"pgregory.net/rapid"

	"github.com/sluicegw/sluice/internal/worker"
)

// checkTree verifies the tree's invariants: every tenant's size equals the
// bytes of the nodes carrying it, a child's tenants are a subset of its
// parent's, no empty non-root node survives, parent links are right, and
// labels are non-empty and keyed by their first byte. And the storage's: a node's
// map-held children and tenants exist only when its inline slots are full, no map
// entry names an unreachable node, every node is reachable or free, and the text's counts are
// exact (checkText).
func checkTree(t interface {
	Helper()
	Fatalf(format string, args ...any)
}, tr *tree) {
	t.Helper()
	if int(tr.count) == 0 {
		return
	}
	sizes := map[int32]int{}
	reachable := map[nodeID]bool{root: true}
	live := 0
	stack := []nodeID{root}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		nd := tr.node(n)
		if len(tr.wide[n]) > 0 && nd.nkid != inlineKid {
			t.Fatalf("node %q: %d wide children with %d inline", tr.label(n), len(tr.wide[n]), nd.nkid)
		}
		if len(tr.extra[n]) > 0 && nd.nten != inlineTen {
			t.Fatalf("node %q: %d extra tenants with %d inline", tr.label(n), len(tr.extra[n]), nd.nten)
		}
		keys := map[byte]bool{}
		for _, c := range tr.children(nil, n) {
			lab := tr.label(c)
			if reachable[c] {
				t.Fatalf("node %d reached twice", c)
			}
			reachable[c] = true
			live += len(lab)
			if tr.node(c).parent != n {
				t.Fatalf("bad parent link under %q", tr.label(n))
			}
			if len(lab) == 0 || keys[lab[0]] || tr.child(n, lab[0]) != c {
				t.Fatalf("child %q badly keyed under %q", lab, tr.label(n))
			}
			var tail [2]byte
			copy(tail[:], lab[1:])
			if tr.node(c).tail != tail {
				t.Fatalf("child %q: tail %q", lab, tr.node(c).tail)
			}
			keys[lab[0]] = true
			ids := map[int32]bool{}
			for id := range tr.tenants(c) {
				if ids[id] {
					t.Fatalf("tenant %d twice on %q", id, lab)
				}
				ids[id] = true
				if n != root && tr.stampOf(n, id) == nil {
					t.Fatalf("tenant %d on %q but not on parent %q", id, lab, tr.label(n))
				}
				sizes[id] += len(lab)
			}
			if len(ids) == 0 {
				t.Fatalf("empty node %q survived", lab)
			}
			stack = append(stack, c)
		}
	}
	for id, sz := range tr.size {
		if sizes[int32(id)] != sz {
			t.Fatalf("tenant %d: size %d, nodes hold %d", id, sz, sizes[int32(id)])
		}
	}
	if len(reachable)+len(tr.free) != int(tr.count) {
		t.Fatalf("%d reachable and %d free of %d nodes", len(reachable), len(tr.free), int(tr.count))
	}
	for n := range tr.wide {
		if !reachable[n] {
			t.Fatalf("wide children of unreachable node %d", n)
		}
	}
	for n := range tr.extra {
		if !reachable[n] {
			t.Fatalf("extra tenants of unreachable node %d", n)
		}
	}
	checkText(t, tr, reachable)
	// Each tenant's list holds exactly its nodes, linked both ways, every node ahead of its
	// descendants (so the last is a leaf for the tenant).
	carriers := map[int32]int{}
	for n := range reachable {
		for id := range tr.tenants(n) {
			carriers[id]++
		}
	}
	for id := range tr.lru {
		pos := map[nodeID]int{}
		prev := noNode
		for n := tr.lru[id].head; n != noNode; n = tr.stampOf(n, int32(id)).next {
			st := tr.stampOf(n, int32(id))
			if st == nil || !reachable[n] || st.prev != prev {
				t.Fatalf("tenant %d: list broken at node %d", id, n)
			}
			if p := tr.node(n).parent; p != root {
				if _, ahead := pos[p]; !ahead {
					t.Fatalf("tenant %d: node %q listed before its parent %q", id, tr.label(n), tr.label(p))
				}
			}
			pos[n] = len(pos)
			prev = n
		}
		if tr.lru[id].tail != prev || len(pos) != carriers[int32(id)] {
			t.Fatalf("tenant %d: list of %d nodes ends at %d, %d nodes carry it", id, len(pos), tr.lru[id].tail, carriers[int32(id)])
		}
	}
}

func newCacheAwareForTest(t testing.TB, mod func(*Config)) *CacheAware {
	t.Helper()
	cfg := DefaultConfig()
	if mod != nil {
		mod(&cfg)
	}
	return mustNew(t, PolicyCacheAware, cfg).(*CacheAware)
}

func TestCacheAwareAffinity(t *testing.T) {
	_, cands := newFleet(t, worker.RolePrefill, "m", 4)
	p := newCacheAwareForTest(t, nil)
	req := func(text string) *Request { return &Request{Model: "m", Text: text, TargetWorker: -1} }

	// Four unrelated prompts spread over the four workers (smallest tree).
	prompts := []string{
		"alpha " + strings.Repeat("a", 200),
		"bravo " + strings.Repeat("b", 200),
		"charlie " + strings.Repeat("c", 200),
		"delta " + strings.Repeat("d", 200),
	}
	owner := map[int]string{}
	for _, pr := range prompts {
		i := p.Pick(cands, req(pr))
		if prev, dup := owner[i]; dup {
			t.Fatalf("prompts %q and %q both went to worker %d", prev[:6], pr[:6], i)
		}
		owner[i] = pr
	}
	// A continuation of each prompt (same prefix, more text) sticks.
	for i, pr := range owner {
		if got := p.Pick(cands, req(pr+" and a follow-up question")); got != i {
			t.Fatalf("continuation of %q went to %d, want %d", pr[:6], got, i)
		}
	}
	// A prompt sharing under 30% of its text with a cached one is not a hit:
	// it goes to the worker holding the least text.
	sizes := make([]int, len(cands))
	for i, w := range cands {
		sizes[i] = p.TreeSize("m", w.URL())
	}
	least := 0
	for i := range sizes {
		if sizes[i] < sizes[least] {
			least = i
		}
	}
	// Share a short prefix with a prompt held by a worker other than the
	// smallest, so that a (wrong) cache hit would be visible.
	other := (least + 1) % len(cands)
	weak := owner[other][:20] + strings.Repeat("z", 200)
	if got := p.Pick(cands, req(weak)); got != least {
		t.Fatalf("weak match went to %d, want smallest tree %d (sizes %v)", got, least, sizes)
	}
	// Other models have their own tree.
	if got := p.TreeSize("other", cands[0].URL()); got != 0 {
		t.Fatalf("other model tree size = %d", got)
	}
	checkTree(t, &p.trees.find("m").t)
}

func TestCacheAwareSpillsOnImbalance(t *testing.T) {
	_, cands := newFleet(t, worker.RolePrefill, "m", 3)
	p := newCacheAwareForTest(t, nil)
	text := strings.Repeat("system prompt ", 50)
	first := p.Pick(cands, &Request{Model: "m", Text: text, TargetWorker: -1})

	// Within the thresholds (diff 60 <= 64) the cache still wins.
	setLoad(t, cands[first], 60)
	if got := p.Pick(cands, &Request{Model: "m", Text: text, TargetWorker: -1}); got != first {
		t.Fatalf("balanced: got %d, want cached %d", got, first)
	}
	// Past both thresholds the least-loaded worker takes it.
	setLoad(t, cands[first], 10)
	least := (first + 1) % 3
	setLoad(t, cands[(first+2)%3], 5)
	got := p.Pick(cands, &Request{Model: "m", Text: text, TargetWorker: -1})
	if got != least {
		t.Fatalf("imbalanced: got %d, want least loaded %d", got, least)
	}
	// The spilled request's text is recorded for the worker that took it.
	if sz := p.TreeSize("m", cands[least].URL()); sz != len(text) {
		t.Fatalf("spilled worker tree size %d, want %d", sz, len(text))
	}
}

func TestCacheAwareRespectsCandidates(t *testing.T) {
	_, cands := newFleet(t, worker.RolePrefill, "m", 3)
	p := newCacheAwareForTest(t, nil)
	text := strings.Repeat("shared context ", 40)
	first := p.Pick(cands, &Request{Model: "m", Text: text, TargetWorker: -1})
	// The cached worker is filtered out (e.g. at capacity): the pick must
	// come from the rest.
	rest := make([]*worker.Worker, 0, 2)
	for i, w := range cands {
		if i != first {
			rest = append(rest, w)
		}
	}
	got := p.Pick(rest, &Request{Model: "m", Text: text, TargetWorker: -1})
	if got < 0 || got >= len(rest) {
		t.Fatalf("Pick over filtered candidates = %d", got)
	}
	// Now both the first and rest[got] hold the text.
	if p.TreeSize("m", rest[got].URL()) != len(text) || p.TreeSize("m", cands[first].URL()) != len(text) {
		t.Fatal("text not recorded for the chosen worker")
	}
	// Empty text: least loaded, no insert.
	setLoad(t, rest[0], 3)
	if got := p.Pick(rest, &Request{Model: "m", TargetWorker: -1}); got != 1 {
		t.Fatalf("empty text picked %d, want least loaded 1", got)
	}
}

func TestCacheAwareEvictionAndForget(t *testing.T) {
	_, cands := newFleet(t, worker.RolePrefill, "m", 2)
	const max = 2000
	p := newCacheAwareForTest(t, func(c *Config) { c.MaxTreeSize = max; c.CacheThreshold = 0.5 })
	rng := rand.New(rand.NewPCG(1, 2))
	prompt := func(i int) string {
		var b strings.Builder
		fmt.Fprintf(&b, "user-%03d:", i)
		for range 100 {
			b.WriteByte(byte('a' + rng.IntN(26)))
		}
		return b.String()
	}
	// Inserted past the budget behind the picks' back (a pick trims at once), so Evict has work.
	id := p.ci.lookup(cands[:1]).ids[0]
	lt := p.trees.tree("m")
	var texts []string
	for i := range 100 {
		texts = append(texts, prompt(i))
		lt.t.insert(texts[i], id)
	}
	u := cands[0].URL()
	if got := p.TreeSize("m", u); got <= max {
		t.Fatalf("tree size before eviction = %d, want > %d", got, max)
	}
	p.Evict()
	if got := p.TreeSize("m", u); got > max || got < max/2 {
		t.Fatalf("tree size after eviction = %d, want in [%d, %d]", got, max/2, max)
	}
	checkTree(t, &lt.t)
	// LRU: the newest prompt survived, the oldest did not.
	isW0 := func(id int32) bool { return id == 0 }
	if m, _ := lt.t.match(texts[99], isW0); m != len(texts[99]) {
		t.Fatalf("newest prompt matched %d/%d after eviction", m, len(texts[99]))
	}
	if m, _ := lt.t.match(texts[0], isW0); m == len(texts[0]) {
		t.Fatal("oldest prompt survived eviction")
	}

	p.Forget(u)
	if got := p.TreeSize("m", u); got != 0 {
		t.Fatalf("size after Forget = %d", got)
	}
	checkTree(t, &lt.t)
	if n := len(lt.t.children(nil, root)); n != 0 {
		t.Fatalf("tree not empty after forgetting its only worker: %d children", n)
	}
	used := 0
	for _, c := range lt.t.txt.chunks {
		used += len(c)
	}
	if fp, c := lt.t.txt.footprint(), lt.t.txt.chunkSize(); used != 0 || fp > 2*c {
		t.Fatalf("forgetting every worker left %d bytes of text in %d, want none in at most two chunks of %d", used, fp, c)
	}
	p.Forget("http://never-seen:1") // no-op
}

func TestCacheAwareConcurrent(t *testing.T) {
	_, cands := newFleet(t, worker.RolePrefill, "m", 8)
	p := newCacheAwareForTest(t, func(c *Config) { c.MaxTreeSize = 5000 })
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 300 {
				text := fmt.Sprintf("conversation %d turn %d %s", g, i%7, strings.Repeat("q", i%50))
				if got := p.Pick(cands[g%3:], &Request{Model: fmt.Sprint("m", i%2), Text: text, TargetWorker: -1}); got < 0 || got >= len(cands)-g%3 {
					t.Errorf("Pick = %d", got)
					return
				}
				if i%100 == 0 {
					p.Evict()
				}
			}
		})
	}
	wg.Go(func() { p.Forget(cands[7].URL()) })
	wg.Wait()
	for _, lt := range p.trees.snapshot() {
		checkTree(t, &lt.t)
	}
}

// Property: any sequence of inserts, evictions and forgets keeps the
// invariants, and eviction always ends at or under budget.
func TestTreeInvariantsProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var tr tree
		// Chunks of text smaller than some labels: labels spread over chunks, some get their own,
		// and chunks turn sparse, are swept and freed.
		tr.txt.size = rapid.IntRange(4, 16).Draw(rt, "chunk")
		// Six letters: a node can have more children than it keeps inline.
		alphabet := rapid.SampledFrom([]byte("abcdef"))
		ops := rapid.IntRange(1, 60).Draw(rt, "ops")
		for range ops {
			switch rapid.IntRange(0, 9).Draw(rt, "op") {
			case 0:
				budget := rapid.IntRange(0, 30).Draw(rt, "budget")
				tr.evict(budget)
				for id, sz := range tr.size {
					if sz > budget {
						rt.Fatalf("tenant %d size %d > budget %d", id, sz, budget)
					}
				}
			case 1:
				tr.forget(int32(rapid.IntRange(0, 3).Draw(rt, "forget")))
			default:
				text := string(rapid.SliceOfN(alphabet, 1, 12).Draw(rt, "text"))
				tr.insert(text, int32(rapid.IntRange(0, 3).Draw(rt, "tenant")))
			}
			checkTree(rt, &tr)
		}
	})
}

// Property: a match is the longest common prefix of the text with any text inserted (one tenant, no
// eviction), over labels short enough to be compared from the node and longer ones.
func TestMatchIsLongestPrefixProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var tr tree
		str := rapid.StringOfN(rapid.RuneFrom([]rune("ab ")), 1, 12, -1)
		texts := rapid.SliceOfN(str, 1, 20).Draw(rt, "texts")
		for _, s := range texts {
			tr.insert(s, 0)
		}
		q := str.Draw(rt, "query")
		want := 0
		for _, s := range texts {
			want = max(want, commonPrefixLen([]byte(s), q))
		}
		if got, _ := tr.match(q, func(int32) bool { return true }); got != want {
			rt.Fatalf("match(%q) = %d, want %d", q, got, want)
		}
	})
}

// checkText verifies the text's counts against the reachable nodes: each chunk's live bytes are
// those its labels span, a free slot is empty and listed once, and sparse counts the chunks under
// half live other than the current one.
func checkText(t interface {
	Helper()
	Fatalf(format string, args ...any)
}, tr *tree, reachable map[nodeID]bool) {
	t.Helper()
	x := &tr.txt
	spans := make([]int, len(x.chunks))
	for n := range reachable {
		if nd := tr.node(n); nd.n > 0 {
			spans[nd.off>>offShift] += int(nd.n)
		}
	}
	free := map[int]bool{}
	for _, c := range x.slots {
		if free[c] || x.chunks[c] != nil {
			t.Fatalf("free slot %d listed twice or holding a chunk", c)
		}
		free[c] = true
	}
	sparse := 0
	for c := range x.chunks {
		if x.live[c] != spans[c] {
			t.Fatalf("chunk %d: live %d, labels span %d", c, x.live[c], spans[c])
		}
		if x.chunks[c] == nil && !free[c] {
			t.Fatalf("chunk %d is empty but not a free slot", c)
		}
		if x.chunks[c] != nil && c != x.cur && (spans[c] == 0 || 2*spans[c] < len(x.chunks[c])) {
			if spans[c] == 0 {
				t.Fatalf("chunk %d holds no label and is not freed", c)
			}
			sparse++
		}
	}
	if sparse != x.sparse {
		t.Fatalf("%d sparse chunks, counted %d", sparse, x.sparse)
	}
}

// TestTextSweptNotCopied: a tree held at its budget never copies its text whole. Each insert copies
// at most its sweep's share (sweepPerInsert labels), no chunk is ever grown, and the sweep keeps
// the text within about twice its live bytes as chunks free up.
func TestTextSweptNotCopied(t *testing.T) {
	var tr tree
	tr.txt.size = 1024
	const budget = 16000
	words := threeLetterWords(rand.New(rand.NewPCG(9, 9)))
	held := map[*byte]int{} // each chunk's buffer and its capacity when first seen
	freed := 0
	for i := range 20000 {
		before := tr.txt.moved
		tr.insert(words(), 0)
		tr.evictTenant(0, budget)
		if d := tr.txt.moved - before; d > sweepPerInsert*260 {
			t.Fatalf("insert %d copied %d bytes of text", i, d)
		}
		seen := map[*byte]bool{}
		for _, c := range tr.txt.chunks {
			if c == nil {
				continue
			}
			p := unsafe.SliceData(c)
			seen[p] = true
			if k, ok := held[p]; ok && k != cap(c) {
				t.Fatalf("insert %d: a chunk grew from %d to %d bytes", i, k, cap(c))
			}
			held[p] = cap(c)
		}
		for p := range held {
			if !seen[p] && p != unsafe.SliceData(tr.txt.spare) {
				delete(held, p)
				freed++
			}
		}
		if i > 2000 {
			if fp := tr.txt.footprint(); fp > 2*budget+8*tr.txt.size {
				t.Fatalf("insert %d: text holds %d bytes for %d live", i, fp, tr.size[0])
			}
		}
		if i%1000 == 0 {
			checkTree(t, &tr)
		}
	}
	checkTree(t, &tr)
	if tr.txt.moved == 0 || freed == 0 {
		t.Fatalf("the sweep moved %d bytes and %d chunks were freed: nothing was swept", tr.txt.moved, freed)
	}
}

// TestNodesNeverMove: a node keeps its address as the tree grows past many chunks of nodes, so
// growth copies nothing, and the tree stays whole across the chunks' boundaries.
func TestNodesNeverMove(t *testing.T) {
	var tr tree
	words := threeLetterWords(rand.New(rand.NewPCG(4, 4)))
	addrs := map[nodeID]*node{}
	for i := range 12000 {
		tr.insert(words(), int32(i%3))
		if i%1000 == 0 {
			for n := range tr.count {
				if a, ok := addrs[n]; ok && a != tr.node(n) {
					t.Fatalf("insert %d: node %d moved", i, n)
				}
				addrs[n] = tr.node(n)
			}
		}
	}
	if tr.count < 3<<nodeChunkBits {
		t.Fatalf("%d nodes: the tree did not grow past three chunks", tr.count)
	}
	checkTree(t, &tr)
}

// TestEvictSweepsWithoutInserts: text that forget left sparse is freed by the periodic eviction
// when no insert comes to sweep it.
func TestEvictSweepsWithoutInserts(t *testing.T) {
	var tr tree
	tr.txt.size = 1024
	words := threeLetterWords(rand.New(rand.NewPCG(3, 3)))
	for i := range 400 {
		tr.insert(words(), int32(i%4))
	}
	before := tr.txt.footprint()
	for id := range int32(3) {
		tr.forget(id + 1)
	}
	if tr.txt.sparse == 0 {
		t.Fatal("forgetting three tenants of four left no chunk sparse: nothing to sweep")
	}
	tr.evict(1 << 30)
	checkTree(t, &tr)
	live := tr.size[0]
	if fp := tr.txt.footprint(); tr.txt.sparse != 0 || fp > 2*live+2*tr.txt.size {
		t.Fatalf("after the eviction %d chunks are sparse and the text holds %d bytes (%d before) for %d live",
			tr.txt.sparse, fp, before, live)
	}
}

// TestTreeManyTenants: tenants past a node's inline ones are matched, survive a split of the node,
// and are evicted and forgotten like the others.
func TestTreeManyTenants(t *testing.T) {
	var tr tree
	for id := range int32(5) {
		tr.insert("abcdef", id)
	}
	tr.insert("abcxyz", 0) // splits "abcdef" at "abc"
	checkTree(t, &tr)
	for id := range int32(5) {
		only := func(x int32) bool { return x == id }
		if m, _ := tr.match("abcdef", only); m != 6 {
			t.Fatalf("tenant %d matched %d of \"abcdef\", want 6", id, m)
		}
		if m, _ := tr.match("abcxyz", only); id != 0 && m != 3 {
			t.Fatalf("tenant %d matched %d of \"abcxyz\", want 3", id, m)
		}
	}
	tr.forget(4)
	tr.evictTenant(3, 0)
	checkTree(t, &tr)
	if m, _ := tr.match("abcdef", func(x int32) bool { return x >= 3 }); m != 0 {
		t.Fatalf("forgotten and evicted tenants still match %d bytes", m)
	}
	if m, _ := tr.match("abcdef", func(x int32) bool { return x == 2 }); m != 6 {
		t.Fatalf("tenant 2 matched %d after others left, want 6", m)
	}
}

// Property: a node's children answer as a map does through any sequence of sets and deletes,
// past the inline ones too.
func TestChildrenProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var tr tree
		tr.insert("x", 0)
		model := map[byte]nodeID{}
		key := rapid.ByteRange('a', 'j')
		for range rapid.IntRange(1, 80).Draw(rt, "ops") {
			c := key.Draw(rt, "key")
			if rapid.IntRange(0, 2).Draw(rt, "op") == 0 {
				tr.delChild(root, c)
				delete(model, c)
			} else {
				n := nodeID(rapid.IntRange(1, 1000).Draw(rt, "node"))
				tr.setChild(root, c, n)
				model[c] = n
			}
			tr.setChild(root, 'x', 1) // the inserted node stays
			model['x'] = 1
			for c := byte('a'); c <= 'x'; c++ {
				want, ok := model[c]
				if !ok {
					want = noNode
				}
				if got := tr.child(root, c); got != want {
					rt.Fatalf("child(%q) = %d, want %d", c, got, want)
				}
			}
			if got := len(tr.children(nil, root)); got != len(model) {
				rt.Fatalf("%d children, want %d", got, len(model))
			}
			if len(tr.wide[root]) > 0 && tr.node(root).nkid != inlineKid {
				rt.Fatalf("wide children with %d inline", tr.node(root).nkid)
			}
		}
	})
}

// TestCacheAwareTreeBoundedBetweenEvictions: with no eviction run at all, a worker's text never
// stays past the budget (a pick that takes it past trims it back, least recently sent first), and the
// prompt just sent survives the trim.
func TestCacheAwareTreeBoundedBetweenEvictions(t *testing.T) {
	_, cands := newFleet(t, worker.RolePrefill, "m", 1)
	const budget = 2000
	p := newCacheAwareForTest(t, func(c *Config) { c.MaxTreeSize = budget })
	u := cands[0].URL()
	trims, sent := 0, 0
	prev := 0
	for i := range 500 {
		text := fmt.Sprintf("user-%04d: %s", i, strings.Repeat(string(rune('a'+i%26)), 90))
		p.Pick(cands, &Request{Model: "m", Text: text, TargetWorker: -1})
		sent += len(text)
		got := p.TreeSize("m", u)
		if got > budget {
			t.Fatalf("pick %d: tree size %d, want <= %d", i, got, budget)
		}
		if got < prev {
			trims++
			lt := p.trees.find("m")
			if m, _ := lt.t.match(text, func(id int32) bool { return true }); m != len(text) {
				t.Fatalf("pick %d: the prompt just sent matched %d/%d after the trim", i, m, len(text))
			}
			checkTree(t, &lt.t)
		}
		prev = got
	}
	if trims == 0 || sent <= budget {
		t.Fatalf("%d trims of %d bytes sent: the budget was never exceeded, the test proves nothing", trims, sent)
	}
	// The text never grows by copying: 50 KB sent fit in its first chunk.
	if fp, c := p.trees.find("m").t.txt.footprint(), p.trees.find("m").t.txt.chunkSize(); fp > c {
		t.Fatalf("text holds %d bytes after %d bytes sent, want one chunk of %d", fp, sent, c)
	}
}

// newPDFleet registers np prefill and nd decode workers serving model m.
func newPDFleet(tb testing.TB, np, nd int) (prefill, decode []*worker.Worker) {
	tb.Helper()
	reg := worker.NewRegistry(worker.RegistryOptions{StartReady: true})
	for i := range np + nd {
		role, url := worker.RolePrefill, fmt.Sprintf("http://p%02d:8000", i)
		if i >= np {
			role, url = worker.RoleDecode, fmt.Sprintf("http://d%02d:8000", i-np)
		}
		if _, err := reg.Add(worker.Spec{URL: url, Role: role, Models: []string{"m"}}); err != nil {
			tb.Fatal(err)
		}
	}
	snap := reg.Snapshot()
	return snap.Candidates(worker.RolePrefill, "m"), snap.Candidates(worker.RoleDecode, "m")
}

// TestSetSharesTreesAcrossRoles: a PD gateway's cache_aware policies keep one tree per model, and
// each role still matches only its own workers' text: the prompt the prefill pick recorded is no
// decode worker's, and each worker is forgotten alone.
func TestSetSharesTreesAcrossRoles(t *testing.T) {
	set, err := NewSet(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	pre, dec := set.Prefill.(*CacheAware), set.Decode.(*CacheAware)
	if pre.trees != dec.trees {
		t.Fatal("the prefill and decode policies keep separate trees")
	}
	pc, dc := newPDFleet(t, 1, 2)
	prompt := strings.Repeat("a system prompt and a question ", 8)
	other := strings.Repeat("an unrelated conversation ", 4)
	if got := dec.Pick(dc[:1], &Request{Model: "m", Text: other, TargetWorker: -1}); got != 0 {
		t.Fatalf("decode pick of one = %d", got)
	}
	if got := pre.Pick(pc, &Request{Model: "m", Text: prompt, TargetWorker: -1}); got != 0 {
		t.Fatalf("prefill pick of one = %d", got)
	}
	// No decode worker was sent the prompt: the one holding least text takes it, not one that
	// shares an id or a tree path with the prefill worker.
	if got := dec.Pick(dc, &Request{Model: "m", Text: prompt, TargetWorker: -1}); got != 1 {
		t.Fatalf("decode pick = %d, want 1 (the decode worker holding no text)", got)
	}
	if got := dec.Pick(dc, &Request{Model: "m", Text: prompt + "and another", TargetWorker: -1}); got != 1 {
		t.Fatalf("decode pick of the continuation = %d, want 1 (the worker that was sent the prompt)", got)
	}
	// Each policy answers for its own workers only, as with a tree of its own: the prefill policy's
	// view of a decode worker's cache (local prefill asks it) is what it was, nothing.
	for _, tc := range []struct {
		p    *CacheAware
		w    *worker.Worker
		want int
	}{
		{pre, pc[0], len(prompt)}, {dec, dc[0], len(other)}, {dec, dc[1], len(prompt) + len("and another")},
		{dec, pc[0], 0}, {pre, dc[0], 0}, {pre, dc[1], 0},
	} {
		if got := tc.p.TreeSize("m", tc.w.URL()); got != tc.want {
			t.Fatalf("TreeSize(%s) = %d, want %d", tc.w.URL(), got, tc.want)
		}
	}
	if got := pre.CachedPrefixLen("m", prompt, dc[1].URL()); got != 0 {
		t.Fatalf("the prefill policy expects decode worker 1 to hold %d bytes of the prompt, want 0", got)
	}
	set.Forget(dc[1])
	if got, want := pre.TreeSize("m", pc[0].URL()), len(prompt); got != want {
		t.Fatalf("forgetting a decode worker left the prefill worker %d bytes, want %d", got, want)
	}
	if got := dec.TreeSize("m", dc[1].URL()); got != 0 {
		t.Fatalf("forgotten decode worker holds %d bytes", got)
	}
	checkTree(t, &pre.trees.find("m").t)
}
