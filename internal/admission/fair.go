package admission

import (
	"container/list"
	"errors"
	"fmt"
	"maps"
)

// Fair queueing across tenants (Settings.Tenants). Within one band of one
// queue, the head is chosen by deficit round robin over the tenants that have
// waiters there, FIFO within a tenant: the tenant whose turn it is has its
// front waiter as the band's head until that waiter is granted; each grant
// costs the tenant one unit of its deficit, and when the deficit is spent (or
// the tenant has no waiter left) the turn passes to the next tenant in the
// ring, whose deficit is refilled by its weight. A tenant of weight w thus
// gets w grants per round while it stays backlogged, and a flood delays a
// quiet tenant by at most one round, whatever its size.
//
// The cost unit is a grant (one client request), not its tokens: per-tenant
// token use is bounded by budgets, and a request-count share keeps the head
// stable (it changes only when the head leaves, as without tenants), so
// head-only selection, the head's poll timer, cancellation and wake-ups work
// unchanged. Bands still rank by their oldest waiter (queue.go): aging lifts a
// band as a whole, and the band's head is then its current tenant's front.
//
// The arrival lists (queue.bands) keep every waiter whatever the tenancy, so
// turning tenancy on or off live only rebuilds these structures from them.

// DefaultTenant is the tenant of requests without one.
const DefaultTenant = "default"

// TenantSettings configure tenancy in admission. The zero value is off: no
// per-tenant state, behaviour exactly as without tenants.
type TenantSettings struct {
	// Fair turns on deficit round robin across tenants within a band.
	Fair bool
	// Weights are the tenants' weights (grants per round); a tenant not
	// named weighs 1. Used with Fair.
	Weights map[string]int
	// MaxQueued bounds one tenant's waiters over all queues; a newcomer
	// beyond it is rejected with ErrTenantQueueFull. <= 0 means no bound.
	MaxQueued int
}

// on reports whether admission tracks tenants at all.
func (t *TenantSettings) on() bool { return t.Fair || t.MaxQueued > 0 }

func (t *TenantSettings) weight(tenant string) int {
	if w, ok := t.Weights[tenant]; ok {
		return w
	}
	return 1
}

func (t TenantSettings) clone() TenantSettings {
	t.Weights = maps.Clone(t.Weights)
	return t
}

func (t *TenantSettings) validate() error {
	var errs []error
	if t.MaxQueued < 0 {
		errs = append(errs, fmt.Errorf("admission: tenant max queued must be >= 0, got %d", t.MaxQueued))
	}
	for name, w := range t.Weights {
		if name == "" {
			errs = append(errs, errors.New("admission: a tenant weight needs a tenant name"))
		}
		if w < 1 || w > maxTenantWeight {
			errs = append(errs, fmt.Errorf("admission: tenant %q: weight must be 1-%d, got %d", name, maxTenantWeight, w))
		}
	}
	return errors.Join(errs...)
}

// maxTenantWeight bounds a weight, hence the grants one tenant gets in a row.
const maxTenantWeight = 1000

// fairBand is the deficit round robin of one band of one queue.
type fairBand struct {
	tenants map[string]*tenantQueue
	ring    list.List     // of *tenantQueue with waiters, in turn order
	cur     *list.Element // the tenant whose turn it is; nil iff ring is empty
}

// tenantQueue is one tenant's waiters in one band of one queue.
type tenantQueue struct {
	name    string
	waiters list.List // of *waiter, arrival order
	deficit int       // grants left in its current turn
	elem    *list.Element
}

// fairHeadLocked returns the head of front's band: front itself without
// fairness, else the front waiter of the tenant whose turn it is. front is
// the band's oldest waiter (or nil).
func (c *Controller) fairHeadLocked(q *queue, front *waiter) *waiter {
	if front == nil || !c.settings.Tenants.Fair || front.tq == nil {
		return front
	}
	fb := &q.fair[front.band]
	return fb.cur.Value.(*tenantQueue).waiters.Front().Value.(*waiter)
}

// bandFrontLocked returns the waiter whose rank stands for h's band: its
// oldest waiter (h itself without fairness).
func (c *Controller) bandFrontLocked(q *queue, h *waiter) *waiter {
	if h == nil || h.tq == nil {
		return h
	}
	return q.bands[h.band].Front().Value.(*waiter)
}

// tenantFullLocked reports whether tenant already has MaxQueued waiters.
func (c *Controller) tenantFullLocked(tenant string) bool {
	m := c.settings.Tenants.MaxQueued
	return m > 0 && c.tenantQueued[tenantName(tenant)] >= m
}

