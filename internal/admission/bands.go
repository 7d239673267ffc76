package admission

import "time"

// Priority bands with aging. A queue keeps one FIFO per priority band (the
// band a request arrived in). Waiters are ranked by effective band, highest
// first, then by arrival: the effective band is the arrival band raised by
// one per Settings.Aging waited, capped at the top band. Hence:
//
//   - within a band, arrival order always holds (the older waiter has aged at
//     least as much), so a band ranks by its oldest waiter;
//   - a higher band goes first, until aging lifts an older low-band waiter to
//     the same effective band, where its earlier arrival wins;
//   - a waiter of band b reaches the top after (top-b) x Aging, and from then
//     on nobody who arrived later is ranked before it: that is the aging
//     bound on starvation.
//
// The band ranked first then gives its head through its fairness order
// (order.go); with one band and no fairness all of this reduces to the
// single FIFO of the source contract. The ranking depends on the clock only
// through aging, so the head is recomputed (O(bands)) wherever it matters
// rather than stored; a head that aging displaces notices at its next poll.
type bands struct {
	s    *Settings // the controller's (numBands, Aging), read under its lock
	now  func() time.Time
	fifo [MaxBands]fifo  // arrival order, by arrival band
	fair [MaxBands]order // each band's fairness order, made at its first waiter; nil: its fifo
	kind fairness        // the fairness orders' policy
	n    int
}

// fairness names a band's fairness order.
type fairness uint8

const (
	byArrival    fairness = iota // fifo
	byRoundRobin                 // roundRobin (TenantSettings.Fair)
	byShare                      // shareOrder (TenantSettings.UnderShareFirst)
)

// fairnessOf is the fairness s asks for.
func fairnessOf(s *Settings) fairness {
	switch ts := &s.Tenants; {
	case ts.Fair && ts.UnderShareFirst:
		return byShare
	case ts.Fair:
		return byRoundRobin
	}
	return byArrival
}

// newFair makes band i's fairness order; nil: its fifo.
func (b *bands) newFair(int) order {
	switch b.kind {
	case byRoundRobin:
		return newRoundRobin(&b.s.Tenants)
	case byShare:
		return newShareOrder(&b.s.Tenants, nil, b.now)
	}
	return nil
}

var _ order = (*bands)(nil)

// within is band i's fairness order.
func (b *bands) within(i int) order {
	if f := b.fair[i]; f != nil {
		return f
	}
	return &b.fifo[i]
}

func (b *bands) push(w *waiter) {
	b.fifo[w.band].push(w)
	if b.fair[w.band] == nil && b.kind != byArrival {
		b.fair[w.band] = b.newFair(w.band)
	}
	if f := b.fair[w.band]; f != nil {
		f.push(w)
	}
	b.n++
}

func (b *bands) remove(w *waiter) {
	if f := b.fair[w.band]; f != nil {
		f.remove(w)
	}
	b.n--
	b.fifo[w.band].remove(w)
}

func (b *bands) len() int { return b.n }

// refill rebuilds the fairness orders of kind from the arrival lists, after
// the fairness changed live (turns and rates restart).
func (b *bands) refill(kind fairness) {
	b.kind, b.fair = kind, [MaxBands]order{}
	if kind == byArrival {
		return
	}
	for i := range b.fifo {
		b.fifo[i].each(func(w *waiter) bool {
			w.tq, w.telem = nil, nil
			if b.fair[i] == nil {
				b.fair[i] = b.newFair(i)
			}
			b.fair[i].push(w)
			return true
		})
	}
}

// effBand returns w's band raised by aging at now, capped at the top band.
func (b *bands) effBand(w *waiter, now time.Time) int {
	top := b.s.numBands() - 1
	eb := min(w.band, top)
	if a := b.s.Aging; a > 0 && eb < top {
		eb = min(eb+int(now.Sub(w.enq)/a), top)
	}
	return eb
}

// front is the oldest waiter of the band ranked first; nil when empty.
func (b *bands) front() *waiter {
	var (
		best     *waiter
		bestBand int
		now      time.Time
	)
	for i := range b.fifo {
		w := b.fifo[i].head()
		if w == nil {
			continue
		}
		if best == nil {
			best = w
			continue
		}
		if now.IsZero() { // two bands hold waiters: compare (rare; costs a clock read)
			now = b.now()
			bestBand = b.effBand(best, now)
		}
		if eb := b.effBand(w, now); eb > bestBand || (eb == bestBand && w.seq < best.seq) {
			best, bestBand = w, eb
		}
	}
	return best
}

// head is the head of the band ranked first, by its fairness order.
func (b *bands) head() *waiter {
	f := b.front()
	if f == nil {
		return nil
	}
	return b.within(f.band).head()
}

// outranks reports whether a request of band arriving now would be ranked
// before the head: only a strictly higher band can be, since the head
// arrived earlier.
func (b *bands) outranks(band int) bool {
	if b.s.numBands() == 1 {
		return false
	}
	f := b.front() // a band ranks by its oldest waiter
	return f != nil && min(band, b.s.numBands()-1) > b.effBand(f, b.now())
}

// ranked counts the waiters ranked at or above band now: those a newcomer
// of band goes behind.
func (b *bands) ranked(band int) int {
	if b.s.numBands() == 1 {
		return b.n
	}
	now := b.now()
	nb := min(band, b.s.numBands()-1)
	n := 0
	for i := range b.fifo {
		// Along one list the effective band never increases (older first).
		b.fifo[i].each(func(w *waiter) bool {
			if b.effBand(w, now) < nb {
				return false
			}
			n++
			return true
		})
	}
	return n
}

// ahead is ranked, with the newcomer's own band counted as its fairness
// order serves it.
func (b *bands) ahead(n newcomer) int {
	nb := min(n.band, b.s.numBands()-1)
	return b.ranked(n.band) - b.fifo[nb].len() + b.within(nb).ahead(n)
}
