package admission

import (
	"container/heap"
	"container/list"
	"math"
	"time"
)

// Under-share first (TenantSettings.UnderShareFirst). Deficit round robin
// shares grants per round, so a quiet tenant whose place is still in the
// ring waits up to a round behind a flood, and its burst goes one a round.
// Max-min fairness asks less and gives the quiet more: a tenant under its
// share is never delayed by one over it. So each band measures its tenants'
// recent grant rates (an exponentially weighted moving average with time
// constant shareWindow, on the controller's clock) and the band's total; a
// tenant with waiters whose rate is below w/W of the total (W: the weights
// of the tenants waiting or granted within the window) is under share, and
// the head is the front waiter of the under-share tenant with the lowest
// rate per weight (the most under-served; ties: waiting longest); with none,
// the round robin's head as before.
//
// The head changes only when it leaves (granted, cancelled, timed out) or
// when a tenant that starts waiting ranks before it, so head-only selection, poll timers and wake-ups
// work unchanged.
//
// Bound: a tenant is put first only while its measured rate is under its
// share, so it gets no more than its share plus what the average's lag lets
// through; a tenant sending one request each time it is served cannot turn
// that into more (TestTenantUnderShareGamingBound). Grants given this way do
// not spend the round robin's turns: they are what max-min fairness owes.
//
// Rates measure grants, not waiters: a queue dropped as it empties leaves
// its rates for the next queue of its key (keepSharesLocked), so a flood
// that pauses until nobody waits is still over its share when it is back.
//
// Early rejection predicts a newcomer's position from the same order
// (shareAhead): while its tenant stays under its share, only the
// tenants whose rate per weight is below its own count before it.
//
// Cost: O(log tenants) per grant and per tenant starting to wait. Rates are
// kept in one epoch's scale (score = rate/w times e^((now-epoch)/window)),
// so comparing two tenants, or one with the threshold, needs no decay.

// shareWindow is the averages' time constant: long enough to span several
// grants of a quiet tenant, short enough that a flood's past does not
// shelter it for long.
const shareWindow = 2 * time.Second

// shareState is one band's rates and its under-share head. It is shared by
// pointer: its lists must not be copied.
type shareState struct {
	tenants map[string]*shareTenant // waiting, or granted within 5 windows
	waiting shareHeap               // the tenants with waiters, lowest score first
	recent  list.List               // of *shareTenant granted within the window, by last grant
	old     list.List               // of *shareTenant granted 1-5 windows ago, by last grant
	epoch   time.Time
	total   float64      // the band's grants per window, in the epoch's scale
	weights int          // W: of the tenants waiting or in recent
	head    *tenantQueue // the under-share tenant whose front is the head; nil: the round robin's
}

// shareTenant is one tenant's rate in one band.
type shareTenant struct {
	name   string
	weight int
	score  float64 // grants per window per weight, in the epoch's scale
	since  uint64  // seq of its front when it started waiting: the tie-break
	last   time.Time
	in     *list.List    // recent, old or nil
	elem   *list.Element // in in
	hidx   int           // in waiting; -1: not waiting
	recent bool          // in recent
}

func (t *shareTenant) counted() bool { return t.hidx >= 0 || t.recent }

// count adds or takes t's weight from W around a change of its state.
func (s *shareState) count(t *shareTenant, was bool) {
	switch now := t.counted(); {
	case now && !was:
		s.weights += t.weight
	case was && !now:
		s.weights -= t.weight
	}
}

// expire moves the tenants whose last grant left the window out of W and
// forgets those gone 5 windows that are not waiting. O(1) amortised.
func (s *shareState) expire(now time.Time) {
	for e := s.recent.Front(); e != nil && now.Sub(e.Value.(*shareTenant).last) >= shareWindow; e = s.recent.Front() {
		t := e.Value.(*shareTenant)
		s.recent.Remove(e)
		was := t.counted()
		t.recent, t.in, t.elem = false, &s.old, s.old.PushBack(t)
		s.count(t, was)
	}
	for e := s.old.Front(); e != nil && now.Sub(e.Value.(*shareTenant).last) >= 5*shareWindow; e = s.old.Front() {
		t := e.Value.(*shareTenant)
		s.old.Remove(e)
		t.in, t.elem = nil, nil
		if t.hidx < 0 {
			delete(s.tenants, t.name) // its rate is below 1 % of one grant per window
		}
	}
}

