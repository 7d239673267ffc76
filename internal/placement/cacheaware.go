package placement

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/sluicegw/sluice/internal/worker"
)

// CacheAware routes a prompt to the worker most likely to hold its prefix in
// KV cache, using one approximate radix tree per model:
//
//  1. If the candidates are imbalanced (max load - min load >
//     BalanceAbsThreshold and max > BalanceRelThreshold * min), pick the
//     least-loaded candidate.
//  2. Otherwise, if the longest prefix of the prompt held by some candidate
//     covers more than CacheThreshold of it, pick that candidate (the
//     least loaded among those holding the deepest matched node).
//  3. Otherwise pick the candidate holding the least text (least loaded on
//     a tie), which spreads new prefixes.
//
// Every pick inserts the prompt for the chosen worker. Matching is on bytes. With
// Config.SessionAffinity a request whose routing key is pinned to a candidate that is not
// overloaded goes there before any of these steps (session.go).
type CacheAware struct {
	cfg   Config
	ci    candIndex
	sess  *sessions // nil: no session affinity
	trees *modelTrees
}

// modelTrees are the trees of cache_aware policies: one per model, whose tenants are workers by
// the ids in ids. The prefill and decode policies of a gateway share them (shareTrees).
type modelTrees struct {
	ids workerIDs
	mu  sync.RWMutex // guards m (the map, not the trees)
	m   map[string]*lockedTree
	// mapped counts the bytes the trees hold outside the heap (bulk.go).
	mapped atomic.Int64
}

type lockedTree struct {
	mu sync.Mutex
	t  tree
}

func newCacheAware(cfg Config) *CacheAware {
	p := &CacheAware{cfg: cfg, sess: newSessions(cfg), trees: &modelTrees{m: make(map[string]*lockedTree)}}
	p.ci.shared = &p.trees.ids // a tree's tenant ids are the trees' own, whoever shares them
	return p
}

// shareTrees makes p keep its prompts in q's trees, before either picks. A PD gateway's prefill and
// decode policies see the same prompts: with one tree, a request's second pick walks the path its
// first has just brought into the CPU's cache, where a second tree was a second walk of cold
// memory (BenchmarkCacheAwarePD), and the text is held once. Each worker is a tenant with its own
// budget and eviction list either way; session tables stay apart (a key is pinned to one worker
// per role).
func (p *CacheAware) shareTrees(q *CacheAware) {
	p.trees = q.trees
	p.ci.shared = &q.trees.ids
}

// treeHolder is a policy that keeps prompts in cache_aware trees: cache_aware itself, and the
// fallback or cache of kv_aware and predicted_latency.
type treeHolder interface{ cacheAware() *CacheAware }

func (p *CacheAware) cacheAware() *CacheAware { return p }

// Name implements Policy.
func (*CacheAware) Name() string { return PolicyCacheAware }

