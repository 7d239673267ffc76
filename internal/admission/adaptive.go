package admission

import "time"

// Adaptive limits: each worker's request limit moves inside [Min, Max] by a
// Vegas-style rule (as in Netflix's concurrency-limits) driven by the measured
// prefill time per token.
//
// Vegas estimates the queue a limit builds as limit x (1 - noload/rtt): the
// share of each request's latency spent waiting behind others. Its weak spot
// is the no-load latency, which an always-busy worker never shows: a remembered
// minimum goes stale when the engine slows down, and periodic probes let the
// estimate drift upward under sustained load. Prefill engines give a better
// baseline for free: an engine works through admitted prefills back to back,
// so while a worker stays busy the time between two consecutive releases is
// the engine's own service time of the released request. Per token, that is
// the no-load cost (it follows a slowdown at once), while the slot's hold
// time per token is the latency the limit causes. So, per round of samples:
//
//	rtt     = sum(hold) / sum(tokens)      seconds per token, queueing included
//	service = sum(service) / sum(tokens)   seconds per token of the engine's work
//	queue   = limit x (1 - service/rtt)    requests waiting inside the engine
//
// The limit grows by one while queue < vegasAlpha and the limit was reached in
// the round (a worker that never fills its limit learns nothing about a larger
// one), and shrinks by one while queue > vegasBeta, by a quarter when queue >
// 2 x vegasBeta. A round is max(limit, minRound) completed prefills, so a
// change is judged only after the requests it admitted have been served.
//
// The target is about one prefill waiting inside the engine: prefill is
// compute-bound, so one ready request keeps the engine busy across the gaps
// between prefills (the gateway's round trip, the PD handshake), and every
// further one only adds its whole prefill time to the TTFT of those behind it.
// A saturated FIFO engine at limit L queues L-1, so the limit settles at 2.
// An engine that batches prefills for throughput looks the same from here (its
// batch finishes together): give it a higher MIN.
const (
	vegasAlpha = 0.5
	vegasBeta  = 1.5
	minRound   = 4
)

// limiter is one worker's adaptive limit. Guarded by Controller.mu.
type limiter struct {
	limit int

	// The current round.
	n       int
	hold    float64 // seconds
	service float64 // seconds
	tokens  int64
	peak    int // highest in-flight count at a grant during the round
}

// sample is one completed prefill.
type sample struct {
	hold, service time.Duration
	tokens        int64
}

// noteGrant records the in-flight count after a grant.
func (l *limiter) noteGrant(inflight int) { l.peak = max(l.peak, inflight) }

// observe adds one completed prefill and, at the end of a round, moves the
// limit inside [lo, hi]. It reports whether the limit changed.
func (l *limiter) observe(s sample, lo, hi int) bool {
	l.n++
	l.hold += s.hold.Seconds()
	l.service += s.service.Seconds()
	l.tokens += max(s.tokens, 1)
	if l.n < max(l.limit, minRound) {
		return false
	}
	next := l.decide()
	l.n, l.hold, l.service, l.tokens, l.peak = 0, 0, 0, 0, 0
	next = min(max(next, lo), hi)
	if next == l.limit {
		return false
	}
	l.limit = next
	return true
}

// decide returns the limit the finished round asks for.
func (l *limiter) decide() int {
	if l.hold <= 0 {
		return l.limit
	}
	rtt := l.hold / float64(l.tokens)
	service := min(l.service/float64(l.tokens), rtt)
	queue := float64(l.limit) * (1 - service/rtt)
	switch {
	case queue > 2*vegasBeta:
		return l.limit - max(1, l.limit/4)
	case queue > vegasBeta:
		return l.limit - 1
	case queue < vegasAlpha && l.peak >= l.limit:
		return l.limit + 1
	}
	return l.limit
}
