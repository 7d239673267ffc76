package sim

import (
	"container/list"
	"sync"
)

// prefixCache is a block prefix cache: full blocks of blockSize tokens keyed by chained hashes, so a block
// matches only when every token before it matches too. LRU eviction beyond capacity blocks.
type prefixCache struct {
	mu        sync.Mutex
	blockSize int
	capacity  int       // blocks
	lru       list.List // of uint64 keys, front = most recently used
	blocks    map[uint64]*list.Element
	events    cacheEvents // nil: no KV events published (kvevents.go)
}

// cacheEvents hears every change to the cache, under its lock, in order (kvevents.go publishes them).
type cacheEvents interface {
	stored(parent uint64, hasParent bool, keys []uint64, ids []uint32)
	removed(keys []uint64)
	cleared()
}

// setEvents attaches (or, with nil, detaches) the cache's event listener.
func (c *prefixCache) setEvents(ev cacheEvents) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = ev
}

func newPrefixCache(blockSize int, capacityTokens int64) *prefixCache {
	return &prefixCache{
		blockSize: blockSize,
		capacity:  int(capacityTokens / int64(blockSize)),
		blocks:    make(map[uint64]*list.Element),
	}
}

// blockKeys appends the chained keys of the full blocks of ids to dst.
func (c *prefixCache) blockKeys(dst []uint64, ids []uint32) []uint64 {
	h := hashSeed
	for start := 0; start+c.blockSize <= len(ids); start += c.blockSize {
		for _, id := range ids[start : start+c.blockSize] {
			h = mix64(h, uint64(id))
		}
		dst = append(dst, h)
	}
	return dst
}

// match returns how many leading tokens of a prompt with these block keys are cached, and marks the
// matched blocks as recently used.
func (c *prefixCache) match(keys []uint64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, k := range keys {
		e, ok := c.blocks[k]
		if !ok {
			break
		}
		c.lru.MoveToFront(e)
		n++
	}
	return n * c.blockSize
}

// insert caches the blocks of ids (keys from blockKeys), evicting the least recently used ones beyond
// capacity. With events attached, each run of newly cached blocks is one stored event and each
// eviction one removed event, in the order they happen.
func (c *prefixCache) insert(keys []uint64, ids []uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.capacity == 0 {
		return
	}
	run := -1 // first index of the run of new blocks not yet announced
	announce := func(end int) {
		if c.events == nil || run < 0 {
			return
		}
		var parent uint64
		if run > 0 {
			parent = keys[run-1]
		}
		c.events.stored(parent, run > 0, keys[run:end:end], ids[run*c.blockSize:end*c.blockSize:end*c.blockSize])
		run = -1
	}
	for i, k := range keys {
		if e, ok := c.blocks[k]; ok {
			announce(i)
			c.lru.MoveToFront(e)
			continue
		}
		c.blocks[k] = c.lru.PushFront(k)
		if run < 0 {
			run = i
		}
		for c.lru.Len() > c.capacity {
			announce(i + 1)
			old := c.lru.Back()
			c.lru.Remove(old)
			delete(c.blocks, old.Value.(uint64))
			if c.events != nil {
				c.events.removed([]uint64{old.Value.(uint64)})
			}
		}
	}
	announce(len(keys))
}

// flush empties the cache.
func (c *prefixCache) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Init()
	clear(c.blocks)
	if c.events != nil {
		c.events.cleared()
	}
}

// usedTokens is the number of cached tokens.
func (c *prefixCache) usedTokens() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int64(c.lru.Len() * c.blockSize)
}