// tree returns model's tree, made if absent.
func (ts *modelTrees) tree(model string) *lockedTree {
	if lt := ts.find(model); lt != nil {
		return lt
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	lt := ts.m[model]
	if lt == nil {
		lt = &lockedTree{}
		lt.t.mapped = &ts.mapped
		ts.m[model] = lt
	}
	return lt
}

// find returns model's tree, or nil.
func (ts *modelTrees) find(model string) *lockedTree {
	ts.mu.RLock()
	defer ts.mu.RUnlock()
	return ts.m[model]
}

func (ts *modelTrees) snapshot() []*lockedTree {
	ts.mu.RLock()
	defer ts.mu.RUnlock()
	out := make([]*lockedTree, 0, len(ts.m))
	for _, lt := range ts.m {
		out = append(out, lt)
	}
	return out
}

// imbalanced reports whether loads are imbalanced and returns the index of
// the least-loaded candidate (the first on a tie).
func (p *CacheAware) imbalanced(cands []*worker.Worker) (bool, int) {
	minIdx := 0
	minLoad := cands[0].Load()
	maxLoad := minLoad
	for i := 1; i < len(cands); i++ {
		l := cands[i].Load()
		if l < minLoad {
			minLoad, minIdx = l, i
		}
		maxLoad = max(maxLoad, l)
	}
	imb := maxLoad-minLoad > p.cfg.BalanceAbsThreshold &&
		float64(maxLoad) > p.cfg.BalanceRelThreshold*float64(minLoad)
	return imb, minIdx
}

// Pick implements Policy.
func (p *CacheAware) Pick(cands []*worker.Worker, req *Request) int {
	if len(cands) == 0 {
		return -1
	}
	i := p.pick(cands, req, p.sess.lookup(req.RoutingKey, cands))
	p.sess.remember(req.RoutingKey, cands[i])
	return i
}

// pick is Pick without the session table: stuck >= 0 is the candidate the request's session is
// pinned to, which is chosen (and learns the prompt) whatever the tree says.
func (p *CacheAware) pick(cands []*worker.Worker, req *Request, stuck int) int {
	if stuck >= 0 && req.Text == "" {
		return stuck
	}
	if len(cands) == 1 && req.Text == "" {
		return 0
	}
	cs := p.ci.lookup(cands)
	imb, least := p.imbalanced(cands)
	if req.Text == "" {
		return least
	}
	lt := p.trees.tree(req.Model)
	lt.mu.Lock()
	defer lt.mu.Unlock()
	t := &lt.t

	chosen := least
	switch {
	case stuck >= 0:
		chosen = stuck
	case len(cands) == 1:
		// The match only ranks candidates; with one there is nothing to rank, and on a tree near its
		// budget the walk is cache misses (about 3 µs a pick). The insert below still records the
		// prompt, so the tree is the same when a second worker joins.
	case !imb:
		chosen = -1
		isCand := func(id int32) bool { return cs.index(id) >= 0 }
		matched, at := t.match(req.Text, isCand)
		if at != noNode && float64(matched)/float64(len(req.Text)) > p.cfg.CacheThreshold {
			var bestLoad int64
			for tid := range t.tenants(at) {
				if i := cs.index(tid); i >= 0 {
					if l := cands[i].Load(); chosen < 0 || l < bestLoad {
						chosen, bestLoad = i, l
					}
				}
			}
		}
		if chosen < 0 {
			chosen = p.smallest(t, cands, cs)
		}
	}
	id := cs.ids[chosen]
	t.insert(req.Text, id)
	if t.size[id] > p.cfg.MaxTreeSize {
		// Eviction runs here, not only every EvictionInterval: at thousands of unique prompts a
		// second the tree would otherwise grow by gigabytes between two runs. It takes the least
		// recently sent leaves off the back of the worker's list, about what this insert added, so
		// no pick waits on a walk of the tree.
		t.evictTenant(id, p.cfg.MaxTreeSize)
	}
	return chosen
}

// smallest returns the candidate holding the least text in t.
func (p *CacheAware) smallest(t *tree, cands []*worker.Worker, cs *candSet) int {
	best, bestSize, bestLoad := 0, -1, int64(0)
	for i, id := range cs.ids {
		sz := 0
		if int(id) < len(t.size) {
			sz = t.size[id]
		}
		l := cands[i].Load()
		if bestSize < 0 || sz < bestSize || (sz == bestSize && l < bestLoad) {
			best, bestSize, bestLoad = i, sz, l
		}
	}
	return best
}

// Evict trims, in every model's tree, each worker's text down to
// MaxTreeSize bytes, least recently used prefixes first, and forgets session keys unused for
// StickyIdle.
func (p *CacheAware) Evict() {
	p.sess.evict()
	for _, lt := range p.trees.snapshot() {
		lt.mu.Lock()
		lt.t.evict(p.cfg.MaxTreeSize)
		lt.mu.Unlock()
	}
}

// Forget implements Forgetter.
func (p *CacheAware) Forget(workerKey string) {
	id, ok := p.ci.lookupID(workerKey)
	if !ok {
		return
	}
	for _, lt := range p.trees.snapshot() {
		lt.mu.Lock()
		lt.t.forget(id)
		lt.mu.Unlock()
	}
}

// Run calls Evict every EvictionInterval until ctx is done.
func (p *CacheAware) Run(ctx context.Context) {
	runEvery(ctx, p.cfg.EvictionInterval, p.Evict)
}

// CachedPrefixLen returns how many leading bytes of text the tree expects
// workerURL to hold in its prefix cache for model: the prefix of text it
// sent there before, as far as eviction has kept it. Admission uses it to
// discount a request's estimated prefill tokens on that worker. It takes the
// model tree's lock for one walk down the text (no insert) and never blocks
// on I/O.
func (p *CacheAware) CachedPrefixLen(model, text, workerURL string) int {
	if text == "" {
		return 0
	}
	id, ok := p.ci.lookupID(workerURL)
	if !ok {
		return 0
	}
	lt := p.trees.find(model)
	if lt == nil {
		return 0
	}
	lt.mu.Lock()
	defer lt.mu.Unlock()
	matched, _ := lt.t.match(text, func(t int32) bool { return t == id })
	return matched
}

// Sessions returns the number of session keys remembered (0 without session affinity).
func (p *CacheAware) Sessions() int { return p.sess.len() }

// TreeSize returns the bytes of text held for workerURL in model's tree.
func (p *CacheAware) TreeSize(model, workerURL string) int {
	id, ok := p.ci.lookupID(workerURL)
	if !ok {
		return 0
	}
	lt := p.trees.find(model)
	if lt == nil {
		return 0
	}
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if int(id) >= len(lt.t.size) {
		return 0
	}
	return lt.t.size[id]
}

var _ interface {
	Policy
	Forgetter
	Evictor
} = (*CacheAware)(nil)
