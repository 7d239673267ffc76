package placement

import (
	"sync"
	"sync/atomic"

	"github.com/sluicegw/sluice/internal/worker"
)

// candIndex interns worker keys as small ids and caches the ids of the last candidate slice it saw,
// so a policy called again and again with the snapshot's precomputed slice pays n pointer
// comparisons instead of n map lookups.
type candIndex struct {
	own    workerIDs
	shared *workerIDs // set before first use: the ids of a policy this one shares state with
	// mine[id] is set once id was a candidate here (guarded by names().mu): lookupID answers for
	// those only, so a policy sharing ids (and trees) with another sees its own workers, as with
	// ids of its own.
	mine []bool
	last atomic.Pointer[candSet]
}

// workerIDs interns worker keys (URLs, or URL@rank for rank views) as small ids, stable for the
// life of the policies using them.
type workerIDs struct {
	mu  sync.Mutex // guards ids
	ids map[string]int32
}

func (ci *candIndex) names() *workerIDs {
	if ci.shared != nil {
		return ci.shared
	}
	return &ci.own
}

// candSet is an immutable view of one candidate slice.
type candSet struct {
	workers []*worker.Worker // copy of the candidate slice
	ids     []int32          // ids[i] is the id of workers[i]
	pos     []int32          // pos[id] is the index in workers, or -1

	// verified caches the consistent hashing ring known to contain every
	// candidate, so the membership check runs once per ring change.
	verified atomic.Pointer[hashRing]
}

// index returns the candidate index of id, or -1.
func (s *candSet) index(id int32) int {
	if int(id) < len(s.pos) {
		return int(s.pos[id])
	}
	return -1
}

func sameWorkers(a, b []*worker.Worker) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func (w *workerIDs) idLocked(url string) int32 {
	if w.ids == nil {
		w.ids = make(map[string]int32)
	}
	id, ok := w.ids[url]
	if !ok {
		id = int32(len(w.ids))
		w.ids[url] = id
	}
	return id
}

// lookupID returns url's id without interning it.
func (ci *candIndex) lookupID(url string) (int32, bool) {
	w := ci.names()
	w.mu.Lock()
	defer w.mu.Unlock()
	id, ok := w.ids[url]
	return id, ok && int(id) < len(ci.mine) && ci.mine[id]
}

// lookup returns the candSet for cands, from the cache when unchanged.
func (ci *candIndex) lookup(cands []*worker.Worker) *candSet {
	if s := ci.last.Load(); s != nil && sameWorkers(s.workers, cands) {
		return s
	}
	s := &candSet{workers: append([]*worker.Worker(nil), cands...), ids: make([]int32, len(cands))}
	names := ci.names()
	names.mu.Lock()
	for i, w := range cands {
		id := names.idLocked(w.Key())
		s.ids[i] = id
		for int(id) >= len(ci.mine) {
			ci.mine = append(ci.mine, false)
		}
		ci.mine[id] = true
	}
	n := len(names.ids)
	names.mu.Unlock()
	s.pos = make([]int32, n)
	for i := range s.pos {
		s.pos[i] = -1
	}
	for i, id := range s.ids {
		s.pos[id] = int32(i)
	}
	ci.last.Store(s)
	return s
}

// invalidate drops the cached set (after a Forget).
func (ci *candIndex) invalidate() { ci.last.Store(nil) }
