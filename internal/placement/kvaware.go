package placement

import (
	"context"

	"github.com/sluicegw/sluice/internal/worker"
)

// PolicyKVAware names the kv_aware policy; New builds it over Config.KVIndex.
const PolicyKVAware = "kv_aware"

// PrefixIndex is what kv_aware reads: how much of a prompt each engine rank holds in its KV cache,
// by the engine's own events (internal/kvevents.Index implements it). Both methods must be cheap:
// Pick calls them under admission's lock.
type PrefixIndex interface {
	// MatchedPrefix reports the leading blocks and tokens of tokenIDs that rank of the engine at
	// url holds (rank 0 for an engine without data-parallel ranks).
	MatchedPrefix(url string, rank int, tokenIDs []uint32) (blocks, tokens int)
	// Tracks reports whether events are being received for the engine at url.
	Tracks(url string) bool
}

// KVAware routes a prompt to the candidate whose engine holds the longest prefix of its tokens, by
// the engines' KV-cache events rather than a guess (SMG's event-driven mode, llm-d's precise
// prefix-cache scorer). The steps mirror cache_aware's so the two weigh load the same way:
//
//  1. If the candidates are imbalanced (cache_aware's thresholds), pick the least-loaded one.
//  2. Otherwise, if some candidate holds more than CacheThreshold of the prompt's tokens, pick the
//     one holding the most (the least loaded on a tie).
//  3. Otherwise pick the least-loaded candidate: with no cached prefix anywhere, load is what is
//     left to weigh.
//
// It falls back to cache_aware (its own instance, so its trees stay warm) for a request without
// token ids (no tokenizer for its model) and when no candidate's events are tracked (no events
// configured for the model's workers). With Config.SessionAffinity a request whose routing key is
// pinned to a candidate that is not overloaded goes there first, whichever of the two decides
// otherwise (session.go).
type KVAware struct {
	cfg      Config
	index    PrefixIndex
	fallback *CacheAware // without sessions: kv_aware keeps its own, for both paths
	sess     *sessions
}

func newKVAware(cfg Config, index PrefixIndex) *KVAware {
	fb := cfg
	fb.SessionAffinity = false
	return &KVAware{cfg: cfg, index: index, fallback: newCacheAware(fb), sess: newSessions(cfg)}
}

// NewKVAware builds kv_aware over index; a nil index always falls back to cache_aware.
func NewKVAware(cfg Config, index PrefixIndex) (*KVAware, error) {
	cfg, err := cfg.normalized()
	if err != nil {
		return nil, err
	}
	return newKVAware(cfg, index), nil
}

// Name implements Policy.
func (*KVAware) Name() string { return PolicyKVAware }

// Pick implements Policy.
func (p *KVAware) Pick(cands []*worker.Worker, req *Request) int {
	if len(cands) == 0 {
		return -1
	}
	i := p.pick(cands, req, p.sess.lookup(req.RoutingKey, cands))
	p.sess.remember(req.RoutingKey, cands[i])
	return i
}

// pick is Pick without the session table; stuck >= 0 is the candidate the session is pinned to.
func (p *KVAware) pick(cands []*worker.Worker, req *Request, stuck int) int {
	if p.index == nil || len(req.TokenIDs) == 0 || !p.tracksAny(cands) {
		return p.fallback.pick(cands, req, stuck)
	}
	if stuck >= 0 {
		return stuck
	}
	imb, least := p.fallback.imbalanced(cands)
	if imb {
		return least
	}
	best, bestTokens := -1, 0
	for i, w := range cands {
		_, tokens := p.index.MatchedPrefix(w.URL(), max(w.Rank(), 0), req.TokenIDs)
		if tokens > bestTokens || (tokens == bestTokens && best >= 0 && w.Load() < cands[best].Load()) {
			best, bestTokens = i, tokens
		}
	}
	if best >= 0 && bestTokens > 0 && float64(bestTokens)/float64(len(req.TokenIDs)) > p.cfg.CacheThreshold {
		return best
	}
	return least
}

func (p *KVAware) tracksAny(cands []*worker.Worker) bool {
	for _, w := range cands {
		if p.index.Tracks(w.URL()) {
			return true
		}
	}
	return false
}

// CachedTokens is how many leading tokens of tokenIDs the engine of w holds by its events: the best
// of its ranks (admission charges a worker per engine, not per rank). It takes the index's read
// locks only, so admission may call it under its own lock.
func (p *KVAware) CachedTokens(w *worker.Worker, tokenIDs []uint32) int {
	if p.index == nil || w == nil || len(tokenIDs) == 0 {
		return 0
	}
	ranks := w.Ranks()
	if len(ranks) == 0 {
		_, n := p.index.MatchedPrefix(w.URL(), max(w.Rank(), 0), tokenIDs)
		return n
	}
	best := 0
	for _, r := range ranks {
		_, n := p.index.MatchedPrefix(w.URL(), max(r.Rank(), 0), tokenIDs)
		best = max(best, n)
	}
	return best
}

// CachedPrefixLen is the fallback's estimate for a request routed by text (no token ids), in
// characters, as cache_aware reports it.
func (p *KVAware) CachedPrefixLen(model, text, workerURL string) int {
	return p.fallback.CachedPrefixLen(model, text, workerURL)
}

// Forget implements Forgetter (the fallback's trees; the index follows the registry itself).
func (p *KVAware) Forget(workerKey string) { p.fallback.Forget(workerKey) }

func (p *KVAware) cacheAware() *CacheAware { return p.fallback }

// Evict implements Evictor (the fallback's trees and idle session keys).
func (p *KVAware) Evict() {
	p.sess.evict()
	p.fallback.Evict()
}

// Run calls Evict every EvictionInterval until ctx ends.
func (p *KVAware) Run(ctx context.Context) { runEvery(ctx, p.cfg.EvictionInterval, p.Evict) }