func (s *shareState) get(name string, weight int) *shareTenant {
	if s.tenants == nil {
		s.tenants = make(map[string]*shareTenant)
	}
	t := s.tenants[name]
	if t == nil {
		t = &shareTenant{name: name, weight: weight, hidx: -1}
		s.tenants[name] = t
	}
	return t
}

// enter records that tenant, of weight, started waiting with its front seq.
func (s *shareState) enter(name string, weight int, seq uint64) *shareTenant {
	t := s.get(name, weight)
	was := t.counted()
	t.since = seq
	heap.Push(&s.waiting, t)
	s.count(t, was)
	return t
}

// leave records that tenant has no waiter left.
func (s *shareState) leave(name string) {
	t := s.tenants[name]
	if t == nil || t.hidx < 0 {
		return
	}
	was := t.counted()
	heap.Remove(&s.waiting, t.hidx)
	s.count(t, was)
	if t.in == nil {
		delete(s.tenants, t.name)
	}
}

// grant records one grant to tenant at now; last says it was its last
// waiter (it leaves the heap here, once, rather than moving in it first).
func (s *shareState) grant(name string, weight int, now time.Time, last bool) {
	if s.epoch.IsZero() || now.Sub(s.epoch) > 20*shareWindow {
		s.rebase(now)
	}
	f := s.scale(now)
	t := s.get(name, weight)
	t.score += f / float64(weight)
	s.total += f
	was := t.counted()
	switch {
	case t.hidx >= 0 && last:
		heap.Remove(&s.waiting, t.hidx)
	case t.hidx >= 0:
		heap.Fix(&s.waiting, t.hidx)
	}
	if t.in == &s.recent {
		s.recent.MoveToBack(t.elem) // no allocation per grant
	} else {
		if t.in != nil {
			t.in.Remove(t.elem)
		}
		t.recent, t.in = true, &s.recent
		t.elem = s.recent.PushBack(t)
	}
	t.last = now
	s.count(t, was) // recent now: still in W if it left the heap
	s.expire(now)
}

// rebase moves the scores to now's scale, before e^(age/window) grows large;
// every 20 windows, O(tenants). Uniform scaling keeps the heap's order.
func (s *shareState) rebase(now time.Time) {
	if !s.epoch.IsZero() {
		f := 1 / s.scale(now)
		for _, t := range s.tenants {
			t.score *= f
		}
		s.total *= f
	}
	s.epoch = now
}

func (s *shareState) scale(now time.Time) float64 {
	return math.Exp(float64(now.Sub(s.epoch)) / float64(shareWindow))
}

// under reports whether t's rate is below its share w/W of the total.
func (s *shareState) under(t *shareTenant) bool {
	return s.weights > 0 && t.score*float64(s.weights) < s.total
}

// lowest is the waiting tenant with the lowest rate per weight, if it is
// under share; else nil.
func (s *shareState) lowest(now time.Time) *shareTenant {
	s.expire(now)
	if len(s.waiting) == 0 || !s.under(s.waiting[0]) {
		return nil
	}
	return s.waiting[0]
}

// shareHeap is a min-heap of tenants by score, then by waiting longest.
type shareHeap []*shareTenant

func (h shareHeap) Len() int { return len(h) }
func (h shareHeap) Less(i, j int) bool {
	if h[i].score != h[j].score {
		return h[i].score < h[j].score
	}
	return h[i].since < h[j].since
}
func (h shareHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hidx, h[j].hidx = i, j
}
func (h *shareHeap) Push(x any) {
	t := x.(*shareTenant)
	t.hidx = len(*h)
	*h = append(*h, t)
}
func (h *shareHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.hidx = -1
	return t
}

