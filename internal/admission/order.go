package admission

// Head ordering, after llm-d's flow control (band, then fairness, then
// ordering, each a policy behind a small interface; the controller only
// orchestrates): every queue ranks its waiters with a [bands] order, which
// picks a priority band by rank with aging (bands.go) and asks that band's
// fairness order for its head. A band's fairness order is one of
//
//   - fifo (fifo.go): arrival order, the source contract;
//   - roundRobin (roundrobin.go): weighted deficit round robin across
//     tenants, FIFO within a tenant (TenantSettings.Fair);
//   - shareOrder (share.go): under-share tenants first, most under-served
//     first, else the round robin (TenantSettings.UnderShareFirst).
//
// An order only ranks: it never selects, grants or touches capacity (the
// gate's job), and it runs under the controller's lock. The arrival lists
// bands keeps are also the waiter lists (fifo.go, on waitq): taking out a
// waiter the controller has granted or failed takes it as answered, and the
// controller then wakes it (removeLocked). Only its head
// selects, so an order may move its head only when a waiter arrives or
// leaves; the controller compares the head before and after and promotes a
// new one.

// order ranks waiters of one queue.
type order interface {
	// push adds w, the newest waiter.
	push(w *waiter)
	// remove takes w out; w.state == granted says it was served.
	remove(w *waiter)
	// head is the waiter that selects next; nil when empty.
	head() *waiter
	// ahead predicts how many current waiters are served before a newcomer
	// arriving now (early rejection).
	ahead(n newcomer) int
	// len is the number of waiters.
	len() int
}

// newcomer is what an order needs to know of a request not queued yet.
type newcomer struct {
	band   int
	tenant string // tenantName's
}
