package telemetry

import "sync"

// children holds the children of one metric vector by their label values, resolved once: a
// WithLabelValues hashes and checks every value and takes the vector's lock on every call, which a
// PD request paid several times over (docs/benchmarks.md). A child is made exactly when
// WithLabelValues would have made it.
//
// For series that are deleted (a removed worker's), fills and drops run under one mutex, the
// metrics' workerMu, held by get's slow path and by the caller of drop, so the cache never keeps a
// child whose series was deleted. Series never deleted use get with a nil mutex.
type children[K comparable, C any] struct {
	m sync.Map // K -> C
}

// get returns k's child, made by mk the first time (under mu, when not nil).
func (c *children[K, C]) get(mu *sync.Mutex, k K, mk func() C) C {
	if v, ok := c.m.Load(k); ok {
		return v.(C)
	}
	if mu == nil {
		v, _ := c.m.LoadOrStore(k, mk())
		return v.(C)
	}
	mu.Lock()
	defer mu.Unlock()
	if v, ok := c.m.Load(k); ok {
		return v.(C)
	}
	v := mk()
	c.m.Store(k, v)
	return v
}

// drop forgets the children whose key match accepts; call it with mu held, before deleting their
// series.
func (c *children[K, C]) drop(match func(K) bool) {
	c.m.Range(func(k, _ any) bool {
		if match(k.(K)) {
			c.m.Delete(k)
		}
		return true
	})
}
