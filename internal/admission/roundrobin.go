package admission

import "container/list"

// roundRobin is fair queueing across tenants (TenantSettings.Fair). Within one band of one
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
// unchanged. Bands still rank by their oldest waiter (bands.go): aging lifts a
// band as a whole, and the band's head is then its current tenant's front.
//
// The arrival lists (fifo.go) keep every waiter whatever the tenancy, so
// turning tenancy on or off live only rebuilds these structures from them.

type roundRobin struct {
	ts      *TenantSettings         // the controller's, read under its lock
	tenants map[string]*tenantQueue // the tenants in the ring
	ring    list.List               // of *tenantQueue, in turn order; idle ones until the turn drops them
	cur     *list.Element           // the tenant whose turn it is, one with waiters; nil iff n == 0
	// freshTail is the last of the new tenants that have not had their turn
	// yet, which stand in the ring from cur (or the one after it) to
	// freshTail; nil: none. New tenants keep their arrival order.
	freshTail *list.Element
	n         int // waiters in the band
	// multi are the tenants with 2 waiters or more: the only ones whose
	// waiters the round robin may not all serve before a newcomer's turn
	// (ahead).
	multi list.List // of *tenantQueue
}

var _ order = (*roundRobin)(nil)

func newRoundRobin(ts *TenantSettings) *roundRobin {
	return &roundRobin{ts: ts, tenants: make(map[string]*tenantQueue)}
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
	multi   *list.Element // in roundRobin.multi; nil: under 2 waiters
}

// head is the front waiter of the tenant whose turn it is.
func (rr *roundRobin) head() *waiter {
	if rr.cur == nil {
		return nil
	}
	return rr.cur.Value.(*tenantQueue).waiters.Front().Value.(*waiter)
}

func (rr *roundRobin) len() int { return rr.n }

// push queues w behind its tenant's waiters; a tenant new to the ring takes
// the turn at once when the current turn has granted nothing yet, else right
// after it (behind the other new tenants).
func (rr *roundRobin) push(w *waiter) {
	tq := rr.tenants[w.tenant]
	if tq == nil {
		tq = rr.join(w.tenant)
	}
	rr.n++
	w.tq, w.telem = tq, tq.waiters.PushBack(w)
	if tq.waiters.Len() == 2 {
		tq.multi = rr.multi.PushBack(tq)
	}
}

// join puts a tenant new to the band in the ring.
func (rr *roundRobin) join(name string) *tenantQueue {
	tq := &tenantQueue{name: name, fresh: true}
	rr.tenants[name] = tq
	tookTurn := false
	switch {
	case rr.cur == nil:
		tq.elem = rr.ring.PushBack(tq)
		rr.cur, tookTurn = tq.elem, true
	case rr.freshTail != nil:
		tq.elem = rr.ring.InsertAfter(tq, rr.freshTail)
	case rr.turnUnstarted():
		// The tenant put off keeps what it owed (or its burst): its turn
		// will be started afresh.
		if off := rr.cur.Value.(*tenantQueue); !off.fresh {
			off.debt = rr.ts.weight(off.name) - off.quantum
		}
		tq.elem = rr.ring.InsertBefore(tq, rr.cur)
		rr.cur, tookTurn = tq.elem, true
	default:
		tq.elem = rr.ring.InsertAfter(tq, rr.cur)
	}
	if tookTurn {
		rr.startTurn(tq)
	}
	rr.freshTail = tq.elem
	return tq
}

// turnUnstarted reports whether the current turn has granted nothing yet.
func (rr *roundRobin) turnUnstarted() bool {
	tq := rr.cur.Value.(*tenantQueue)
	return tq.deficit >= tq.quantum
}

// remove forgets a waiter leaving its queue; a granted waiter at the head
// spends one unit of its tenant's turn.
func (rr *roundRobin) remove(w *waiter) {
	tq := w.tq
	isHead := rr.cur == tq.elem && tq.waiters.Front() == w.telem
	tq.waiters.Remove(w.telem)
	w.tq, w.telem = nil, nil
	if tq.waiters.Len() == 1 {
		rr.multi.Remove(tq.multi)
		tq.multi = nil
	}
	if isHead && w.state == granted {
		tq.deficit--
		tq.fresh = false
	}
	rr.n--
	switch {
	case rr.n == 0:
		// Idle tenants and debts go with the last waiter: an empty band owes
		// nobody.
		*rr = roundRobin{ts: rr.ts, tenants: rr.tenants}
		clear(rr.tenants)
	case rr.cur == tq.elem && (tq.waiters.Len() == 0 || tq.deficit <= 0):
		rr.turn(rr.next(tq.elem))
	}
}

