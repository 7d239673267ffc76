package placement

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicegw/sluice/internal/placement/predict"
	"github.com/sluicegw/sluice/internal/worker"
)

// PolicyPredictedLatency names the predicted_latency policy.
const PolicyPredictedLatency = "predicted_latency"

// The features of a pick, in the model's order (predict.Model: feature 0 is the intercept's 1).
// Sizes are in thousands of prompt characters (a request without text counts 4 per token id), the
// unit the gateway can measure for every request; the model's slopes absorb the ratio to tokens.
const (
	featConst    = iota
	featUncached // the prompt less the prefix the worker is expected to hold (its own cache tree)
	featQueued   // uncached prompt this policy sent to the worker that has not yet reached its first token
	featLoad     // the worker's running + waiting requests (worker.Worker.EstimatedEngineLoad)
	// A PD pair's decode side (0 for a regular worker): the prefill worker's model learns what its
	// partner adds to the TTFT, the KV transfer and the decode's first step (pairs.go).
	featDecodeLoad // the decode partner's running + waiting requests
	featDistance   // the pair's topology distance as a level: 0 node or unknown, 1 rack, 2 zone, 3 cross zone
	nFeatures
)

// The model's sizing: a window of the last 256 TTFTs of a worker, enough to span a few seconds of
// traffic at the loads the model matters for; 16 samples before the model is trusted (4 per
// feature); a ridge of 1e-3 (features are O(1)-O(100), so it only steadies collinear ones).
const (
	modelWindow     = 256
	modelMinSamples = 16
	modelLambda     = 1e-3
)

func modelConfig() predict.Config {
	return predict.Config{Dim: nFeatures, Window: modelWindow, MinSamples: modelMinSamples, Lambda: modelLambda}
}

// itlModelConfig sizes the inter-token latency model: one slope, on the worker's load (an engine's
// step time grows with its decode batch), the rest as the TTFT model's.
func itlModelConfig() predict.Config {
	return predict.Config{Dim: 2, Window: modelWindow, MinSamples: modelMinSamples, Lambda: modelLambda}
}

// refreshAfter is how long a worker's model may go without an observation while it is a candidate:
// then the next pick goes to it, so a worker the model judged slow once is measured again rather
// than starved on an old fit (one request per worker per interval).
const refreshAfter = 10 * time.Second

// PredictedLatency routes a request to the candidate with the lowest predicted time to first token.
// Each worker has its own online linear model (package predict) of TTFT on four features known at
// pick time: the prompt's uncached part on that worker (a cache_aware tree of what was sent where),
// the uncached prompt already sent there and not yet at its first token, and the worker's load. The
// dispatcher reports each pick's measured TTFT (Picks) and the model refits. A cold model (too few
// observations) gets picks, least loaded first, until its observations and picks in flight make up
// its samples; when every candidate is cold and waiting for its samples the pick is least_load's. A
// candidate whose model has seen nothing for refreshAfter gets the next pick, so a worker judged
// slow once is measured again rather than starved on an old fit.
//
// Pick reads each model's coefficients atomically and takes its cache tree's lock for one walk per
// candidate and one insert; it never blocks on a refit or on I/O.
type PredictedLatency struct {
	cfg     Config
	cache   *CacheAware // without sessions: only its trees are used
	workers sync.Map    // Worker.Key -> *predState
}

// predState is what the policy knows of one worker.
type predState struct {
	model    *predict.Model // TTFT, seconds
	itl      *predict.Model // mean inter-token latency, seconds, on [1, load]
	queued   atomic.Int64   // characters of uncached prompt picked here, not yet at their first token
	open     atomic.Int64   // picks here not yet at their first token (nor ended)
	lastSeen atomic.Int64   // unix nanoseconds of the last observation or refresh pick
}

func newPredictedLatency(cfg Config) *PredictedLatency {
	fb := cfg
	fb.SessionAffinity = false
	return &PredictedLatency{cfg: cfg, cache: newCacheAware(fb)}
}

// NewPredictedLatency builds the policy from cfg (Config.Now is its clock).
func NewPredictedLatency(cfg Config) (*PredictedLatency, error) {
	cfg, err := cfg.normalized()
	if err != nil {
		return nil, err
	}
	return newPredictedLatency(cfg), nil
}

