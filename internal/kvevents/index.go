package kvevents

import (
	"fmt"
	"sync"
)

// Tier is a storage tier of cached blocks: GPU first, then host memory, then anything slower.
type Tier uint8

// The tiers, fastest first. vLLM's medium is "GPU" (MEDIUM_GPU) or an offloading connector's name
// ("CPU", ...); SGLang's StorageMedium is GPU, CPU (host, HiCache L2) or a storage backend (L3).
const (
	TierGPU Tier = iota
	TierCPU
	TierOther
	numTiers
)

// TierOf maps an event's medium to its tier; an absent medium is GPU, as both engines default.
func TierOf(medium string) Tier {
	switch medium {
	case "", "GPU", "gpu", "cuda", "CUDA":
		return TierGPU
	case "CPU", "cpu", "HOST", "host", "L2":
		return TierCPU
	}
	return TierOther
}

func (t Tier) String() string {
	switch t {
	case TierGPU:
		return "gpu"
	case TierCPU:
		return "cpu"
	}
	return "other"
}

// IndexConfig configures an Index. The zero value is usable.
type IndexConfig struct {
	// MaxBlocksPerWorker bounds the blocks kept per (worker, rank); stores beyond it are dropped and
	// counted (Metrics.IncDropped "full"). Default 1<<18 (4 Mi tokens at vLLM's block size 16): the
	// engine evicts and says so, so the bound only guards against a peer that never removes.
	MaxBlocksPerWorker int
	// TierWeights weigh matched blocks by tier in Match's Score; default GPU 1, CPU 0.5, other 0.25
	// (a hit in host memory or on disk must still be loaded, so it is worth less than one on GPU).
	TierWeights [numTiers]float64
	Metrics     Metrics // default: none
}

const defaultMaxBlocks = 1 << 18

// Index is the block index of every subscribed (worker, rank). It is safe for concurrent use.
type Index struct {
	maxBlocks int
	weights   [numTiers]float64
	metrics   Metrics

	mu      sync.RWMutex
	shards  map[shardKey]*shard
	tracked map[string]int // worker -> its shards
}

type shardKey struct {
	worker string
	rank   int
}

// shard is one (worker, rank)'s blocks.
type shard struct {
	mu        sync.RWMutex
	blockSize int                  // learned from the first BlockStored; 0 until then
	blocks    map[uint64]uint8     // chain key -> bit mask of the tiers holding the block
	engine    map[engineKey]uint64 // (tier, engine hash) -> chain key
	perTier   [numTiers]int
}

type engineKey struct {
	tier Tier
	hash EngineHash
}

// NewIndex returns an empty index.
func NewIndex(cfg IndexConfig) (*Index, error) {
	if cfg.MaxBlocksPerWorker < 0 {
		return nil, fmt.Errorf("%w: MaxBlocksPerWorker %d < 0", ErrConfig, cfg.MaxBlocksPerWorker)
	}
	if cfg.MaxBlocksPerWorker == 0 {
		cfg.MaxBlocksPerWorker = defaultMaxBlocks
	}
	if cfg.TierWeights == [numTiers]float64{} {
		cfg.TierWeights = [numTiers]float64{1, 0.5, 0.25}
	}
	for t, w := range cfg.TierWeights {
		if w < 0 || w > 1 {
			return nil, fmt.Errorf("%w: tier %s weight %v outside [0, 1]", ErrConfig, Tier(t), w)
		}
	}
	if cfg.Metrics == nil {
		cfg.Metrics = noopMetrics{}
	}
	return &Index{
		maxBlocks: cfg.MaxBlocksPerWorker,
		weights:   cfg.TierWeights,
		metrics:   cfg.Metrics,
		shards:    make(map[shardKey]*shard),
		tracked:   make(map[string]int),
	}, nil
}

func (x *Index) shard(worker string, rank int) *shard {
	x.mu.RLock()
	s := x.shards[shardKey{worker, rank}]
	x.mu.RUnlock()
	return s
}