// next is the tenant after e in the ring, wrapping (e itself when it is
// alone).
func (rr *roundRobin) next(e *list.Element) *list.Element {
	if n := e.Next(); n != nil {
		return n
	}
	return rr.ring.Front()
}

// turn ends the current turn and gives the next to the first tenant from e
// on with waiters and a turn left after its debt, dropping the idle tenants
// it passes that owe nothing: their place is forfeit once the turn has come
// round to them. Each turn passed repays the tenant's weight. The band must
// hold a waiter; each idle tenant is dropped once and each unit of debt
// repaid once, so this is O(1) amortised.
func (rr *roundRobin) turn(e *list.Element) {
	ts := rr.ts
	old := rr.cur.Value.(*tenantQueue)
	old.debt += max(0, old.quantum-old.deficit-ts.weight(old.name)) // a burst's grants beyond the weight
	if rr.cur == rr.freshTail {
		rr.freshTail = nil // the last new tenant had its turn
	}
	for {
		tq := e.Value.(*tenantQueue)
		if e == rr.freshTail {
			rr.freshTail = nil // the new tenants before it had their turns; it has none left
		}
		w := ts.weight(tq.name)
		next := rr.next(e)
		switch {
		case tq.debt >= w || (tq.debt > 0 && tq.waiters.Len() == 0):
			tq.debt = max(0, tq.debt-w) // this turn repays it
		case tq.waiters.Len() > 0:
			rr.cur = e
			rr.startTurn(tq)
			return
		default:
			rr.ring.Remove(e)
			delete(rr.tenants, tq.name)
		}
		e = next
	}
}

// startTurn gives tq, now rr.cur, its turn's grants: a burst if it is new,
// else its weight less what it still owes.
func (rr *roundRobin) startTurn(tq *tenantQueue) {
	if tq.fresh {
		tq.quantum = rr.ts.burst(tq.name)
	} else {
		tq.quantum, tq.debt = rr.ts.weight(tq.name)-tq.debt, 0
	}
	tq.deficit = tq.quantum
}

// ahead predicts the waiters of the band served before a newcomer: its
// tenant's n waiters ahead take n/w (its weight) turns, in each of which
// every other tenant o gets up to its weight w_o; a new tenant waits for the
// new tenants before it and the current turn. O(tenants with 2 waiters or
// more, and new tenants).
func (rr *roundRobin) ahead(nc newcomer) int {
	if rr.cur == nil {
		return 0
	}
	ts := rr.ts
	tq := rr.tenants[nc.tenant]
	if tq == nil {
		// A new tenant is served after the new tenants before it, and after the
		// current turn unless it takes the turn at once (join).
		ahead := 0
		if rr.freshTail != nil || !rr.turnUnstarted() {
			cur := rr.cur.Value.(*tenantQueue)
			ahead = min(cur.waiters.Len(), max(cur.deficit, 1))
		}
		for e := rr.cur.Next(); rr.freshTail != nil && e != nil; e = e.Next() {
			f := e.Value.(*tenantQueue)
			ahead += min(f.waiters.Len(), ts.burst(f.name))
			if e == rr.freshTail {
				break
			}
		}
		return ahead
	}
	// Every waiter of the band is ahead but those beyond another tenant's
	// turns*w_o, which only a tenant with 2 waiters or more can have.
	turns := tq.waiters.Len()/ts.weight(nc.tenant) + 1 // the newcomer is served in this turn of its tenant
	ahead := rr.n
	for e := rr.multi.Front(); e != nil; e = e.Next() {
		if o := e.Value.(*tenantQueue); o != tq {
			ahead -= max(0, o.waiters.Len()-turns*ts.weight(o.name))
		}
	}
	return ahead
}