// Name implements Policy.
func (*PredictedLatency) Name() string { return PolicyPredictedLatency }

func (p *PredictedLatency) state(key string) *predState {
	if s, ok := p.workers.Load(key); ok {
		return s.(*predState)
	}
	m, err := predict.New(modelConfig())
	if err != nil {
		panic(err) // modelConfig is built from this package's constants, which every policy test exercises
	}
	itl, err := predict.New(itlModelConfig())
	if err != nil {
		panic(err) // likewise
	}
	s, _ := p.workers.LoadOrStore(key, &predState{model: m, itl: itl})
	return s.(*predState)
}

// Pick implements Policy.
func (p *PredictedLatency) Pick(cands []*worker.Worker, req *Request) int {
	if len(cands) == 0 {
		return -1
	}
	now := p.cfg.Now()
	size := promptSize(req)
	best, y, paired := p.choosePartner(cands, req)
	if !paired {
		best, y = p.choose(cands, req, size, now)
	}
	st := p.state(cands[best].Key())
	x := p.features(st, cands[best], req, size)
	if req.Partners != nil {
		if _, dw, ok := p.bestPair(st, x, cands[best], req.Partners(cands[best])); ok {
			pairFeatures(&x, cands[best], dw) // provisional: Picks.Paired sets the partner chosen
		}
	}
	p.cache.learn(req.Model, req.Text, cands, best)
	req.Picks.record(pickRecord{policy: p, st: st, worker: cands[best].URL(), x: x,
		work: int64(x[featUncached] * 1000), predicted: y, at: now})
	return best
}

// choose returns the candidate to pick and its predicted TTFT in seconds (-1: none). In order: a
// candidate whose model went stale (refreshAfter); the least-loaded cold candidate still short of
// samples counting its picks in flight, so each cold model gets its samples and no more at once; the
// lowest prediction; least_load when every model is cold and has its samples on the way.
func (p *PredictedLatency) choose(cands []*worker.Worker, req *Request, size int, now time.Time) (int, float64) {
	best, within := bestPick{i: -1}, bestPick{i: -1} // the lowest prediction of all, and of those within the ITL SLO
	cold, coldLoad := -1, int64(0)
	for i, w := range cands {
		st := p.state(w.Key())
		n := st.model.Samples()
		if n >= int64(modelMinSamples) && now.UnixNano()-st.lastSeen.Load() > int64(refreshAfter) {
			st.lastSeen.Store(now.UnixNano()) // one refresh pick per interval, not one per pick until it answers
			return i, -1
		}
		x := p.features(st, w, req, size)
		y, ok := st.model.Predict(x[:])
		if ok && req.Partners != nil {
			if py, _, paired := p.bestPair(st, x, w, req.Partners(w)); paired {
				y = py // the best pair this worker can form; without a partner, its own prediction
			}
		}
		if !ok {
			if l := w.EstimatedEngineLoad(); n+st.open.Load() < int64(modelMinSamples) && (cold < 0 || l < coldLoad) {
				cold, coldLoad = i, l
			}
			continue
		}
		best.offer(i, y, x[featLoad])
		if p.withinSLO(st, x[featLoad]) {
			within.offer(i, y, x[featLoad])
		}
	}
	switch {
	case cold >= 0:
		return cold, -1
	case within.i >= 0:
		return within.i, within.y
	case best.i >= 0:
		return best.i, best.y
	}
	return LeastLoad{}.Pick(cands, req), -1
}

// bestPick keeps the lowest predicted TTFT offered, the lower load on a tie; i is -1 until an offer.
type bestPick struct {
	i       int
	y, load float64
	set     bool
}

func (b *bestPick) offer(i int, y, load float64) {
	if !b.set || y < b.y || (y == b.y && load < b.load) {
		*b = bestPick{i: i, y: y, load: load, set: true}
	}
}

// withinSLO reports whether the worker's predicted inter-token latency at this load is within the
// ITL SLO: true without an SLO or while its ITL model is cold (nothing says it is not).
func (p *PredictedLatency) withinSLO(st *predState, load float64) bool {
	if p.cfg.ITLSLO <= 0 {
		return true
	}
	itl, ok := st.itl.Predict([]float64{1, load})
	return !ok || itl <= p.cfg.ITLSLO.Seconds()
}