func tenantName(t string) string {
	if t == "" {
		return DefaultTenant
	}
	return t
}

// fairAddLocked records a waiter just pushed on its arrival list.
func (c *Controller) fairAddLocked(w *waiter) {
	if !c.settings.Tenants.on() {
		return
	}
	fb := &w.q.fair[w.band]
	if fb.tenants == nil {
		fb.tenants = make(map[string]*tenantQueue)
	}
	tq := fb.tenants[w.tenant]
	if tq == nil {
		tq = &tenantQueue{name: w.tenant}
		fb.tenants[w.tenant] = tq
		tq.elem = fb.ring.PushBack(tq)
		if fb.cur == nil {
			fb.cur = tq.elem
			tq.deficit = c.settings.Tenants.weight(tq.name)
		}
	}
	w.tq, w.telem = tq, tq.waiters.PushBack(w)
	if c.tenantQueued == nil {
		c.tenantQueued = make(map[string]int)
	}
	c.tenantQueued[w.tenant]++
}

// fairRemoveLocked forgets a waiter leaving its queue; a granted waiter at
// its band's head spends one unit of its tenant's turn.
func (c *Controller) fairRemoveLocked(w *waiter) {
	tq := w.tq
	if tq == nil {
		return
	}
	fb := &w.q.fair[w.band]
	isHead := fb.cur == tq.elem && tq.waiters.Front() == w.telem
	tq.waiters.Remove(w.telem)
	w.tq, w.telem = nil, nil
	if n := c.tenantQueued[w.tenant] - 1; n > 0 {
		c.tenantQueued[w.tenant] = n
	} else {
		delete(c.tenantQueued, w.tenant) // tenant names do not accumulate
	}
	if isHead && w.state == granted {
		tq.deficit--
	}
	switch {
	case tq.waiters.Len() == 0:
		next := fb.nextLocked(tq.elem)
		if next == tq.elem {
			next = nil // it was the only tenant
		}
		fb.ring.Remove(tq.elem)
		delete(fb.tenants, tq.name)
		if fb.cur == tq.elem {
			fb.turnLocked(next, &c.settings.Tenants)
		}
	case fb.cur == tq.elem && tq.deficit <= 0:
		fb.turnLocked(fb.nextLocked(tq.elem), &c.settings.Tenants)
	}
}

// nextLocked is the tenant after e in the ring, wrapping (e itself when it
// is alone).
func (fb *fairBand) nextLocked(e *list.Element) *list.Element {
	if n := e.Next(); n != nil {
		return n
	}
	return fb.ring.Front()
}

// turnLocked gives the turn to e (nil: the ring is empty) with a fresh
// deficit.
func (fb *fairBand) turnLocked(e *list.Element, ts *TenantSettings) {
	fb.cur = e
	if e != nil {
		tq := e.Value.(*tenantQueue)
		tq.deficit = ts.weight(tq.name)
	}
}

// refairLocked rebuilds the per-tenant structures of every queue from the
// arrival lists, after tenancy was turned on or off live. Turns restart.
func (c *Controller) refairLocked() {
	clear(c.tenantQueued)
	for _, q := range c.active {
		q.fair = [MaxBands]fairBand{}
		for b := range q.bands {
			for e := q.bands[b].Front(); e != nil; e = e.Next() {
				w := e.Value.(*waiter)
				w.tq, w.telem = nil, nil
				c.fairAddLocked(w)
			}
		}
	}
}

// fairPositionLocked is the position early rejection predicts for a newcomer of tenant in band:
// positionLocked, except that with fairness the waiters of its own arrival band count only as far
// as round robin serves them first: its tenant's n waiters ahead take n/w (its weight) turns, in
// each of which every other tenant o gets up to its weight w_o. O(tenants of the band).
func (c *Controller) fairPositionLocked(q *queue, band int, tenant string) int {
	pos := c.positionLocked(q, band)
	if q == nil || !c.settings.Tenants.Fair {
		return pos
	}
	nb := min(band, c.settings.numBands()-1)
	fb := &q.fair[nb]
	if fb.cur == nil {
		return pos
	}
	tenant = tenantName(tenant)
	ts := &c.settings.Tenants
	mine := 0
	if tq := fb.tenants[tenant]; tq != nil {
		mine = tq.waiters.Len()
	}
	turns := mine/ts.weight(tenant) + 1 // the newcomer is served in this turn of its tenant
	ahead := mine
	for name, tq := range fb.tenants {
		if name != tenant {
			ahead += min(tq.waiters.Len(), turns*ts.weight(name))
		}
	}
	return pos - q.bands[nb].Len() + ahead
}