// shareOrder serves under-share tenants first, else its round robin's head.
type shareOrder struct {
	rr  *roundRobin
	s   *shareState
	now func() time.Time
}

var _ order = (*shareOrder)(nil)

// newShareOrder starts a band's order with the rates s kept from the band's
// previous queue of the same key (nil: none).
func newShareOrder(ts *TenantSettings, s *shareState, now func() time.Time) *shareOrder {
	if s == nil {
		s = &shareState{}
	}
	s.head = nil // the tenants it named went with the old queue
	return &shareOrder{rr: newRoundRobin(ts), s: s, now: now}
}

// headTenant is the tenant whose front waiter is the head.
func (o *shareOrder) headTenant() *tenantQueue {
	if o.s.head != nil {
		return o.s.head
	}
	return o.rr.cur.Value.(*tenantQueue)
}

func (o *shareOrder) head() *waiter {
	if o.s.head != nil {
		return o.s.head.waiters.Front().Value.(*waiter)
	}
	return o.rr.head()
}

func (o *shareOrder) len() int { return o.rr.n }

// push queues w in the round robin; a tenant that starts waiting takes the
// head when it is under share and ranks before the under-share head, if any.
func (o *shareOrder) push(w *waiter) {
	o.rr.push(w)
	tq := w.tq
	if tq.waiters.Len() != 1 {
		return
	}
	o.s.enter(tq.name, o.rr.ts.weight(tq.name), w.seq)
	if t := o.s.lowest(o.now()); t != nil && t.name == tq.name {
		o.s.head = tq
	}
}

// remove records a waiter leaving (granted or not) and, when it was the
// head, chooses the next under-share head.
func (o *shareOrder) remove(w *waiter) {
	tq := w.tq
	wasHead := o.headTenant() == tq && tq.waiters.Front() == w.telem
	o.rr.remove(w)
	s, now := o.s, o.now()
	if w.state == granted {
		s.grant(tq.name, o.rr.ts.weight(tq.name), now, tq.waiters.Len() == 0)
	}
	if tq.waiters.Len() == 0 {
		s.leave(tq.name)
	}
	if !wasHead && s.head != nil {
		return
	}
	s.head = nil
	if t := s.lowest(now); t != nil {
		s.head = o.rr.tenants[t.name]
	}
}

// ahead is share mode's prediction (shareAhead) while the newcomer's tenant
// stays under its share, else the round robin's.
func (o *shareOrder) ahead(nc newcomer) int {
	if o.rr.cur == nil {
		return 0
	}
	mine := 0
	if tq := o.rr.tenants[nc.tenant]; tq != nil {
		mine = tq.waiters.Len()
	}
	if n, ok := o.shareAhead(nc.tenant, mine); ok {
		return n
	}
	return o.rr.ahead(nc)
}

// keepSharesLocked keeps the rates of q, dropped as it empties, for the
// next queue of its key, so that a flood's rate outlives a moment with
// nobody waiting; rates with no grant for 5 windows are forgotten. It also
// forgets the kept rates gone stale meanwhile: O(keys kept), as queues
// empty.
func (c *Controller) keepSharesLocked(q *queue) {
	if fairnessOf(&c.settings) != byShare {
		return
	}
	now := c.now()
	for key, kept := range c.qs.kept {
		if !liveShares(kept, now) {
			delete(c.qs.kept, key)
		}
	}
	kept := new([MaxBands]*shareState)
	for b, f := range q.order.fair {
		if o, ok := f.(*shareOrder); ok {
			kept[b] = o.s
		}
	}
	if liveShares(kept, now) {
		if c.qs.kept == nil {
			c.qs.kept = make(map[string]*[MaxBands]*shareState)
		}
		c.qs.kept[q.key] = kept
	}
}

