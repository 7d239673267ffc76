package sim

import (
	"container/list"
	"context"
	"sync"
	"time"
)

// kvRecord describes a prompt's KV cache handed from a prefill to a decode engine.
type kvRecord struct {
	PromptHash   uint64 `json:"prompt_hash,string"`
	PromptTokens int    `json:"prompt_tokens"`
	CachedTokens int    `json:"cached_tokens"`
	EngineID     string `json:"engine_id"`
}

// roomStore holds KV records by key (SGLang bootstrap room, or vLLM first block id) until one consumer
// claims them. Unclaimed records expire after ttl and at most maxRecords are kept (oldest dropped first),
// so a decode that never comes costs bounded memory. Expiry is swept on every publish: no goroutine.
type roomStore struct {
	mu         sync.Mutex
	ttl        time.Duration
	maxRecords int
	entries    map[uint64]*roomEntry
	published  list.List // of *roomEntry in publish order
	expired    int64     // records dropped unclaimed
}

type roomEntry struct {
	key     uint64
	rec     kvRecord
	ready   chan struct{} // closed when published
	isPub   bool
	at      time.Time
	waiters int
	pubElem *list.Element
}

func newRoomStore(ttl time.Duration, maxRecords int) *roomStore {
	return &roomStore{ttl: ttl, maxRecords: maxRecords, entries: make(map[uint64]*roomEntry)}
}

func (s *roomStore) entryLocked(key uint64) *roomEntry {
	e, ok := s.entries[key]
	if !ok {
		e = &roomEntry{key: key, ready: make(chan struct{})}
		s.entries[key] = e
	}
	return e
}

// publish stores the record and wakes a waiting consumer. Publishing a key twice replaces the record.
func (s *roomStore) publish(key uint64, rec kvRecord) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(now)
	e := s.entryLocked(key)
	e.rec = rec
	e.at = now
	if e.isPub {
		s.published.MoveToBack(e.pubElem)
		return
	}
	e.isPub = true
	e.pubElem = s.published.PushBack(e)
	close(e.ready)
	for s.published.Len() > s.maxRecords {
		s.dropLocked(s.published.Front().Value.(*roomEntry))
		s.expired++
	}
}

func (s *roomStore) sweepLocked(now time.Time) {
	for f := s.published.Front(); f != nil; f = s.published.Front() {
		e := f.Value.(*roomEntry)
		if now.Sub(e.at) < s.ttl {
			return
		}
		s.dropLocked(e)
		s.expired++
	}
}

func (s *roomStore) dropLocked(e *roomEntry) {
	if e.pubElem != nil {
		s.published.Remove(e.pubElem)
		e.pubElem = nil
	}
	if s.entries[e.key] == e {
		delete(s.entries, e.key)
	}
}

// claim waits until the key is published (or ctx ends) and removes the record.
func (s *roomStore) claim(ctx context.Context, key uint64) (kvRecord, error) {
	s.mu.Lock()
	e := s.entryLocked(key)
	e.waiters++
	s.mu.Unlock()
	select {
	case <-e.ready:
		s.mu.Lock()
		defer s.mu.Unlock()
		e.waiters--
		s.dropLocked(e)
		return e.rec, nil
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		e.waiters--
		if e.waiters == 0 && !e.isPub {
			s.dropLocked(e)
		}
		return kvRecord{}, ctx.Err()
	}
}

// take removes and returns a published record without waiting.
func (s *roomStore) take(key uint64) (kvRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[key]
	if !ok || !e.isPub {
		return kvRecord{}, false
	}
	s.dropLocked(e)
	return e.rec, true
}

// size is the number of published, unclaimed records.
func (s *roomStore) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.published.Len()
}
