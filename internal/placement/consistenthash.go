package placement

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"

	"github.com/sluicegw/sluice/internal/worker"
)

// implicitKeyBytes bounds the prompt prefix hashed as the implicit key: long
// enough to separate conversations (system prompt plus first user turn),
// short enough that later turns of one conversation keep the same key.
const implicitKeyBytes = 1024

// ConsistentHash maps a key to a worker on a hash ring with VirtualNodes
// points per worker (xxhash of "url#i"). The key is the request's
// RoutingKey, else the first 1 KiB of its prompt text, else its model.
// The ring holds every worker ever seen (until Forget); a key goes to the
// first point clockwise whose worker is among the candidates, which is
// exactly the ring of the candidates: when one worker joins, only about 1/N
// of the keys move.
type ConsistentHash struct {
	vnodes int
	ci     candIndex

	mu   sync.Mutex // serialises ring rebuilds
	ring atomic.Pointer[hashRing]
}

type hashRing struct {
	points  []uint64 // sorted
	owners  []int32  // owners[i] owns points[i]
	members map[int32]bool
}

func newConsistentHash(vnodes int) *ConsistentHash {
	c := &ConsistentHash{vnodes: vnodes}
	c.ring.Store(&hashRing{members: map[int32]bool{}})
	return c
}

// Name implements Policy.
func (*ConsistentHash) Name() string { return PolicyConsistentHashing }

// Key returns the key the policy hashes for req.
func Key(req *Request) string {
	switch {
	case req.RoutingKey != "":
		return req.RoutingKey
	case req.Text != "":
		return req.Text[:min(len(req.Text), implicitKeyBytes)]
	}
	return req.Model
}

// Pick implements Policy.
func (c *ConsistentHash) Pick(cands []*worker.Worker, req *Request) int {
	if len(cands) == 0 {
		return -1
	}
	cs := c.ci.lookup(cands)
	r := c.ring.Load()
	if cs.verified.Load() != r {
		for _, id := range cs.ids {
			if !r.members[id] {
				r = c.addMembers(cs)
				break
			}
		}
		cs.verified.Store(r)
	}
	h := xxhash.Sum64String(Key(req))
	n := len(r.points)
	start, _ := slices.BinarySearch(r.points, h)
	for k := range n {
		if i := cs.index(r.owners[(start+k)%n]); i >= 0 {
			return i
		}
	}
	return 0 // unreachable: every candidate is on the ring
}

type ringPoint struct {
	h  uint64
	id int32
}

func (r *hashRing) pointsList() []ringPoint {
	out := make([]ringPoint, len(r.points))
	for i := range r.points {
		out[i] = ringPoint{r.points[i], r.owners[i]}
	}
	return out
}

func buildRing(pts []ringPoint, members map[int32]bool) *hashRing {
	slices.SortFunc(pts, func(a, b ringPoint) int {
		switch {
		case a.h < b.h:
			return -1
		case a.h > b.h:
			return 1
		}
		return int(a.id - b.id) // deterministic on (improbable) collisions
	})
	r := &hashRing{points: make([]uint64, len(pts)), owners: make([]int32, len(pts)), members: members}
	for i, p := range pts {
		r.points[i], r.owners[i] = p.h, p.id
	}
	return r
}

// addMembers adds the candidates missing from the ring (copy-on-write).
func (c *ConsistentHash) addMembers(cs *candSet) *hashRing {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.ring.Load()
	pts := old.pointsList()
	members := make(map[int32]bool, len(old.members)+len(cs.ids))
	for id := range old.members {
		members[id] = true
	}
	for i, id := range cs.ids {
		if members[id] {
			continue
		}
		members[id] = true
		key := cs.workers[i].Key()
		for v := range c.vnodes {
			pts = append(pts, ringPoint{xxhash.Sum64String(key + "#" + strconv.Itoa(v)), id})
		}
	}
	r := buildRing(pts, members)
	c.ring.Store(r)
	return r
}

// Forget implements Forgetter: the worker's points leave the ring.
func (c *ConsistentHash) Forget(workerKey string) {
	id, ok := c.ci.lookupID(workerKey)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.ring.Load()
	if !old.members[id] {
		return
	}
	pts := slices.DeleteFunc(old.pointsList(), func(p ringPoint) bool { return p.id == id })
	members := make(map[int32]bool, len(old.members))
	for m := range old.members {
		if m != id {
			members[m] = true
		}
	}
	c.ring.Store(buildRing(pts, members))
	c.ci.invalidate()
}

var _ interface {
	Policy
	Forgetter
} = (*ConsistentHash)(nil)
