package capacity

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// Role is the side of the PD pipeline a recommendation sizes.
type Role string

// The roles sized.
const (
	RolePrefill Role = "prefill"
	RoleDecode  Role = "decode"
)

// Configuration errors.
var (
	ErrInvalidConfig = errors.New("capacity: invalid config")
)

// Config tunes a Recommender; zero fields take the defaults below.
type Config struct {
	// SLOTTFT is the time to first token to staff prefill for (0: keep the
	// mean queue wait within one prefill service time).
	SLOTTFT time.Duration
	// SLOITL is the inter-token latency to staff decode for (0: size decode
	// by its seat limit, or not at all).
	SLOITL time.Duration
	// Smoothing is the EWMA time constant of every input (default 5s).
	Smoothing time.Duration
	// ScaleDownHold is how long a lower target must hold before it is
	// recommended (default 15s).
	ScaleDownHold time.Duration
	// Now is the clock of Observe and Run (default time.Now).
	Now func() time.Time
}

const (
	defaultSmoothing = 5 * time.Second
	defaultHold      = 15 * time.Second
	// ringLen bounds each decode worker's batch history (about two minutes
	// of 250 ms ticks): a decode longer than that takes the oldest sample.
	ringLen = 512
	// maxPending bounds the decode observations waiting for the next tick.
	maxPending = 8192
)

func (c Config) validate() error {
	if c.SLOTTFT < 0 || c.SLOITL < 0 || c.Smoothing < 0 || c.ScaleDownHold < 0 {
		return fmt.Errorf("%w: durations must not be negative", ErrInvalidConfig)
	}
	return nil
}

// Request is what one request that reached dispatch showed.
type Request struct {
	Model string
	// Rejected: the gateway refused it for capacity (429); still demand.
	Rejected bool
	// Answered: the engines reported its token usage.
	Answered             bool
	PromptTokens, Output int
	// DecodeWorker answered; Decode is its decode time (first token to
	// end) and ITL its mean inter-token latency (0: not streamed).
	DecodeWorker string
	Decode, ITL  time.Duration
}

// Worker is one worker's state at a tick.
type Worker struct {
	Key string
	// Busy is the requests it holds now (slots, seats, or its load).
	Busy int
	// Limit is its per-worker bound (<= 0: none).
	Limit int
}

// Pool is one model's workers by role.
type Pool struct {
	Prefill, Decode []Worker
}

// Inputs are the smoothed measurements behind a model's recommendations.
type Inputs struct {
	ArrivalRate   float64 // requests per second, refused ones included
	RejectionRate float64 // refused per second
	PromptTokens  float64 // mean per answered request
	OutputTokens  float64
	// PrefillRate is prompt tokens per busy prefill worker-second; 0 unknown.
	PrefillRate float64
	// PrefillBusy and DecodeBusy are the smoothed busy workers (prefill)
	// and sequences in flight (decode).
	PrefillBusy, DecodeBusy float64
	// ITLBase and ITLSlope are the fitted ITL line (the last one fitted:
	// a steady load stops telling base from slope, not the line); FitOK
	// false while none was.
	ITLBase, ITLSlope time.Duration
	FitOK             bool
	// ITLMean at MeanBatch is the operating point measured lately, which
	// sizes decode conservatively until a line is fitted.
	ITLMean   time.Duration
	MeanBatch float64
}

// Recommendation is one model's and role's answer.
type Recommendation struct {
	Model string
	Role  Role
	// Current is the workers registered; Target the model's answer now;
	// Floor what is busy; Recommended the answer after hysteresis.
	Current, Target, Floor, Recommended int
	// OfferedLoad is the load in workers (prefill: busy-equivalent workers
	// λ·S) or sequences (decode: seats at the SLO's operating point).
	OfferedLoad float64
	// PerWorker is the capacity one worker brings (prefill: 1, it serves
	// one at a time; decode: sequences within the ITL SLO or seat limit).
	PerWorker float64
	// Sized is false when the inputs cannot size this role (then
	// Recommended stays at Current).
	Sized bool
	// HoldUntil is when a pending scale-down takes effect (zero: none).
	HoldUntil time.Time
	Reason    string
	Inputs    Inputs

	// up and down are the targets at the offered load ∓ deadband: the
	// recommendation rises only when even the lower one is above it, and
	// falls only to the upper one, so noise around a boundary between two
	// counts does not flap it.
	up, down int
}

