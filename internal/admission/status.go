package admission

import (
	"errors"
	"maps"
	"math"
	"slices"
	"time"
)

// Status is a snapshot for the admin API.
type Status struct {
	Settings Settings
	// Queued is the number of waiters per queue key (non-empty queues only);
	// QueuedTotal is their sum, the value bounded by QueueSize.
	Queued      map[string]int
	QueuedTotal int
	// Inflight is the number of slots held per known worker.
	Inflight map[string]int
	// InflightTokens is the estimated prompt tokens held per known worker.
	InflightTokens map[string]int64
	// Limits is each known worker's current request limit: its adaptive
	// limit with Settings.Adaptive on, else the configured one (<= 0: none).
	Limits map[string]int
	// QueuedByBand is the number of waiters per band name (with two or more
	// bands; their arrival band).
	QueuedByBand map[string]int
	// Rejections counts gateway refusals by Outcome label (queue_full,
	// queue_timeout; predicted_timeout with early rejection, displaced with
	// priority bands) since start.
	Rejections map[string]uint64
	// Cancelled counts waiters whose context ended while queued.
	Cancelled uint64
	// Wait summarises the most recent waits (see Metrics.ObserveWait).
	Wait WaitStats
	// RetryAfter is the current RetryAfter estimate.
	RetryAfter time.Duration
	// ReleaseRate is the measured slot-release rate (per second) behind
	// RetryAfter and early rejection; 0 while unknown.
	ReleaseRate float64

	// Seats is the number of decode seats held per known decode worker key
	// and SeatLimits each one's bound (<= 0: none), with decode seats on.
	Seats      map[string]int
	SeatLimits map[string]int
	// DecodeCapacity is each decode worker's known window and KV capacity.
	DecodeCapacity map[string]DecodeCapacity
	// SeatReleaseRate is the measured seat-release rate behind the
	// Retry-After of decode rejections; 0 while unknown.
	SeatReleaseRate float64

	// QueuedByTenant is the number of waiters per tenant over all queues,
	// with tenancy on (Settings.Tenants); nil otherwise.
	QueuedByTenant map[string]int
}

// WaitStats are percentiles over the last waitRingSize observed waits.
type WaitStats struct {
	Count         int
	P50, P90, P99 time.Duration
}

// Status returns a consistent snapshot.
func (c *Controller) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := Status{
		Settings:       c.settings.Clone(),
		Queued:         make(map[string]int, len(c.qs.byKey)),
		QueuedTotal:    c.qs.n,
		Inflight:       make(map[string]int, len(c.gate.workers)),
		InflightTokens: make(map[string]int64, len(c.gate.workers)),
		Limits:         make(map[string]int, len(c.gate.workers)),
		QueuedByBand:   map[string]int{},
		Rejections:     make(map[string]uint64, 3),
		Cancelled:      c.stats.cancelled,
		Wait:           c.stats.waits.stats(),
		RetryAfter:     c.retryAfterLocked(),
	}
	if c.settings.Tenants.on() {
		st.QueuedByTenant = maps.Clone(c.qs.byTenant)
		if st.QueuedByTenant == nil {
			st.QueuedByTenant = map[string]int{}
		}
	}
	if rate, ok := c.stats.releases.rate(c.now()); ok {
		st.ReleaseRate = rate
	}
	for k, q := range c.qs.byKey {
		st.Queued[k] = q.order.len()
	}
	for k, ws := range c.gate.workers {
		st.Inflight[k] = ws.inflight
		st.InflightTokens[k] = ws.tokens
		st.Limits[k] = c.gate.limit(ws)
	}
	if n := c.settings.numBands(); n > 1 {
		for b, k := range c.qs.byBand {
			st.QueuedByBand[c.settings.BandName(min(b, n-1))] += k
		}
	}
	c.seatStatusLocked(&st)
	c.rejectionStatusLocked(st.Rejections)
	return st
}

// seatStatusLocked fills in the decode seats, with seats on or held.
func (c *Controller) seatStatusLocked(st *Status) {
	if !c.settings.SeatsOn() && len(c.gate.seats) == 0 {
		return
	}
	st.Seats = make(map[string]int, len(c.gate.seats))
	st.SeatLimits = make(map[string]int, len(c.gate.seats))
	for k, ss := range c.gate.seats {
		st.Seats[k] = ss.inflight
		st.SeatLimits[k] = c.gate.seatLimit(k)
	}
	for k := range c.gate.decCap {
		if _, ok := st.SeatLimits[k]; !ok {
			st.Seats[k] = 0
			st.SeatLimits[k] = c.gate.seatLimit(k)
		}
	}
	st.DecodeCapacity = maps.Clone(c.gate.decCap)
	if rate, ok := c.stats.seatReleases.rate(c.now()); ok {
		st.SeatReleaseRate = rate
	}
}