// promptSize is the prompt's size in characters (4 per token id without text).
func promptSize(req *Request) int {
	if req.Text != "" {
		return len(req.Text)
	}
	return 4 * len(req.TokenIDs)
}

// features are w's features for req (size: promptSize).
func (p *PredictedLatency) features(st *predState, w *worker.Worker, req *Request, size int) [nFeatures]float64 {
	cached := 0
	switch {
	case req.Text != "":
		cached = p.cache.CachedPrefixLen(req.Model, req.Text, w.Key())
	case p.cfg.KVIndex != nil && len(req.TokenIDs) > 0:
		_, n := p.cfg.KVIndex.MatchedPrefix(w.URL(), max(w.Rank(), 0), req.TokenIDs)
		cached = 4 * n
	}
	var x [nFeatures]float64
	x[featConst] = 1
	x[featUncached] = float64(max(size-cached, 0)) / 1000
	x[featQueued] = float64(st.queued.Load()) / 1000
	x[featLoad] = float64(w.EstimatedEngineLoad())
	return x
}

// Predict returns the TTFT the model of w predicts for req now; ok is false while it is cold.
func (p *PredictedLatency) Predict(w *worker.Worker, req *Request) (time.Duration, bool) {
	st := p.state(w.Key())
	x := p.features(st, w, req, promptSize(req))
	y, ok := st.model.Predict(x[:])
	return time.Duration(y * float64(time.Second)), ok
}

// Lowest returns the lowest TTFT the models of the routable candidates predict for req now, for
// early rejection. ok is false when a routable candidate's model is cold: that worker may be the fast
// one, and nothing is refused on a guess.
func (p *PredictedLatency) Lowest(cands []*worker.Worker, req *Request, now time.Time) (d time.Duration, ok bool) {
	size, lowest := promptSize(req), -1.0
	for _, w := range cands {
		if !w.Routable(now) {
			continue
		}
		st := p.state(w.Key())
		x := p.features(st, w, req, size)
		y, warm := st.model.Predict(x[:])
		if !warm {
			return 0, false
		}
		if lowest < 0 || y < lowest {
			lowest = y
		}
	}
	if lowest < 0 {
		return 0, false
	}
	return time.Duration(lowest * float64(time.Second)), true
}

// observe feeds one measured TTFT (seconds) of a pick to its worker's model.
func (p *PredictedLatency) observe(st *predState, x [nFeatures]float64, ttft float64) {
	st.model.Observe(x[:], ttft)
	st.lastSeen.Store(p.cfg.Now().UnixNano())
}

// observeITL feeds one measured inter-token latency (seconds) of a pick made at load.
func (p *PredictedLatency) observeITL(st *predState, load, itl float64) {
	st.itl.Observe([]float64{1, load}, itl)
}

// Forget implements Forgetter: the worker's model and its prompts in the cache trees.
func (p *PredictedLatency) Forget(workerKey string) {
	p.workers.Delete(workerKey)
	p.cache.Forget(workerKey)
}

// Evict implements Evictor (the cache trees).
func (p *PredictedLatency) Evict() { p.cache.Evict() }

func (p *PredictedLatency) cacheAware() *CacheAware { return p.cache }

// Run calls Evict every EvictionInterval until ctx ends.
func (p *PredictedLatency) Run(ctx context.Context) { runEvery(ctx, p.cfg.EvictionInterval, p.Evict) }

// learn inserts text for the chosen candidate, as a cache_aware pick does.
func (p *CacheAware) learn(model, text string, cands []*worker.Worker, chosen int) {
	if text == "" {
		return
	}
	id := p.ci.lookup(cands).ids[chosen]
	lt := p.trees.tree(model)
	lt.mu.Lock()
	defer lt.mu.Unlock()
	lt.t.insert(text, id)
	if lt.t.size[id] > p.cfg.MaxTreeSize {
		lt.t.evictTenant(id, p.cfg.MaxTreeSize) // as CacheAware.pick bounds it
	}
}

var _ interface {
	Policy
	Forgetter
	Evictor
} = (*PredictedLatency)(nil)
