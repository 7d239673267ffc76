package capacity

import (
	"math"
	"time"
)

// maxSearch bounds the Erlang C search beyond the offered load: a target
// larger than this is not a recommendation but an alarm.
const maxSearch = 10000

// erlangC is the probability that an arrival waits in an M/M/n queue offered
// a Erlangs (n > a), by the Erlang B recursion, which stays finite where the
// textbook factorials overflow.
func erlangC(n int, a float64) float64 {
	if a <= 0 {
		return 0
	}
	if float64(n) <= a {
		return 1
	}
	b := 1.0
	for k := 1; k <= n; k++ {
		b = a * b / (float64(k) + a*b)
	}
	return float64(n) * b / (float64(n) - a*(1-b))
}

// prefillWorkers is the smallest n > a whose mean Erlang C wait plus the
// service time s (seconds) stays within slo; budget is the wait allowed
// (slo − s, or s itself when slo is 0). It returns 0 for no load.
func prefillWorkers(a, s, slo float64) (n int, meets bool) {
	if a <= 0 || s <= 0 {
		return 0, true
	}
	budget := s
	if slo > 0 {
		budget = slo - s
	}
	lo := int(math.Floor(a)) + 1
	if budget <= 0 {
		// Even an idle fleet misses the SLO: ask for no queueing at all
		// beyond what Erlang C calls negligible, and say so.
		return lo, false
	}
	for n := lo; n <= lo+maxSearch; n++ {
		wait := erlangC(n, a) * s / (float64(n) - a)
		if wait <= budget {
			return n, true
		}
	}
	return lo + maxSearch, false
}

// decodeWorkers is the workers whose k sequences each hold seats for the
// load l (sequences in flight at the SLO's operating point) plus a √l margin.
func decodeWorkers(l, k float64) int {
	if l <= 0 || k <= 0 {
		return 0
	}
	return int(math.Ceil((l + math.Sqrt(l)) / k))
}

// itlFit is a weighted least-squares fit of ITL = b + k·batch, its sums
// decayed by the same EWMA as every other input so the fit follows the fleet.
type itlFit struct {
	w, x, y, xx, xy float64
}

func (f *itlFit) add(batch, itl, weight float64) {
	f.w += weight
	f.x += weight * batch
	f.y += weight * itl
	f.xx += weight * batch * batch
	f.xy += weight * batch * itl
}

func (f *itlFit) decay(keep float64) {
	f.w *= keep
	f.x *= keep
	f.y *= keep
	f.xx *= keep
	f.xy *= keep
}

// line returns the fitted base and slope; ok is false while the batches seen
// are too alike to separate the two (then the caller cannot size decode from
// the SLO).
func (f *itlFit) line() (b, k float64, ok bool) {
	if f.w <= 0 {
		return 0, 0, false
	}
	mx, my := f.x/f.w, f.y/f.w
	vx := f.xx/f.w - mx*mx
	if vx < 0.25 { // batches within about ±0.5 of each other
		return 0, 0, false
	}
	k = (f.xy/f.w - mx*my) / vx
	b = my - k*mx
	if k <= 0 {
		return 0, 0, false
	}
	return max(b, 0), k, true
}

// PrefillNeed is the prefill workers the model asks for when its inputs are
// known exactly (a benchmark's truth from an engine's parameters): rate
// requests per second of prompt tokens each, served at tokensPerSec by a
// worker that prefills one request at a time, within slo (0: none). At
// least 1.
func PrefillNeed(rate, prompt, tokensPerSec float64, slo time.Duration) int {
	s := prompt / tokensPerSec
	n, _ := prefillWorkers(rate*s, s, slo.Seconds())
	return max(n, 1)
}

// DecodeNeed is the decode workers the model asks for when its inputs are
// known exactly: rate requests per second of output tokens each, on workers
// whose ITL is base + perSeq × batch, within slo, at most seats sequences
// per worker (<= 0: no seat limit). At least 1.
func DecodeNeed(rate, output float64, base, perSeq, slo time.Duration, seats int) int {
	k := (slo - base).Seconds() / perSeq.Seconds()
	hold := slo.Seconds()
	if seats > 0 && float64(seats) < k {
		k = float64(seats)
		hold = base.Seconds() + perSeq.Seconds()*k
	}
	return max(decodeWorkers(rate*output*hold, max(k, 1)), 1)
}