// rejectionStatusLocked counts the rejections into m by outcome label: the
// source contract's always, a feature's while it is on or has counted.
func (c *Controller) rejectionStatusLocked(m map[string]uint64) {
	r := &c.stats.rejections
	for _, o := range []Outcome{QueueFull, QueueTimeout} {
		m[o.String()] = r[o]
	}
	if c.settings.SeatsOn() || r[DecodeQueueFull]+r[DecodeQueueTimeout] > 0 {
		m[DecodeQueueFull.String()] = r[DecodeQueueFull]
		m[DecodeQueueTimeout.String()] = r[DecodeQueueTimeout]
	}
	if c.settings.EarlyRejection || r[PredictedTimeout] > 0 {
		m[PredictedTimeout.String()] = r[PredictedTimeout]
	}
	if c.settings.numBands() > 1 || r[Displaced] > 0 {
		m[Displaced.String()] = r[Displaced]
	}
}

// RetryAfter estimates how long a rejected client should wait before
// trying again: the time for the current queue (at least one request) to
// drain at the measured slot-release rate, clamped to [1s, QueueTimeout].
// It is 1 s while the rate is unknown.
func (c *Controller) RetryAfter() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.retryAfterLocked()
}

// RetryAfterFor is RetryAfter for the side that rejected err: a decode
// rejection (pd_decode_queue_*) from the measured seat-release rate, any
// other error as RetryAfter.
func (c *Controller) RetryAfterFor(err error) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if errors.Is(err, ErrDecodeQueueFull) || errors.Is(err, ErrDecodeQueueTimeout) {
		return c.retryAfterFromLocked(&c.stats.seatReleases)
	}
	return c.retryAfterLocked()
}

func (c *Controller) retryAfterLocked() time.Duration {
	return c.retryAfterFromLocked(&c.stats.releases)
}

func (c *Controller) retryAfterFromLocked(r *rateEstimator) time.Duration {
	const floor = time.Second
	rate, ok := r.rate(c.now())
	if !ok || rate <= 0 {
		return floor
	}
	ceil := max(c.settings.QueueTimeout, floor)
	secs := float64(max(c.qs.n, 1)) / rate
	if secs >= ceil.Seconds() {
		return ceil
	}
	return max(time.Duration(secs*float64(time.Second)), floor)
}

// rateTau is the release-rate EWMA time constant: long enough to smooth
// bursts of releases, short enough to follow load changes.
const rateTau = 10 * time.Second

// rateEstimator is a time-decayed event rate (events per second), bias
// corrected for its start-up so the first seconds are not underestimated.
// The idle time since the last event counts, so a stall lowers the rate.
type rateEstimator struct {
	tau         time.Duration
	acc         float64 // decayed event count as of last
	first, last time.Time
	n           int
}

func (r *rateEstimator) observe(now time.Time) {
	if r.n == 0 {
		// The first event starts the clock; counting it would add one event
		// too many over the elapsed span.
		r.first, r.last, r.n = now, now, 1
		return
	}
	dt := max(now.Sub(r.last), 0)
	r.acc = r.acc*math.Exp(-dt.Seconds()/r.tau.Seconds()) + 1
	r.last = now
	r.n++
}

func (r *rateEstimator) rate(now time.Time) (float64, bool) {
	if r.n < 2 {
		return 0, false
	}
	elapsed := now.Sub(r.first).Seconds()
	if elapsed <= 0 {
		return 0, false
	}
	tau := r.tau.Seconds()
	idle := max(now.Sub(r.last).Seconds(), 0)
	decayed := r.acc * math.Exp(-idle/tau)
	norm := tau * (1 - math.Exp(-elapsed/tau))
	return decayed / norm, true
}

// waitRingSize bounds the memory of recent waits.
const waitRingSize = 1024

type waitRing struct {
	buf  [waitRingSize]time.Duration
	next int
	full bool
}

func (w *waitRing) add(d time.Duration) {
	w.buf[w.next] = d
	w.next++
	if w.next == waitRingSize {
		w.next, w.full = 0, true
	}
}

func (w *waitRing) stats() WaitStats {
	n := w.next
	if w.full {
		n = waitRingSize
	}
	if n == 0 {
		return WaitStats{}
	}
	s := slices.Clone(w.buf[:n])
	slices.Sort(s)
	at := func(p float64) time.Duration { return s[int(math.Ceil(p*float64(n)))-1] }
	return WaitStats{Count: n, P50: at(0.50), P90: at(0.90), P99: at(0.99)}
}
