package admission

import (
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
// the head is the oldest front waiter among such tenants; with none, the
// round robin's head as before.
//
// The head changes only when it leaves (granted, cancelled, timed out) or
// when a newcomer's tenant is under share while no under-share tenant has
// waiters (fairAddLocked reports it as taking the turn), so head-only
// selection, poll timers and wake-ups work unchanged. The threshold a
// newcomer is judged by is the one computed when the head last changed.
//
// Bound: a tenant is put first only while its measured rate is below its
// share, so it gets no more than its share plus what the average's lag lets
// through: at most about one grant beyond its share per window, which a
// tenant sending one request each time it is served cannot turn into more
// (TestUnderShareGamingBound). Grants given this way do not spend the round
// robin's turns: they are what max-min fairness owes the tenant anyway.
//
// Cost: finding the head scans the band's tenants once per head change,
// O(tenants of the band), not per request waiting.

// shareWindow is the averages' time constant: long enough to span several
// grants of a quiet tenant, short enough that a flood's past does not
// shelter it for long.
const shareWindow = 2 * time.Second

// shareState is one band's rates and its under-share head.
type shareState struct {
	rates     map[string]*ewmaRate // per tenant, kept while recent (also across an empty band)
	total     ewmaRate             // the band's grants
	perWeight float64              // total / W at the last scan: a tenant under w*perWeight is under share
	head      *tenantQueue         // the under-share tenant whose front is the head; nil: the round robin's
}

// ewmaRate is a rate of events, decayed continuously: value at at, in events
// per shareWindow.
type ewmaRate struct {
	value float64
	at    time.Time
}

func (r *ewmaRate) valueAt(now time.Time) float64 {
	if r.value == 0 || !now.After(r.at) {
		return r.value
	}
	return r.value * math.Exp(-float64(now.Sub(r.at))/float64(shareWindow))
}

func (r *ewmaRate) add(now time.Time) {
	r.value, r.at = r.valueAt(now)+1, now
}

// grant records one grant to tenant.
func (s *shareState) grant(tenant string, now time.Time) {
	if s.rates == nil {
		s.rates = make(map[string]*ewmaRate)
	}
	r := s.rates[tenant]
	if r == nil {
		r = &ewmaRate{}
		s.rates[tenant] = r
	}
	r.add(now)
	s.total.add(now)
}

func (s *shareState) rateAt(tenant string, now time.Time) float64 {
	if r := s.rates[tenant]; r != nil {
		return r.valueAt(now)
	}
	return 0
}

// shareScanLocked recomputes the band's threshold and under-share head, and
// forgets rates gone stale. The band holds a waiter.
func (c *Controller) shareScanLocked(fb *fairBand) {
	s := &fb.share
	s.head = nil
	ts := &c.settings.Tenants
	if !ts.Fair || !ts.UnderShareFirst {
		return
	}
	now := c.now()
	weights := 0
	for _, tq := range fb.tenants {
		if tq.waiters.Len() > 0 {
			weights += ts.weight(tq.name)
		}
	}
	for name, r := range s.rates {
		if tq := fb.tenants[name]; tq != nil && tq.waiters.Len() > 0 {
			continue
		}
		switch age := now.Sub(r.at); {
		case age < shareWindow:
			weights += ts.weight(name)
		case age > 5*shareWindow: // its rate is below 1 % of one grant per window
			delete(s.rates, name)
		}
	}
	total := s.total.valueAt(now)
	s.perWeight = 0
	if total <= 0 || weights == 0 {
		return
	}
	s.perWeight = total / float64(weights)
	var best *waiter
	for _, tq := range fb.tenants {
		e := tq.waiters.Front()
		if e == nil || s.rateAt(tq.name, now) >= s.perWeight*float64(ts.weight(tq.name)) {
			continue
		}
		if f := e.Value.(*waiter); best == nil || f.seq < best.seq {
			best = f
		}
	}
	if best != nil {
		s.head = best.tq
	}
}

// shareArriveLocked lets tq, which a waiter just joined, become the
// under-share head when there is none and it is under share by the last
// threshold; it reports whether it did.
func (c *Controller) shareArriveLocked(fb *fairBand, tq *tenantQueue) bool {
	s := &fb.share
	ts := &c.settings.Tenants
	if !ts.Fair || !ts.UnderShareFirst || s.head != nil || s.perWeight <= 0 {
		return false
	}
	if s.rateAt(tq.name, c.now()) >= s.perWeight*float64(ts.weight(tq.name)) {
		return false
	}
	s.head = tq
	return true
}