// deadband is the relative error of the offered load the recommendation
// ignores (smoothed inputs still wander by a few percent).
const deadband = 0.1

// Metrics receives the recommendations and their inputs at every tick,
// under the recommender's lock.
type Metrics interface {
	SetRecommendation(r *Recommendation)
	DeleteModel(model string)
}

type noopMetrics struct{}

func (noopMetrics) SetRecommendation(*Recommendation) {}
func (noopMetrics) DeleteModel(string)                {}

// Recommender turns measurements into recommendations (see the package doc).
type Recommender struct {
	cfg     Config
	metrics Metrics

	mu      sync.Mutex
	models  map[string]*modelState
	rings   map[string]*batchRing // decode worker key -> batch history
	pending []pendingDecode
	last    time.Time // previous tick
}

// New validates cfg and returns a recommender; m may be nil.
func New(cfg Config, m Metrics) (*Recommender, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Smoothing == 0 {
		cfg.Smoothing = defaultSmoothing
	}
	if cfg.ScaleDownHold == 0 {
		cfg.ScaleDownHold = defaultHold
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if m == nil {
		m = noopMetrics{}
	}
	return &Recommender{cfg: cfg, metrics: m, models: map[string]*modelState{}, rings: map[string]*batchRing{}}, nil
}

// Config returns the effective configuration.
func (r *Recommender) Config() Config { return r.cfg }

type pendingDecode struct {
	model, worker string
	end           time.Time
	decode, itl   time.Duration
}

// counts are the raw measurements since the previous tick.
type counts struct {
	arrivals, rejected, answered float64
	prompt, output               float64
}

// ewma is an exponentially weighted mean that starts from nothing: it
// divides by the weight accumulated so far (bias correction), so its first
// values are the plain mean of the samples seen, not one tick's noise.
type ewma struct {
	raw, weight float64
	v           float64
}

func (e *ewma) add(x, alpha float64) {
	e.raw += alpha * (x - e.raw)
	e.weight += alpha * (1 - e.weight)
	e.v = e.raw / e.weight
}

type roleState struct {
	recommended int
	lowSince    time.Time // zero: not holding
	holdMax     int
	started     bool
}

type modelState struct {
	c                                    counts
	arrival, rejected, answered          ewma
	prompt, output                       ewma // token rates
	prefillBusy, decodeBusy, prefillRate ewma
	fit                                  itlFit
	line                                 struct{ b, k float64 } // last fitted
	haveLine                             bool
	roles                                map[Role]*roleState
	recs                                 map[Role]*Recommendation
}

func (r *Recommender) model(name string) *modelState {
	m := r.models[name]
	if m == nil {
		m = &modelState{
			roles: map[Role]*roleState{RolePrefill: {}, RoleDecode: {}},
			recs:  map[Role]*Recommendation{},
		}
		r.models[name] = m
	}
	return m
}

// Observe records one finished (or refused) request. It is cheap: counters
// under the lock; the work is done at the next Tick.
func (r *Recommender) Observe(q Request) {
	now := r.cfg.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.models[q.Model]
	if m == nil {
		return // not a model the fleet serves (Tick creates those)
	}
	m.c.arrivals++
	if q.Rejected {
		m.c.rejected++
	}
	if q.Answered {
		m.c.answered++
		m.c.prompt += float64(q.PromptTokens)
		m.c.output += float64(q.Output)
	}
	if q.ITL > 0 && q.Decode > 0 && q.DecodeWorker != "" && len(r.pending) < maxPending {
		r.pending = append(r.pending, pendingDecode{model: q.Model, worker: q.DecodeWorker, end: now, decode: q.Decode, itl: q.ITL})
	}
}

// Tick folds the measurements since the previous tick into the smoothed
// inputs, samples fleet, recomputes every recommendation and reports them.
// Models absent from fleet are forgotten.
func (r *Recommender) Tick(now time.Time, fleet map[string]Pool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	dt := now.Sub(r.last).Seconds()
	first := r.last.IsZero()
	r.last = now
	seen := map[string]bool{}
	for _, p := range fleet {
		for _, w := range p.Decode {
			if seen[w.Key] {
				continue
			}
			seen[w.Key] = true
			ring := r.rings[w.Key]
			if ring == nil {
				ring = &batchRing{}
				r.rings[w.Key] = ring
			}
			ring.add(now, float64(w.Busy))
		}
	}
	for k := range r.rings {
		if !seen[k] {
			delete(r.rings, k)
		}
	}
	for name, m := range r.models {
		if _, ok := fleet[name]; !ok {
			delete(r.models, name)
			r.metrics.DeleteModel(name)
		}
		_ = m
	}
	if first || dt <= 0 {
		for name := range fleet {
			r.model(name)
		}
		r.pending = r.pending[:0]
		return
	}
	alpha := 1 - math.Exp(-dt/r.cfg.Smoothing.Seconds())
	// Each decode observation's batch is the mean of its worker's busy
	// count over its decode, from the worker's history.
	for _, p := range r.pending {
		m, ring := r.models[p.model], r.rings[p.worker]
		if m == nil || ring == nil {
			continue
		}
		if b, ok := ring.mean(p.end.Add(-p.decode), p.end); ok {
			m.fit.add(b, p.itl.Seconds(), 1)
		}
	}
	r.pending = r.pending[:0]
	names := make([]string, 0, len(fleet))
	for name := range fleet {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		m := r.model(name)
		r.tickModel(now, dt, alpha, m, name, fleet[name])
	}
}

func (r *Recommender) tickModel(now time.Time, dt, alpha float64, m *modelState, name string, p Pool) {
	m.arrival.add(m.c.arrivals/dt, alpha)
	m.rejected.add(m.c.rejected/dt, alpha)
	m.answered.add(m.c.answered/dt, alpha)
	m.prompt.add(m.c.prompt/dt, alpha)
	m.output.add(m.c.output/dt, alpha)
	m.c = counts{}
	busyWorkers, sumPrefill := 0, 0
	for _, w := range p.Prefill {
		if w.Busy > 0 {
			busyWorkers++
		}
		sumPrefill += w.Busy
	}
	m.prefillBusy.add(float64(busyWorkers), alpha)
	sumDecode := 0
	for _, w := range p.Decode {
		sumDecode += w.Busy
	}
	m.decodeBusy.add(float64(sumDecode), alpha)
	// Tokens per busy worker-second, only while prefill is busy enough for
	// the ratio to mean something; it keeps its last value when idle.
	if m.prefillBusy.v > 0.05 && m.prompt.v > 0 {
		m.prefillRate.add(m.prompt.v/m.prefillBusy.v, alpha)
	}
	m.fit.decay(1 - alpha/4) // the fit remembers four time constants: it needs batches that differ

	in := Inputs{
		ArrivalRate: m.arrival.v, RejectionRate: m.rejected.v,
		PrefillRate: m.prefillRate.v, PrefillBusy: m.prefillBusy.v, DecodeBusy: m.decodeBusy.v,
	}
	if m.answered.v > 0 {
		in.PromptTokens = m.prompt.v / m.answered.v
		in.OutputTokens = m.output.v / m.answered.v
	}
	if b, k, ok := m.fit.line(); ok {
		m.line.b, m.line.k, m.haveLine = b, k, true
	}
	if m.haveLine {
		in.ITLBase, in.ITLSlope, in.FitOK = seconds(m.line.b), seconds(m.line.k), true
	}
	if m.fit.w > 0 {
		in.MeanBatch, in.ITLMean = m.fit.x/m.fit.w, seconds(m.fit.y/m.fit.w)
	}
	pre := r.sizePrefill(name, in, p.Prefill, sumPrefill)
	dec := r.sizeDecode(name, in, p.Decode, sumDecode)
	for _, rec := range []*Recommendation{pre, dec} {
		r.hysteresis(now, m.roles[rec.Role], rec)
		m.recs[rec.Role] = rec
		r.metrics.SetRecommendation(rec)
	}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func maxLimit(ws []Worker) int {
	l := 0
	for _, w := range ws {
		l = max(l, w.Limit)
	}
	return l
}

func (r *Recommender) sizePrefill(name string, in Inputs, ws []Worker, busy int) *Recommendation {
	rec := &Recommendation{Model: name, Role: RolePrefill, Current: len(ws), Inputs: in, PerWorker: 1}
	// Floor: the requests in flight need their slots (a worker without a
	// limit serves its queue one at a time: one worker holds them).
	if l := maxLimit(ws); l > 0 {
		rec.Floor = ceilDiv(busy, l)
	} else if busy > 0 {
		rec.Floor = 1
	}
	rec.Floor = max(rec.Floor, int(math.Ceil(in.PrefillBusy-0.5)))
	switch {
	case in.ArrivalRate <= 0:
		rec.Sized = true
		rec.Reason = "no requests arrived recently"
	case in.PrefillRate <= 0 || in.PromptTokens <= 0:
		rec.Target = len(ws)
		rec.Reason = "no prefill measured yet: keeping the current count"
		return rec
	default:
		s := in.PromptTokens / in.PrefillRate
		rec.OfferedLoad = in.ArrivalRate * s
		n, meets := prefillWorkers(rec.OfferedLoad, s, r.cfg.SLOTTFT.Seconds())
		rec.Target, rec.Sized = n, true
		rec.up, _ = prefillWorkers(rec.OfferedLoad*(1-deadband), s, r.cfg.SLOTTFT.Seconds())
		rec.down, _ = prefillWorkers(rec.OfferedLoad*(1+deadband), s, r.cfg.SLOTTFT.Seconds())
		slo := "a mean wait of at most one service time"
		if r.cfg.SLOTTFT > 0 {
			slo = fmt.Sprintf("the %s TTFT SLO", r.cfg.SLOTTFT)
		}
		rec.Reason = fmt.Sprintf("%.2f req/s × %.0f prompt tokens at %.0f tokens per busy worker-second is %.2f busy workers (Little's law, service %.3fs); Erlang C: %s wait plus service within %s",
			in.ArrivalRate, in.PromptTokens, in.PrefillRate, rec.OfferedLoad, s, workersVerb(n, "keeps", "keep"), slo)
		if !meets {
			rec.Reason += "; the SLO cannot be met by adding workers (one prefill alone takes longer)"
		}
	}
	return rec
}

func (r *Recommender) sizeDecode(name string, in Inputs, ws []Worker, busy int) *Recommendation {
	rec := &Recommendation{Model: name, Role: RoleDecode, Current: len(ws), Inputs: in}
	seat := maxLimit(ws)
	slo := r.cfg.SLOITL.Seconds()
	b, k := in.ITLBase.Seconds(), in.ITLSlope.Seconds()
	var perWorker, hold float64 // sequences per worker, seconds per output token at that batch
	var why string
	switch {
	case slo > 0 && in.FitOK:
		perWorker = max((slo-b)/k, 1)
		hold = slo
		why = fmt.Sprintf("ITL = %.2fms + %.3fms × batch meets the %s ITL SLO up to %.0f sequences per worker", b*1e3, k*1e3, r.cfg.SLOITL, perWorker)
		if seat > 0 && float64(seat) < perWorker {
			perWorker = float64(seat)
			hold = b + k*perWorker
			why += fmt.Sprintf(", capped by the seat limit %d", seat)
		}
	case slo > 0 && in.ITLMean > 0 && in.MeanBatch > 0:
		// One operating point cannot tell base from slope; taking ITL as
		// proportional to the batch gives n·slo/ITL(n), which is never
		// more than the true (slo−b)/k for b ≥ 0: it over-asks, safely.
		perWorker = max(in.MeanBatch*slo/in.ITLMean.Seconds(), 1)
		hold = slo
		why = fmt.Sprintf("ITL %.2fms at a batch of %.1f, taken as proportional to the batch until batches differ (conservative), meets the %s ITL SLO up to %.0f sequences per worker",
			in.ITLMean.Seconds()*1e3, in.MeanBatch, r.cfg.SLOITL, perWorker)
		if seat > 0 && float64(seat) < perWorker {
			perWorker = float64(seat)
			why += fmt.Sprintf(", capped by the seat limit %d", seat)
		}
	case seat > 0:
		perWorker = float64(seat)
		hold = 0
		if in.FitOK {
			hold = b + k*perWorker
		}
		why = fmt.Sprintf("%d sequences per worker (the seat limit)", seat)
	}
	if busy > 0 && perWorker > 0 {
		rec.Floor = int(math.Ceil(float64(busy) / perWorker))
	} else if busy > 0 {
		rec.Floor = 1
	}
	rec.PerWorker = perWorker
	switch {
	case in.ArrivalRate <= 0:
		rec.Sized = true
		rec.Reason = "no requests arrived recently"
	case perWorker <= 0:
		rec.Target = len(ws)
		rec.Reason = "decode is not sized: no --slo-itl and no decode seat limit; keeping the current count"
		if slo > 0 {
			rec.Reason = "decode is not sized yet: no streamed answer has measured its ITL; keeping the current count"
		}
	case hold <= 0:
		// Seat-limited without a fit: seats held now, by Little's law, are
		// the measured sequences in flight.
		rec.OfferedLoad = in.DecodeBusy
		rec.Target, rec.Sized = decodeWorkers(rec.OfferedLoad, perWorker), true
		rec.band(perWorker)
		rec.Reason = fmt.Sprintf("%.1f sequences in flight; %s; with a √L margin: %s", in.DecodeBusy, why, workers(rec.Target))
	default:
		rec.OfferedLoad = in.ArrivalRate * in.OutputTokens * hold
		rec.Target, rec.Sized = decodeWorkers(rec.OfferedLoad, perWorker), true
		rec.band(perWorker)
		rec.Reason = fmt.Sprintf("%.2f req/s × %.0f output tokens × %.1fms per token is %.1f sequences in flight (Little's law); %s; with a √L margin: %s",
			in.ArrivalRate, in.OutputTokens, hold*1e3, rec.OfferedLoad, why, workers(rec.Target))
	}
	return rec
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// workers is "1 worker" or "n workers".
func workers(n int) string {
	if n == 1 {
		return "1 worker"
	}
	return fmt.Sprintf("%d workers", n)
}

// workersVerb is workers(n) followed by the verb agreeing with it.
func workersVerb(n int, one, many string) string {
	if n == 1 {
		return workers(n) + " " + one
	}
	return workers(n) + " " + many
}

// band sets a decode recommendation's deadband targets.
func (rec *Recommendation) band(perWorker float64) {
	rec.up = decodeWorkers(rec.OfferedLoad*(1-deadband), perWorker)
	rec.down = decodeWorkers(rec.OfferedLoad*(1+deadband), perWorker)
}

// hysteresis sets rec.Recommended from rec.Target and the role's history:
// up at once when the deadband's lower target exceeds it, down to the
// highest upper target of a hold once the upper target stayed below it for
// the whole hold.
func (r *Recommender) hysteresis(now time.Time, st *roleState, rec *Recommendation) {
	floor := rec.Floor
	if rec.Current > 0 {
		floor = max(floor, 1)
	}
	if !rec.Sized {
		floor = max(floor, rec.Current)
	}
	if !rec.Sized || rec.up == 0 && rec.down == 0 {
		rec.up, rec.down = rec.Target, rec.Target
	}
	t, up, down := max(rec.Target, floor), max(rec.up, floor), max(rec.down, floor)
	switch {
	case !st.started:
		st.recommended, st.started = t, true
		st.lowSince = time.Time{}
	case up > st.recommended:
		st.recommended = up
		st.lowSince = time.Time{}
	case down >= st.recommended:
		st.lowSince = time.Time{}
	default:
		if st.lowSince.IsZero() {
			st.lowSince, st.holdMax = now, down
		}
		st.holdMax = max(st.holdMax, down)
		if now.Sub(st.lowSince) >= r.cfg.ScaleDownHold {
			st.recommended = st.holdMax
			st.lowSince = time.Time{}
		}
	}
	rec.Recommended = st.recommended
	if !st.lowSince.IsZero() {
		rec.HoldUntil = st.lowSince.Add(r.cfg.ScaleDownHold)
		rec.Reason += fmt.Sprintf("; holding %d until %s before scaling down to %d", st.recommended, rec.HoldUntil.UTC().Format(time.TimeOnly), st.holdMax)
	}
	if rec.Floor > rec.Target && rec.Floor == rec.Recommended {
		rec.Reason += fmt.Sprintf("; %s busy now, so not fewer", workersVerb(rec.Floor, "is", "are"))
	}
}

// Snapshot returns every model's recommendations, sorted by model then role
// (prefill first).
func (r *Recommender) Snapshot() []Recommendation {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Recommendation
	for _, m := range r.models {
		for _, role := range []Role{RolePrefill, RoleDecode} {
			if rec := m.recs[role]; rec != nil {
				out = append(out, *rec)
			}
		}
	}
	slices.SortFunc(out, func(a, b Recommendation) int {
		if a.Model != b.Model {
			if a.Model < b.Model {
				return -1
			}
			return 1
		}
		if a.Role == b.Role {
			return 0
		}
		if a.Role == RolePrefill {
			return -1
		}
		return 1
	})
	return out
}