func (x *Index) shardForWrite(worker string, rank int) *shard {
	if s := x.shard(worker, rank); s != nil {
		return s
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	k := shardKey{worker, rank}
	s := x.shards[k]
	if s == nil {
		s = &shard{blocks: make(map[uint64]uint8), engine: make(map[engineKey]uint64)}
		x.shards[k] = s
		x.tracked[worker]++
	}
	return s
}

// ApplyStats counts what Apply did with a batch.
type ApplyStats struct {
	Stored, Removed, Cleared int
	// Dropped counts stored blocks not indexed, by reason: "full" (MaxBlocksPerWorker), "orphan"
	// (parent unknown: evicted, or published before we subscribed), "block_size" (a block size other
	// than the worker's, e.g. SGLang's partial last page), "lora" (LoRA blocks: prompts are matched
	// against the base model only).
	Dropped map[string]int
}

func (st *ApplyStats) drop(reason string, n int) {
	if st.Dropped == nil {
		st.Dropped = make(map[string]int)
	}
	st.Dropped[reason] += n
}

// Apply applies a batch's events, in order, to (worker, rank)'s blocks.
func (x *Index) Apply(worker string, rank int, b *Batch) ApplyStats {
	s := x.shardForWrite(worker, rank)
	var st ApplyStats
	s.mu.Lock()
	for i := range b.Events {
		s.apply(&b.Events[i], x.maxBlocks, &st)
	}
	n := len(s.blocks)
	s.mu.Unlock()
	x.metrics.SetBlocks(worker, rank, n)
	x.metrics.AddEvents(worker, BlockStored.String(), st.Stored)
	x.metrics.AddEvents(worker, BlockRemoved.String(), st.Removed)
	x.metrics.AddEvents(worker, AllBlocksCleared.String(), st.Cleared)
	for reason, n := range st.Dropped {
		x.metrics.AddDropped(worker, reason, n)
	}
	return st
}

func (s *shard) apply(ev *Event, maxBlocks int, st *ApplyStats) {
	switch ev.Kind {
	case AllBlocksCleared:
		st.Cleared++
		s.clear()
	case BlockRemoved:
		st.Removed++
		t := TierOf(ev.Medium)
		for _, h := range ev.BlockHashes {
			ek := engineKey{t, h}
			key, ok := s.engine[ek]
			if !ok {
				continue
			}
			delete(s.engine, ek)
			m, held := s.blocks[key]
			if !held || m&(1<<t) == 0 {
				continue
			}
			s.perTier[t]--
			if m &^= 1 << t; m == 0 {
				delete(s.blocks, key)
			} else {
				s.blocks[key] = m
			}
		}
	case BlockStored:
		st.Stored++
		s.store(ev, maxBlocks, st)
	}
}

func (s *shard) store(ev *Event, maxBlocks int, st *ApplyStats) {
	n := len(ev.BlockHashes)
	switch {
	case ev.LoRA:
		st.drop("lora", n)
		return
	case s.blockSize == 0:
		s.blockSize = ev.BlockSize
	case ev.BlockSize != s.blockSize:
		st.drop("block_size", n)
		return
	}
	parent := rootKey
	if ev.HasParent {
		var ok bool
		if parent, ok = s.lookupEngine(ev.Parent); !ok {
			st.drop("orphan", n)
			return
		}
	}
	t := TierOf(ev.Medium)
	for i, h := range ev.BlockHashes {
		key := chainKey(parent, ev.TokenIDs[i*s.blockSize:(i+1)*s.blockSize])
		parent = key
		ek := engineKey{t, h}
		if old, ok := s.engine[ek]; ok && old == key {
			continue // re-stored (at-least-once delivery, replay overlap)
		}
		m, held := s.blocks[key]
		if !held && len(s.blocks) >= maxBlocks {
			st.drop("full", n-i)
			return
		}
		s.engine[ek] = key
		if m&(1<<t) == 0 {
			s.perTier[t]++
		}
		s.blocks[key] = m | 1<<t
	}
}

// lookupEngine resolves an engine hash in any tier, fastest first.
func (s *shard) lookupEngine(h EngineHash) (uint64, bool) {
	for t := range numTiers {
		if k, ok := s.engine[engineKey{t, h}]; ok {
			return k, true
		}
	}
	return 0, false
}

func (s *shard) clear() {
	clear(s.blocks)
	clear(s.engine)
	s.perTier = [numTiers]int{}
}

// Clear forgets (worker, rank)'s blocks: the subscriber could not repair a gap, or the engine
// restarted.
func (x *Index) Clear(worker string, rank int) {
	s := x.shard(worker, rank)
	if s == nil {
		return
	}
	s.mu.Lock()
	s.clear()
	s.mu.Unlock()
	x.metrics.SetBlocks(worker, rank, 0)
}

// RemoveWorker drops every rank of worker (the worker left the registry).
func (x *Index) RemoveWorker(worker string) {
	x.mu.Lock()
	for k := range x.shards {
		if k.worker == worker {
			delete(x.shards, k)
		}
	}
	delete(x.tracked, worker)
	x.mu.Unlock()
	x.metrics.DeleteWorker(worker)
}

// Match is how much of a prompt a (worker, rank) holds.
type Match struct {
	Blocks int // leading blocks held in any tier
	Tokens int // Blocks times the worker's block size
	// PerTier counts the matched blocks by the fastest tier holding each.
	PerTier [numTiers]int
	// Score weighs each matched block by its fastest tier (IndexConfig.TierWeights), in blocks.
	Score float64
}

// MatchedPrefix reports how many leading blocks, and tokens, of tokenIDs (worker, rank) holds, in
// any tier. It takes two read locks and allocates nothing.
func (x *Index) MatchedPrefix(worker string, rank int, tokenIDs []uint32) (blocks, tokens int) {
	m := x.Match(worker, rank, tokenIDs)
	return m.Blocks, m.Tokens
}

// Match is MatchedPrefix with the tiers of the matched blocks.
func (x *Index) Match(worker string, rank int, tokenIDs []uint32) Match {
	var m Match
	s := x.shard(worker, rank)
	if s == nil {
		return m
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	bs := s.blockSize
	if bs == 0 || len(s.blocks) == 0 {
		return m
	}
	key := rootKey
	for start := 0; start+bs <= len(tokenIDs); start += bs {
		key = chainKey(key, tokenIDs[start:start+bs])
		mask, ok := s.blocks[key]
		if !ok {
			break
		}
		t := fastest(mask)
		m.PerTier[t]++
		m.Score += x.weights[t]
		m.Blocks++
	}
	m.Tokens = m.Blocks * bs
	return m
}

func fastest(mask uint8) Tier {
	for t := range numTiers {
		if mask&(1<<t) != 0 {
			return t
		}
	}
	return TierOther
}

// Stats is one (worker, rank)'s index size.
type Stats struct {
	BlockSize int
	Blocks    int
	PerTier   [numTiers]int
}

// Stats reports (worker, rank)'s index size; the zero Stats when nothing was indexed.
func (x *Index) Stats(worker string, rank int) Stats {
	s := x.shard(worker, rank)
	if s == nil {
		return Stats{}
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return Stats{BlockSize: s.blockSize, Blocks: len(s.blocks), PerTier: s.perTier}
}

// rootKey is the parent key of a chain's first block.
const rootKey uint64 = 0x6a09e667f3bcc908

// chainKey is the key of the block holding toks after the block keyed parent: a 64-bit hash of the
// parent key and the tokens (a multiply-xorshift over each pair of ids, then murmur3's finalizer).
// A collision only misroutes a request, so 64 bits over a few million blocks per worker are plenty.
func chainKey(parent uint64, toks []uint32) uint64 {
	h := parent ^ uint64(len(toks))*0x9e3779b97f4a7c15
	// Two 32-bit ids per 64-bit step: half the multiplies of one per id (the length above keeps an
	// odd tail from colliding with a zero id).
	i := 0
	for ; i+1 < len(toks); i += 2 {
		h ^= uint64(toks[i]) | uint64(toks[i+1])<<32
		h *= 0xbf58476d1ce4e5b9
		h ^= h >> 29
	}
	if i < len(toks) {
		h ^= uint64(toks[i])
		h *= 0xbf58476d1ce4e5b9
		h ^= h >> 29
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// Tracks reports whether any rank of worker has sent events (placement's kv_aware falls back to
// cache_aware for workers it does not track).
func (x *Index) Tracks(worker string) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.tracked[worker] > 0
}
