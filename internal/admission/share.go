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
// when a tenant that starts waiting ranks before it (fairAddLocked reports
// it as taking the turn), so head-only selection, poll timers and wake-ups
// work unchanged.
//
// Bound: a tenant is put first only while its measured rate is under its
// share, so it gets no more than its share plus what the average's lag lets
// through; a tenant sending one request each time it is served cannot turn
// that into more (TestTenantUnderShareGamingBound). Grants given this way do
// not spend the round robin's turns: they are what max-min fairness owes.
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

// grant records one grant to tenant at now.
func (s *shareState) grant(name string, weight int, now time.Time) {
	if s.epoch.IsZero() || now.Sub(s.epoch) > 20*shareWindow {
		s.rebase(now)
	}
	f := s.scale(now)
	t := s.get(name, weight)
	t.score += f / float64(weight)
	s.total += f
	if t.hidx >= 0 {
		heap.Fix(&s.waiting, t.hidx)
	}
	was := t.counted()
	if t.in != nil {
		t.in.Remove(t.elem)
	}
	t.last, t.recent, t.in = now, true, &s.recent
	t.elem = s.recent.PushBack(t)
	s.count(t, was)
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

// shareOn reports whether the band serves under-share tenants first.
func (c *Controller) shareOn() bool {
	ts := &c.settings.Tenants
	return ts.Fair && ts.UnderShareFirst
}

// shareEnterLocked records that tq started waiting (its first waiter w) and
// reports whether it takes the head: it is under share and ranks before the
// under-share head, if any.
func (c *Controller) shareEnterLocked(fb *fairBand, tq *tenantQueue, w *waiter) bool {
	if !c.shareOn() {
		return false
	}
	if fb.share == nil {
		fb.share = &shareState{}
	}
	s := fb.share
	s.enter(tq.name, c.settings.Tenants.weight(tq.name), w.seq)
	if t := s.lowest(c.now()); t != nil && t.name == tq.name {
		s.head = tq
		return true
	}
	return false
}

// shareRemoveLocked records a waiter of tq leaving (granted or not) and,
// when it was the band's head, chooses the next under-share head. The
// round robin's state is already updated.
func (c *Controller) shareRemoveLocked(fb *fairBand, tq *tenantQueue, w *waiter, bandHead bool) {
	s := fb.share
	if s == nil || !c.shareOn() {
		return
	}
	now := c.now()
	if w.state == granted {
		s.grant(tq.name, c.settings.Tenants.weight(tq.name), now)
	}
	if tq.waiters.Len() == 0 {
		s.leave(tq.name)
	}
	if !bandHead && s.head != nil {
		return
	}
	s.head = nil
	if t := s.lowest(now); t != nil {
		s.head = fb.tenants[t.name]
	}
}
