package placement

import (
	"slices"
	"sync"
	"time"

	"github.com/sluicegw/sluice/internal/worker"
)

// Assignment modes of the manual policy: how a routing key it has not seen (or whose workers are all
// gone) gets its worker.
const (
	AssignRandom   = "random"    // uniformly among the candidates (SMG's default)
	AssignMinLoad  = "min_load"  // fewest requests in flight
	AssignMinGroup = "min_group" // fewest routing keys pinned
	AssignDelegate = "delegate"  // SMG's manual policy treats it as min_load
)

// manualCandidates is how many workers a routing key remembers, oldest first (SMG
// policies/manual.rs MAX_CANDIDATE_WORKERS).
const manualCandidates = 2

// Manual is SMG's manual policy (policies/manual.rs): a request with a routing key goes to the
// worker that key is pinned to, for as long as that worker is a candidate (healthy, serving the
// model). A key keeps up to two workers, oldest first: when its first is not a candidate, the second
// serves; when neither is, a new one is assigned and appended (the oldest dropped), so a key moves
// only when its worker fails, and returns to it when it recovers while still remembered. Unlike
// consistent_hashing, adding workers moves no key. A request without a key is assigned by the mode
// and pins nothing. Keys unused for the idle time are forgotten by Evict.
type Manual struct {
	mode string
	idle time.Duration
	now  func() time.Time
	rand func() uint64

	mu     sync.Mutex
	keys   map[string]*stickyKey
	groups map[string]int // worker key -> routing keys remembering it (min_group)
}

type stickyKey struct {
	workers []string // worker keys, oldest first
	last    time.Time
}

func newManual(cfg Config) *Manual {
	return &Manual{mode: cfg.AssignmentMode, idle: cfg.StickyIdle, now: cfg.Now, rand: cfg.Rand,
		keys: map[string]*stickyKey{}, groups: map[string]int{}}
}

// Name implements Policy.
func (*Manual) Name() string { return PolicyManual }

// Pick implements Policy.
func (m *Manual) Pick(cands []*worker.Worker, req *Request) int {
	if len(cands) == 0 {
		return -1
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if req.RoutingKey == "" {
		return m.assign(cands)
	}
	now := m.now()
	k := m.keys[req.RoutingKey]
	if k == nil {
		i := m.assign(cands)
		m.keys[req.RoutingKey] = &stickyKey{workers: []string{cands[i].Key()}, last: now}
		m.groups[cands[i].Key()]++
		return i
	}
	k.last = now
	for _, wk := range k.workers {
		if i := slices.IndexFunc(cands, func(w *worker.Worker) bool { return w.Key() == wk }); i >= 0 {
			return i
		}
	}
	i := m.assign(cands)
	if len(k.workers) >= manualCandidates {
		m.ungroup(k.workers[0])
		k.workers = slices.Delete(k.workers, 0, 1)
	}
	k.workers = append(k.workers, cands[i].Key())
	m.groups[cands[i].Key()]++
	return i
}

// assign picks a worker for a key by the assignment mode.
func (m *Manual) assign(cands []*worker.Worker) int {
	switch m.mode {
	case AssignMinLoad, AssignDelegate:
		return m.minBy(cands, func(w *worker.Worker) int64 { return w.Load() })
	case AssignMinGroup:
		return m.minBy(cands, func(w *worker.Worker) int64 { return int64(m.groups[w.Key()]) })
	}
	return randIndex(m.rand(), len(cands))
}

// minBy returns a candidate with the least value, at random among ties (as SMG's select_min_by).
func (m *Manual) minBy(cands []*worker.Worker, value func(*worker.Worker) int64) int {
	best, ties := int64(0), 0
	pick := -1
	for i, w := range cands {
		v := value(w)
		switch {
		case pick < 0 || v < best:
			best, pick, ties = v, i, 1
		case v == best:
			ties++
			if randIndex(m.rand(), ties) == 0 { // reservoir sampling: each tie equally likely
				pick = i
			}
		}
	}
	return pick
}

func (m *Manual) ungroup(wk string) {
	if m.groups[wk]--; m.groups[wk] <= 0 {
		delete(m.groups, wk)
	}
}

// Evict implements Evictor: keys unused for the idle time are forgotten.
func (m *Manual) Evict() {
	m.mu.Lock()
	defer m.mu.Unlock()
	cutoff := m.now().Add(-m.idle)
	for key, k := range m.keys {
		if k.last.Before(cutoff) {
			for _, wk := range k.workers {
				m.ungroup(wk)
			}
			delete(m.keys, key)
		}
	}
}

// Forget implements Forgetter: the worker leaves every key that remembers it.
func (m *Manual) Forget(workerKey string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for key, k := range m.keys {
		if i := slices.Index(k.workers, workerKey); i >= 0 {
			k.workers = slices.Delete(k.workers, i, i+1)
			if len(k.workers) == 0 {
				delete(m.keys, key)
			}
		}
	}
	delete(m.groups, workerKey)
}

// Keys returns the number of routing keys remembered.
func (m *Manual) Keys() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.keys)
}

var _ interface {
	Policy
	Forgetter
	Evictor
} = (*Manual)(nil)
