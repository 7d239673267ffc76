package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"
)

// Poisson yields the arrival offsets of a Poisson process: exponential inter-arrival times with mean
// 1/rate from a seeded PRNG. Not safe for concurrent use (the scheduler goroutine owns it).
type Poisson struct {
	rate float64
	r    *rand.Rand
	t    float64 // seconds since the start
}

// NewPoisson returns a schedule of rate arrivals per second (rate > 0).
func NewPoisson(rate float64, seed int64) *Poisson {
	return &Poisson{rate: rate, r: rand.New(rand.NewPCG(uint64(seed), 0xa7712a1))}
}

// Next returns the next arrival's offset from the start of the schedule.
func (p *Poisson) Next() time.Duration {
	p.t += p.r.ExpFloat64() / p.rate
	return time.Duration(p.t * float64(time.Second))
}

// Percentile returns the q-quantile (0..1) of sorted by linear interpolation between closest ranks
// (the "type 7" estimator of R and NumPy); NaN for an empty slice.
func Percentile(sorted []float64, q float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	if q <= 0 {
		return sorted[0]
	}
	if q >= 1 {
		return sorted[n-1]
	}
	h := q * float64(n-1)
	lo := int(math.Floor(h))
	if lo+1 >= n {
		return sorted[n-1]
	}
	return sorted[lo] + (h-float64(lo))*(sorted[lo+1]-sorted[lo])
}

// Dist summarises one latency distribution, in milliseconds.
type Dist struct {
	Count int     `json:"count"`
	Mean  float64 `json:"mean_ms"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

// NewDist summarises values (ms); it sorts values in place.
func NewDist(values []float64) Dist {
	if len(values) == 0 {
		return Dist{}
	}
	slices.Sort(values)
	sum := 0.0
	for _, v := range values {
		sum += v
	}
	return Dist{
		Count: len(values),
		Mean:  round3(sum / float64(len(values))),
		P50:   round3(Percentile(values, 0.50)),
		P90:   round3(Percentile(values, 0.90)),
		P99:   round3(Percentile(values, 0.99)),
		Max:   round3(values[len(values)-1]),
	}
}

// round3 keeps microsecond precision of a millisecond value, which keeps the JSON short.
func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

func ms(d time.Duration) float64 { return round3(float64(d) / float64(time.Millisecond)) }

// Summary is what a run measured.
type Summary struct {
	Requests           int            `json:"requests"` // measured requests offered: sent + dropped
	Sent               int            `json:"sent"`
	Succeeded          int            `json:"succeeded"`
	Failed             int            `json:"failed"` // sent and failed
	Dropped            int            `json:"dropped"`
	DurationSec        float64        `json:"duration_sec"`
	RequestsPerSec     float64        `json:"requests_per_sec"` // successful requests per second
	OutputTokensPerSec float64        `json:"output_tokens_per_sec"`
	TTFT               Dist           `json:"ttft"`
	ITL                Dist           `json:"itl"`
	E2E                Dist           `json:"e2e"`
	ScheduleLag        Dist           `json:"schedule_lag"`
	SLOTTFTms          float64        `json:"slo_ttft_ms,omitempty"`
	Goodput            float64        `json:"goodput"`
	ErrorsByStatus     map[string]int `json:"errors_by_status,omitempty"`
	ErrorsByCode       map[string]int `json:"errors_by_code,omitempty"`
	Workers            map[string]int `json:"workers,omitempty"` // requests per X-Sluice-Worker
}

// Summarize computes the summary of measured records over a window of the given length; dropped
// counts open-loop arrivals turned away; slo = 0 makes every success count as good.
func Summarize(recs []Record, dropped int, window time.Duration, slo time.Duration) Summary {
	s := Summary{Requests: len(recs) + dropped, Sent: len(recs), Dropped: dropped, DurationSec: round3(window.Seconds())}
	if slo > 0 {
		s.SLOTTFTms = ms(slo)
	}
	var ttft, itl, e2e, lag []float64
	good, tokens := 0, 0
	for i := range recs {
		r := &recs[i]
		lag = append(lag, r.LagMS)
		if r.Worker != "" {
			if s.Workers == nil {
				s.Workers = map[string]int{}
			}
			s.Workers[r.Worker]++
		}
		if !r.OK() {
			s.Failed++
			if s.ErrorsByStatus == nil {
				s.ErrorsByStatus, s.ErrorsByCode = map[string]int{}, map[string]int{}
			}
			s.ErrorsByStatus[strconv.Itoa(r.Status)]++
			code := r.Code
			if code == "" {
				code = "none"
			}
			s.ErrorsByCode[code]++
			continue
		}
		s.Succeeded++
		tokens += r.OutputTokens
		ttft = append(ttft, r.TTFTMS)
		e2e = append(e2e, r.E2EMS)
		itl = append(itl, r.ITLMS...)
		if slo <= 0 || r.TTFTMS <= ms(slo) {
			good++
		}
	}
	if dropped > 0 {
		if s.ErrorsByCode == nil {
			s.ErrorsByStatus, s.ErrorsByCode = map[string]int{}, map[string]int{}
		}
		s.ErrorsByCode[CodeDropped] += dropped
	}
	if window > 0 {
		s.RequestsPerSec = round3(float64(s.Succeeded) / window.Seconds())
		s.OutputTokensPerSec = round3(float64(tokens) / window.Seconds())
	}
	if s.Requests > 0 {
		s.Goodput = round3(float64(good) / float64(s.Requests))
	}
	s.TTFT, s.ITL, s.E2E, s.ScheduleLag = NewDist(ttft), NewDist(itl), NewDist(e2e), NewDist(lag)
	return s
}
