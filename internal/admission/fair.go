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
// A tenant that arrives with nothing waiting (a new one, as FQ-CoDel's new
// flows, RFC 8290 section 4.1) is served before the backlogged ones, behind
// only the other new tenants: it takes the turn at once when the current turn
// has granted nothing yet (its waiter becomes the head, as a higher band's
// would), else right after it. A sparse tenant thus waits for about one
// grant, not for every backlogged tenant ahead of it in the ring. So that
// this is no way to get more than a share, a tenant whose waiters are gone
// keeps its place in the ring until the turn comes round to it and drops it:
// one that comes back before that is not new, and waits for its place. Each
// tenant still has one turn per round, and the tenant whose turn was put
// off has it next.
//
// A new tenant's first turn is a burst of up to max(w, Burst) grants, so
// that the few requests a sparse tenant sends at once go back to back rather
// than one a round behind the flood. The grants beyond w are a debt, repaid
// by the turns it then has in the ring: each turn that comes round to it
// idle repays w, and it stays in the ring (so is not new) until the debt is
// paid; a turn that finds it backlogged grants w less the debt. Over any
// interval a tenant thus gets at most its share plus Burst grants, and a
// tenant that sends bursts at will gets no more than its weight in the long
// run.
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
	// Burst is the grants a new tenant (one back from idle) may take in its
	// first turn, repaid in its later turns; a tenant's weight when larger.
	// <= 1: its weight, no burst. Used with Fair.
	Burst int
	// UnderShareFirst serves first the tenants below their share (share.go):
	// the head is the front waiter of the tenant whose recent grant rate per
	// weight is lowest, if that is under its weighted share of the band's,
	// else the round robin's. Used with Fair.
	UnderShareFirst bool
}

// on reports whether admission tracks tenants at all.
func (t *TenantSettings) on() bool { return t.Fair || t.MaxQueued > 0 }

func (t *TenantSettings) weight(tenant string) int {
	if w, ok := t.Weights[tenant]; ok {
		return w
	}
	return 1
}

// burst is the first turn's quantum of a tenant new to a band.
func (t *TenantSettings) burst(tenant string) int { return max(t.weight(tenant), t.Burst) }

func (t TenantSettings) clone() TenantSettings {
	t.Weights = maps.Clone(t.Weights)
	return t
}

