package placement

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/sluicegw/sluice/internal/worker"
)

// Session affinity (Config.SessionAffinity): cache_aware and kv_aware keep a request carrying a
// routing key (the routing-key headers, among them --session-header) on the worker its key used
// last, so an agent's conversation stays where its KV cache is even when a turn's text alone would
// not say so (a tool result, a rewritten system prompt, a fresh prefix). The pin holds while that
// worker is a candidate (healthy, breaker closed, below its admission limit: the caller filters
// those out) and is not overloaded by the policy's own balance rule: its load exceeds the least
// loaded candidate's by more than BalanceAbsThreshold and by a factor above BalanceRelThreshold.
// Otherwise the policy decides as without a key, and the key is pinned to the worker it chose.
//
// Keys are hashed (a 64-bit seeded hash), so a long header costs no memory; a key unused for
// StickyIdle is forgotten by Evict, and at most maxSessions keys are kept (beyond it an eighth of
// them, idle ones first, are dropped at once, so a flood of keys costs amortised O(1) per pick).

// maxSessions bounds the session keys one policy remembers.
const maxSessions = 1 << 17

type sessions struct {
	idle     time.Duration
	now      func() time.Time
	abs      int64
	rel      float64
	seed     maphash.Seed
	capacity int

	mu sync.Mutex
	m  map[uint64]*session
}

type session struct {
	worker string // Worker.Key of the worker the key used last
	last   time.Time
}

// newSessions returns the session table of a policy, or nil when affinity is off.
func newSessions(cfg Config) *sessions {
	if !cfg.SessionAffinity {
		return nil
	}
	return &sessions{idle: cfg.StickyIdle, now: cfg.Now, abs: cfg.BalanceAbsThreshold, rel: cfg.BalanceRelThreshold,
		seed: maphash.MakeSeed(), capacity: maxSessions, m: map[uint64]*session{}}
}

// lookup returns the candidate key is pinned to, or -1: no key, affinity off, no pin, the pinned
// worker is not a candidate, or it is overloaded.
func (s *sessions) lookup(key string, cands []*worker.Worker) int {
	if s == nil || key == "" {
		return -1
	}
	h := maphash.String(s.seed, key)
	s.mu.Lock()
	se := s.m[h]
	wk := ""
	if se != nil {
		wk = se.worker
	}
	s.mu.Unlock()
	if wk == "" {
		return -1
	}
	at, minLoad := -1, int64(0)
	for i, w := range cands {
		if l := w.Load(); i == 0 || l < minLoad {
			minLoad = l
		}
		if at < 0 && w.Key() == wk {
			at = i
		}
	}
	if at < 0 {
		return -1
	}
	if l := cands[at].Load(); l-minLoad > s.abs && float64(l) > s.rel*float64(minLoad) {
		return -1
	}
	return at
}

// remember pins key to w.
func (s *sessions) remember(key string, w *worker.Worker) {
	if s == nil || key == "" {
		return
	}
	h := maphash.String(s.seed, key)
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if se := s.m[h]; se != nil {
		se.worker, se.last = w.Key(), now
		return
	}
	if len(s.m) >= s.capacity {
		s.shedLocked(now)
	}
	s.m[h] = &session{worker: w.Key(), last: now}
}

// shedLocked makes room: every idle key goes, then arbitrary ones until an eighth is gone.
func (s *sessions) shedLocked(now time.Time) {
	want := max(s.capacity/8, 1)
	cutoff := now.Add(-s.idle)
	dropped := 0
	for h, se := range s.m {
		if se.last.Before(cutoff) {
			delete(s.m, h)
			dropped++
		}
	}
	for h := range s.m { // map order is unspecified: effectively random victims
		if dropped >= want {
			break
		}
		delete(s.m, h)
		dropped++
	}
}

// evict forgets the keys unused for the idle time.
func (s *sessions) evict() {
	if s == nil {
		return
	}
	cutoff := s.now().Add(-s.idle)
	s.mu.Lock()
	defer s.mu.Unlock()
	for h, se := range s.m {
		if se.last.Before(cutoff) {
			delete(s.m, h)
		}
	}
}

// len is the number of keys remembered.
func (s *sessions) len() int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}