// restoreSharesLocked gives a new queue the rates kept for its key.
func (c *Controller) restoreSharesLocked(q *queue) {
	kept := c.qs.kept[q.key]
	if kept == nil {
		return
	}
	delete(c.qs.kept, q.key)
	for b, s := range kept {
		if s != nil && q.order.kind == byShare {
			q.order.fair[b] = newShareOrder(&c.settings.Tenants, s, c.now)
		}
	}
}

// liveShares reports whether some band of kept still has a tenant granted
// within 5 windows.
func liveShares(kept *[MaxBands]*shareState, now time.Time) bool {
	for _, s := range kept {
		if s != nil {
			s.expire(now)
			if s.recent.Len() > 0 || s.old.Len() > 0 {
				return true
			}
		}
	}
	return false
}

// shareAhead predicts, for early rejection, how many waiters of the band are
// granted before a newcomer of tenant, which has mine waiters ahead of it in
// the band; ok is false when its tenant would not be under its share by then
// (the round robin's prediction applies). Its tenant's rate per weight, lifted
// by the mine grants before it, is the newcomer's level: each other waiting
// tenant below that level is served until it reaches it (at most its
// waiters), nobody above it is, and the head, which keeps its place until it
// leaves, goes first. Grants are counted at now's scale, without the decay
// until they are made. O(tenants below the level): the heap is walked only
// where it holds them.
func (o *shareOrder) shareAhead(tenant string, mine int) (ahead int, ok bool) {
	s := o.s
	if s.epoch.IsZero() {
		return 0, false // no grant measured yet: nobody is under share
	}
	now := o.now()
	s.expire(now)
	p := sharePrediction{o: o, tenant: tenant, since: math.MaxUint64} // a newcomer's front is the latest
	w, weights := o.rr.ts.weight(tenant), s.weights
	if t := s.tenants[tenant]; t != nil {
		p.level, w = t.score, t.weight
		if t.hidx >= 0 {
			p.since = t.since
		}
		if !t.counted() {
			weights += w
		}
	} else {
		weights += w
	}
	if p.level*float64(weights) >= s.total {
		return 0, false // over its share already
	}
	p.step = s.scale(now)
	p.level += float64(mine) * p.step / float64(w)
	p.head = o.headTenant()
	p.walk(0)
	ahead = mine + p.ahead
	if p.head.name != tenant && !p.headSeen && ahead > 0 {
		ahead++ // the head leaves first; a newcomer with nobody before it takes its place
	}
	if p.level*float64(weights) >= s.total+float64(ahead)*p.step {
		return 0, false // over its share by its turn
	}
	return ahead, true
}

// sharePrediction is shareAhead's walk of the waiting heap.
type sharePrediction struct {
	o        *shareOrder
	tenant   string
	level    float64      // the newcomer's tenant's score when the newcomer is its front
	since    uint64       // its tie-break
	step     float64      // one grant's score per weight unit, at now's scale
	head     *tenantQueue // the band's head's tenant
	ahead    int          // the other tenants' grants before the newcomer
	headSeen bool         // the head's tenant is among them
}

// walk counts the tenants below the level in the subtree of the heap at i;
// a node above it has only tenants above it below.
func (p *sharePrediction) walk(i int) {
	h := p.o.s.waiting
	if i >= len(h) {
		return
	}
	t := h[i]
	if t.score > p.level || (t.score == p.level && t.since > p.since) {
		return
	}
	if tq := p.o.rr.tenants[t.name]; t.name != p.tenant && tq != nil {
		// Its grants until its score reaches the level, and one more if it
		// wins the tie there (it has waited longer).
		x := (p.level - t.score) * float64(t.weight) / p.step
		if r := math.Round(x); math.Abs(x-r) < 1e-9 {
			x = r // sums of equal steps: a tie, not a rounding error
		}
		n := int(math.Ceil(x))
		if t.since < p.since {
			n = int(math.Floor(x)) + 1
		}
		p.ahead += min(n, tq.waiters.Len())
		p.headSeen = p.headSeen || tq == p.head
	}
	p.walk(2*i + 1)
	p.walk(2*i + 2)
}
