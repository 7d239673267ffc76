package capacity

import "time"

// batchRing is one decode worker's busy count at each tick, as a running
// integral, so the mean batch over any recent interval is two look-ups.
type batchRing struct {
	t   [ringLen]time.Time
	cum [ringLen]float64 // ∫ busy dt up to t
	n   int              // samples written
	cur float64          // busy since the last sample
}

func (b *batchRing) add(now time.Time, busy float64) {
	if b.n > 0 {
		last := (b.n - 1) % ringLen
		dt := now.Sub(b.t[last]).Seconds()
		b.cum[b.n%ringLen] = b.cum[last] + b.cur*dt
	}
	b.t[b.n%ringLen] = now
	b.n++
	b.cur = busy
}

// at is the integral at t, interpolated; false before the oldest sample.
func (b *batchRing) at(t time.Time) (float64, bool) {
	if b.n == 0 {
		return 0, false
	}
	oldest := max(b.n-ringLen, 0)
	if t.Before(b.t[oldest%ringLen]) {
		t = b.t[oldest%ringLen]
	}
	last := (b.n - 1) % ringLen
	if !t.Before(b.t[last]) {
		return b.cum[last] + b.cur*t.Sub(b.t[last]).Seconds(), true
	}
	for i := b.n - 1; i > oldest; i-- {
		lo := (i - 1) % ringLen
		if !t.Before(b.t[lo]) {
			return b.cum[lo] + b.cur0(i-1)*t.Sub(b.t[lo]).Seconds(), true
		}
	}
	return b.cum[oldest%ringLen], true
}

// cur0 is the busy count held from sample i to sample i+1.
func (b *batchRing) cur0(i int) float64 {
	lo, hi := i%ringLen, (i+1)%ringLen
	dt := b.t[hi].Sub(b.t[lo]).Seconds()
	if dt <= 0 {
		return 0
	}
	return (b.cum[hi] - b.cum[lo]) / dt
}

// mean is the mean busy count over [from, to].
func (b *batchRing) mean(from, to time.Time) (float64, bool) {
	if b.n > 0 {
		if oldest := b.t[max(b.n-ringLen, 0)%ringLen]; from.Before(oldest) {
			from = oldest // the decode began before the history: average what is kept
		}
	}
	d := to.Sub(from).Seconds()
	if d <= 0 {
		return 0, false
	}
	a, ok1 := b.at(from)
	z, ok2 := b.at(to)
	if !ok1 || !ok2 {
		return 0, false
	}
	return (z - a) / d, true
}