func (t *TenantSettings) validate() error {
	var errs []error
	if t.MaxQueued < 0 {
		errs = append(errs, fmt.Errorf("admission: tenant max queued must be >= 0, got %d", t.MaxQueued))
	}
	if t.Burst < 0 || t.Burst > maxTenantWeight {
		errs = append(errs, fmt.Errorf("admission: tenant burst must be 0-%d, got %d", maxTenantWeight, t.Burst))
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

// maxTenantWeight bounds a weight or burst, hence the grants one tenant gets in a row.
const maxTenantWeight = 1000

// fairBand is the deficit round robin of one band of one queue.
type fairBand struct {
	tenants map[string]*tenantQueue // the tenants in the ring
	ring    list.List               // of *tenantQueue, in turn order; idle ones until the turn drops them
	cur     *list.Element           // the tenant whose turn it is, one with waiters; nil iff n == 0
	// freshTail is the last of the new tenants that have not had their turn
	// yet, which stand in the ring from cur (or the one after it) to
	// freshTail; nil: none. New tenants keep their arrival order.
	freshTail *list.Element
	n         int         // waiters in the band
	share     *shareState // UnderShareFirst's rates and head (share.go); nil: none yet
	// multi are the tenants with 2 waiters or more: the only ones whose
	// waiters the round robin may not all serve before a newcomer's turn
	// (fairPositionLocked).
	multi list.List // of *tenantQueue
}

// tenantQueue is one tenant's waiters in one band of one queue.
type tenantQueue struct {
	name    string
	waiters list.List // of *waiter, arrival order; empty while idle
	deficit int       // grants left in its current turn
	quantum int       // the grants its current turn started with
	debt    int       // its first turn's grants beyond its weight, not yet repaid
	fresh   bool      // new, nothing granted yet: its turn is a burst
	elem    *list.Element
	multi   *list.Element // in fairBand.multi; nil: under 2 waiters
}

// fairHeadLocked returns the head of front's band: front itself without
// fairness, else the front waiter of the tenant whose turn it is. front is
// the band's oldest waiter (or nil).
func (c *Controller) fairHeadLocked(q *queue, front *waiter) *waiter {
	if front == nil || !c.settings.Tenants.Fair || front.tq == nil {
		return front
	}
	fb := &q.fair[front.band]
	return fb.headTenant().waiters.Front().Value.(*waiter)
}

// headTenant is the tenant whose front waiter is the band's head.
func (fb *fairBand) headTenant() *tenantQueue {
	if fb.share != nil && fb.share.head != nil {
		return fb.share.head
	}
	return fb.cur.Value.(*tenantQueue)
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

// fairAddLocked records a waiter just pushed on its arrival list and
// reports whether its tenant took the turn at once (then w may be the new
// head).
func (c *Controller) fairAddLocked(w *waiter) (tookTurn bool) {
	if !c.settings.Tenants.on() {
		return false
	}
	fb := &w.q.fair[w.band]
	if fb.tenants == nil {
		fb.tenants = make(map[string]*tenantQueue)
	}
	tq := fb.tenants[w.tenant]
	if tq == nil {
		ts := &c.settings.Tenants
		tq = &tenantQueue{name: w.tenant, fresh: true}
		fb.tenants[w.tenant] = tq
		switch {
		case fb.cur == nil:
			tq.elem = fb.ring.PushBack(tq)
			fb.cur, tookTurn = tq.elem, true
		case fb.freshTail != nil:
			tq.elem = fb.ring.InsertAfter(tq, fb.freshTail)
		case fb.turnUnstartedLocked():
			// The tenant put off keeps what it owed (or its burst): its turn
			// will be started afresh.
			if off := fb.cur.Value.(*tenantQueue); !off.fresh {
				off.debt = ts.weight(off.name) - off.quantum
			}
			tq.elem = fb.ring.InsertBefore(tq, fb.cur)
			fb.cur, tookTurn = tq.elem, true
		default:
			tq.elem = fb.ring.InsertAfter(tq, fb.cur)
		}
		if tookTurn {
			fb.startTurnLocked(tq, ts)
		}
		fb.freshTail = tq.elem
	}
	fb.n++
	w.tq, w.telem = tq, tq.waiters.PushBack(w)
	if tq.waiters.Len() == 2 {
		tq.multi = fb.multi.PushBack(tq)
	}
	if tq.waiters.Len() == 1 && c.shareEnterLocked(fb, tq, w) {
		tookTurn = true
		if f := tq.waiters.Front().Value.(*waiter); f != w && c.headLocked(w.q) == f {
			c.promoteLocked(f) // its earlier waiter is the head now
		}
	}
	if c.tenantQueued == nil {
		c.tenantQueued = make(map[string]int)
	}
	c.tenantQueued[w.tenant]++
	return tookTurn
}

// turnUnstartedLocked reports whether the current turn has granted nothing
// yet.
func (fb *fairBand) turnUnstartedLocked() bool {
	tq := fb.cur.Value.(*tenantQueue)
	return tq.deficit >= tq.quantum
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
	bandHead := fb.headTenant() == tq && tq.waiters.Front() == w.telem
	tq.waiters.Remove(w.telem)
	w.tq, w.telem = nil, nil
	if tq.waiters.Len() == 1 {
		fb.multi.Remove(tq.multi)
		tq.multi = nil
	}
	if n := c.tenantQueued[w.tenant] - 1; n > 0 {
		c.tenantQueued[w.tenant] = n
	} else {
		delete(c.tenantQueued, w.tenant) // tenant names do not accumulate
	}
	if isHead && w.state == granted {
		tq.deficit--
		tq.fresh = false
	}
	fb.n--
	switch {
	case fb.n == 0:
		// Idle tenants and debts go with the last waiter: an empty band owes
		// nobody. Rates stay: they measure grants, not waiters.
		*fb = fairBand{tenants: fb.tenants, share: fb.share}
		clear(fb.tenants)
	case fb.cur == tq.elem && (tq.waiters.Len() == 0 || tq.deficit <= 0):
		fb.turnLocked(fb.nextLocked(tq.elem), &c.settings.Tenants)
	}
	c.shareRemoveLocked(fb, tq, w, bandHead)
}

// nextLocked is the tenant after e in the ring, wrapping (e itself when it
// is alone).
func (fb *fairBand) nextLocked(e *list.Element) *list.Element {
	if n := e.Next(); n != nil {
		return n
	}
	return fb.ring.Front()
}

// turnLocked ends the current turn and gives the next to the first tenant
// from e on with waiters and a turn left after its debt, dropping the idle
// tenants it passes that owe nothing: their place is forfeit once the turn
// has come round to them. Each turn passed repays the tenant's weight. The
// band must hold a waiter; each idle tenant is dropped once and each unit of
// debt repaid once, so this is O(1) amortised.
func (fb *fairBand) turnLocked(e *list.Element, ts *TenantSettings) {
	old := fb.cur.Value.(*tenantQueue)
	old.debt += max(0, old.quantum-old.deficit-ts.weight(old.name)) // a burst's grants beyond the weight
	if fb.cur == fb.freshTail {
		fb.freshTail = nil // the last new tenant had its turn
	}
	for {
		tq := e.Value.(*tenantQueue)
		if e == fb.freshTail {
			fb.freshTail = nil // the new tenants before it had their turns; it has none left
		}
		w := ts.weight(tq.name)
		next := fb.nextLocked(e)
		switch {
		case tq.debt >= w || (tq.debt > 0 && tq.waiters.Len() == 0):
			tq.debt = max(0, tq.debt-w) // this turn repays it
		case tq.waiters.Len() > 0:
			fb.cur = e
			fb.startTurnLocked(tq, ts)
			return
		default:
			fb.ring.Remove(e)
			delete(fb.tenants, tq.name)
		}
		e = next
	}
}

// startTurnLocked gives tq, now fb.cur, its turn's grants: a burst if it is
// new, else its weight less what it still owes.
func (fb *fairBand) startTurnLocked(tq *tenantQueue, ts *TenantSettings) {
	if tq.fresh {
		tq.quantum = ts.burst(tq.name)
	} else {
		tq.quantum, tq.debt = ts.weight(tq.name)-tq.debt, 0
	}
	tq.deficit = tq.quantum
}

// refairLocked rebuilds the per-tenant structures of every queue from the
// arrival lists, after tenancy was turned on or off live. Turns restart.
func (c *Controller) refairLocked() {
	clear(c.tenantQueued)
	for _, q := range c.active {
		q.fair = [MaxBands]fairBand{} // rates restart too
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
// as they are served first. In share mode, for a tenant still under its share when the newcomer's
// turn comes, that is share.go's prediction (shareAheadLocked). Otherwise, the round robin's: its
// tenant's n waiters ahead take n/w (its weight) turns, in each of which every other tenant o gets
// up to its weight w_o; a new tenant waits for the new tenants before it and the current turn.
// O(tenants with 2 waiters or more, and new tenants).
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
	tq := fb.tenants[tenant]
	if c.shareOn() {
		mine := 0
		if tq != nil {
			mine = tq.waiters.Len()
		}
		if ahead, ok := c.shareAheadLocked(fb, tenant, mine); ok {
			return pos - q.bands[nb].Len() + ahead
		}
	}
	if tq == nil {
		// A new tenant is served after the new tenants before it, and after the
		// current turn unless it takes the turn at once (fairAddLocked).
		ahead := 0
		if fb.freshTail != nil || !fb.turnUnstartedLocked() {
			cur := fb.cur.Value.(*tenantQueue)
			ahead = min(cur.waiters.Len(), max(cur.deficit, 1))
		}
		for e := fb.cur.Next(); fb.freshTail != nil && e != nil; e = e.Next() {
			f := e.Value.(*tenantQueue)
			ahead += min(f.waiters.Len(), ts.burst(f.name))
			if e == fb.freshTail {
				break
			}
		}
		return pos - q.bands[nb].Len() + ahead
	}
	// Every waiter of the band is ahead but those beyond another tenant's
	// turns*w_o, which only a tenant with 2 waiters or more can have.
	turns := tq.waiters.Len()/ts.weight(tenant) + 1 // the newcomer is served in this turn of its tenant
	ahead := fb.n
	for e := fb.multi.Front(); e != nil; e = e.Next() {
		if o := e.Value.(*tenantQueue); o != tq {
			ahead -= max(0, o.waiters.Len()-turns*ts.weight(o.name))
		}
	}
	return pos - q.bands[nb].Len() + ahead
}
