package admission

import (
	"maps"

	"go.opentelemetry.io/otel/attribute"
)

// attrShareLimited marks a wait span whose request was, at least once while it waited, refused a worker
// by a cap (cluster admission's share) although the worker was below MaxInflightPerWorker.
const attrShareLimited = "sluice.admission.share_limited"

// capState is an extra per-worker bound set from outside the controller: cluster admission's share of a
// fleet-wide limit. The effective limit of a worker is min(MaxInflightPerWorker, its cap). Guarded by
// Controller.mu.
type capState struct {
	on       bool
	byWorker map[string]int
	other    int // cap of workers not in byWorker
	// hit is scratch for the caller of Select: set when hasCapacity refused a worker because of its cap
	// alone. Reset before each Select that may mark a waiter.
	hit bool
}

// SetWorkerCaps bounds the slots of each worker by caps[worker], and of every other worker by other, on top
// of MaxInflightPerWorker: a worker admits a new request only while its slots held are below both. A cap
// below the slots held revokes nothing; it stops new grants until enough slots are released. Every queue's
// head selects again at once, so a raised cap is used without waiting for a release. The map is copied.
func (c *Controller) SetWorkerCaps(caps map[string]int, other int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gate.caps.on = true
	c.gate.caps.byWorker = maps.Clone(caps)
	c.gate.caps.other = other
	if c.qs.n > 0 {
		c.dispatchAllLocked()
	}
}

// ClearWorkerCaps removes every cap set by SetWorkerCaps; heads select again.
func (c *Controller) ClearWorkerCaps() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gate.caps = capState{}
	if c.qs.n > 0 {
		c.dispatchAllLocked()
	}
}

// SetSeatCaps bounds the decode seats of each decode worker (its key: URL, or URL@rank) by caps[worker],
// and of every other decode worker by other, on top of its seat bound: cluster admission's share of the
// fleet-wide decode limit. As with SetWorkerCaps, a cap below the seats held revokes nothing, and every
// queue's head selects again at once. It only bounds seats while decode seats are on. The map is copied.
func (c *Controller) SetSeatCaps(caps map[string]int, other int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gate.seatCaps = capState{on: true, byWorker: maps.Clone(caps), other: other}
	if c.qs.n > 0 {
		c.dispatchAllLocked()
	}
}

// ClearSeatCaps removes every cap set by SetSeatCaps; heads select again.
func (c *Controller) ClearSeatCaps() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gate.seatCaps = capState{}
	if c.qs.n > 0 {
		c.dispatchAllLocked()
	}
}

// allows reports whether worker, holding inflight, is below its cap; a refusal sets *hit.
func (cs *capState) allows(worker string, inflight int, hit *bool) bool {
	if !cs.on {
		return true
	}
	limit, ok := cs.byWorker[worker]
	if !ok {
		limit = cs.other
	}
	if inflight < limit {
		return true
	}
	*hit = true
	return false
}

// shareLimitedAttr is the wait span's attribute for a request a cap held back.
func shareLimitedAttr() attribute.KeyValue { return attribute.Bool(attrShareLimited, true) }

// Usage is one consistent snapshot of what cluster admission reports: the configured limit, the slots held
// per worker and the requests waiting per queue key; with decode seats on, also the configured seat limit
// (DecodeMaxInflightPerWorker; 0 when seats are off) and the seats held per decode worker (nil when off).
type Usage struct {
	Limit     int
	Inflight  map[string]int
	Queued    map[string]int
	SeatLimit int
	Seats     map[string]int
}

// Usage returns the current usage. Unlike Status it computes no statistics, so it is cheap to call often.
func (c *Controller) Usage() Usage {
	c.mu.Lock()
	defer c.mu.Unlock()
	u := Usage{Limit: c.settings.MaxInflightPerWorker, Inflight: make(map[string]int, len(c.gate.workers)), Queued: make(map[string]int, len(c.qs.byKey))}
	for k, ws := range c.gate.workers {
		u.Inflight[k] = ws.inflight
	}
	for k, q := range c.qs.byKey {
		u.Queued[k] = q.order.len()
	}
	if c.seatsOnLocked() {
		u.SeatLimit = c.settings.DecodeMaxInflightPerWorker
		u.Seats = make(map[string]int, len(c.gate.seats))
		for k, ss := range c.gate.seats {
			u.Seats[k] = ss.inflight
		}
	}
	return u
}
