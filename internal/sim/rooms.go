package sim

import (
	"container/list"
	"sync"
	"time"
)

// kvRecord describes a prompt's KV cache handed from a prefill to a decode engine.
type kvRecord struct {
	PromptHash   uint64 `json:"prompt_hash,string"`
	PromptTokens int    `json:"prompt_tokens"`
	CachedTokens int    `json:"cached_tokens"`
	EngineID     string `json:"engine_id"`
	// The prefill engine's topology: the decode's transfer delay depends on it (topology.go).
	Zone string `json:"zone,omitempty"`
	Rack string `json:"rack,omitempty"`
	Node string `json:"node,omitempty"`
}

// withTopology returns rec carrying topology t.
func (rec kvRecord) withTopology(t Topology) kvRecord {
	rec.Zone, rec.Rack, rec.Node = t.Zone, t.Rack, t.Node
	return rec
}

// recordStore keeps published KV records by key (vLLM: first block id) until one consumer takes them.
// Unclaimed records expire after ttl and at most maxRecords are kept (oldest dropped first), so a decode
// that never comes costs bounded memory. Expiry is swept on every publish: no goroutine.
type recordStore struct {
	mu         sync.Mutex
	ttl        time.Duration
	maxRecords int
	entries    map[uint64]*list.Element // of *storedRecord
	order      list.List                // publish order, oldest first
	expired    int64                    // records dropped unclaimed
}

type storedRecord struct {
	key uint64
	rec kvRecord
	at  time.Time
}

func newRecordStore(ttl time.Duration, maxRecords int) *recordStore {
	return &recordStore{ttl: ttl, maxRecords: maxRecords, entries: make(map[uint64]*list.Element)}
}

// publish stores the record; publishing a key twice replaces the record.
func (s *recordStore) publish(key uint64, rec kvRecord) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(now)
	if el, ok := s.entries[key]; ok {
		s.order.Remove(el)
	}
	s.entries[key] = s.order.PushBack(&storedRecord{key: key, rec: rec, at: now})
	for s.order.Len() > s.maxRecords {
		s.dropLocked(s.order.Front())
		s.expired++
	}
}

func (s *recordStore) sweepLocked(now time.Time) {
	for f := s.order.Front(); f != nil && now.Sub(f.Value.(*storedRecord).at) >= s.ttl; f = s.order.Front() {
		s.dropLocked(f)
		s.expired++
	}
}

func (s *recordStore) dropLocked(el *list.Element) {
	s.order.Remove(el)
	delete(s.entries, el.Value.(*storedRecord).key)
}

// takeIf removes and returns a published record, without waiting, if ok accepts it.
func (s *recordStore) takeIf(key uint64, ok func(kvRecord) bool) (kvRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(time.Now())
	el, found := s.entries[key]
	if !found || !ok(el.Value.(*storedRecord).rec) {
		return kvRecord{}, false
	}
	s.dropLocked(el)
	return el.Value.(*storedRecord).rec, true
}

// size is the number of published, unclaimed records.
func (s *recordStore) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.order.Len()
}
