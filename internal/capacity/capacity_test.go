package capacity

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestErlangC(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n    int
		a    float64
		want float64
	}{
		{1, 0.5, 0.5},        // M/M/1: P(wait) = ρ
		{2, 1, 1.0 / 3},      // textbook M/M/2 at a = 1
		{3, 2, 4.0 / 9},      // a^3/3!·3/(3−2) / (1+2+2+4) = 4/9
		{2, 2, 1},            // saturated
		{10, 0, 0},           // no load
		{200, 180, 0.094471}, // large n stays finite (no factorial overflow); value from the factorial form
	} {
		got := erlangC(tc.n, tc.a)
		if math.Abs(got-tc.want) > 1e-4 {
			t.Errorf("erlangC(%d, %v) = %v, want %v", tc.n, tc.a, got, tc.want)
		}
	}
}

func TestPrefillWorkers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		a, s, slo float64
		want      int
		wantMeets bool
	}{
		{"idle", 0, 0.05, 0.1, 0, true},
		// a=1, S=50ms, budget 50ms: N=2 waits 1/3·50ms/1 = 16.7ms.
		{"two", 1, 0.05, 0.1, 2, true},
		// budget 5ms: N=2 waits 16.7ms (too long); N=3: C(3,1)=1/11, wait 0.09·50/2 = 2.3ms.
		{"tight", 1, 0.05, 0.055, 3, true},
		{"no slo: wait within one service time", 1, 0.05, 0, 2, true},
		{"unmeetable", 1, 0.05, 0.04, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, meets := prefillWorkers(tc.a, tc.s, tc.slo)
			if n != tc.want || meets != tc.wantMeets {
				t.Errorf("prefillWorkers(%v, %v, %v) = %d, %v; want %d, %v", tc.a, tc.s, tc.slo, n, meets, tc.want, tc.wantMeets)
			}
		})
	}
}

func TestITLFit(t *testing.T) {
	t.Parallel()
	var f itlFit
	for n := 1.0; n <= 40; n += 3 {
		f.add(n, 0.006+0.00035*n, 1)
	}
	b, k, ok := f.line()
	if !ok || math.Abs(b-0.006) > 1e-9 || math.Abs(k-0.00035) > 1e-9 {
		t.Fatalf("line() = %v, %v, %v; want 0.006, 0.00035, true", b, k, ok)
	}
	var same itlFit
	same.add(10, 0.01, 1)
	same.add(10, 0.011, 1)
	if _, _, ok := same.line(); ok {
		t.Error("a fit over one batch size must not claim a slope")
	}
}

func TestBatchRingMean(t *testing.T) {
	t.Parallel()
	var r batchRing
	t0 := time.Unix(0, 0)
	for i, busy := range []float64{2, 2, 4, 4} { // 2 for 2 s, then 4
		r.add(t0.Add(time.Duration(i)*time.Second), busy)
	}
	got, ok := r.mean(t0, t0.Add(4*time.Second)) // 2,2,4,4 each for 1 s
	if !ok || math.Abs(got-3) > 1e-9 {
		t.Fatalf("mean = %v, %v; want 3", got, ok)
	}
	got, _ = r.mean(t0.Add(1500*time.Millisecond), t0.Add(2500*time.Millisecond))
	if math.Abs(got-3) > 1e-9 { // half at 2, half at 4
		t.Fatalf("mean across a sample = %v, want 3", got)
	}
}

// fluid drives a Recommender with a deterministic fleet whose need is known:
// serial prefill at mu tokens/s, decode ITL = b + k·batch.
type fluid struct {
	t               *testing.T
	r               *Recommender
	now             time.Time
	lambda          float64
	prompt, out     int
	mu              float64
	b, k            float64
	np, nd          int
	carry, busyAcc  []float64
	arrCarry        float64
	split           []float64 // share of decode requests per decode worker
	prefillLimit    int
	seatLimit       int
	extraPrefillHot int // requests held beyond the fluid's (for the floor)
}

const tick = 250 * time.Millisecond

func newFluid(t *testing.T, cfg Config) *fluid {
	f := &fluid{t: t, now: time.Unix(1_000_000, 0), lambda: 20, prompt: 400, out: 100, mu: 8000,
		b: 0.006, k: 0.00035, np: 2, nd: 2, split: []float64{0.4, 0.6}}
	f.carry = make([]float64, 8)
	f.busyAcc = make([]float64, 8)
	cfg.Now = func() time.Time { return f.now }
	r, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.r = r
	return f
}

// batch is the decode batch on a worker taking share of the arrivals.
func (f *fluid) batch(share float64) float64 {
	l := f.lambda * share * float64(f.out)
	return l * f.b / (1 - l*f.k)
}

func (f *fluid) step() {
	f.now = f.now.Add(tick)
	f.arrCarry += f.lambda * tick.Seconds()
	for f.arrCarry >= 1 {
		f.arrCarry--
		w := 0
		if f.carry[7] += f.split[0]; f.carry[7] >= 1 {
			f.carry[7]--
		} else {
			w = 1
		}
		n := f.batch(f.split[w])
		itl := f.b + f.k*n
		f.r.Observe(Request{Model: "m", Answered: true, PromptTokens: f.prompt, Output: f.out,
			DecodeWorker: fmt.Sprint("d", w), ITL: seconds(itl), Decode: seconds(itl * float64(f.out))})
	}
	pool := Pool{}
	u := f.lambda * float64(f.prompt) / f.mu / float64(f.np) // each prefill worker's busy share
	for i := range f.np {
		busy := 0
		if f.busyAcc[i] += u; f.busyAcc[i] >= 1 {
			f.busyAcc[i]--
			busy = 1
		}
		if i == 0 {
			busy += f.extraPrefillHot
		}
		pool.Prefill = append(pool.Prefill, Worker{Key: fmt.Sprint("p", i), Busy: busy, Limit: f.prefillLimit})
	}
	for i := range f.nd {
		share := 0.0
		if i < len(f.split) {
			share = f.split[i]
		}
		n := f.batch(share)
		f.carry[i] += n - math.Floor(n)
		busy := int(n)
		if f.carry[i] >= 1 {
			f.carry[i]--
			busy++
		}
		pool.Decode = append(pool.Decode, Worker{Key: fmt.Sprint("d", i), Busy: busy, Limit: f.seatLimit})
	}
	f.r.Tick(f.now, map[string]Pool{"m": pool})
}

func (f *fluid) run(d time.Duration) {
	for range int(d / tick) {
		f.step()
	}
}

func (f *fluid) rec(role Role) Recommendation {
	for _, r := range f.r.Snapshot() {
		if r.Role == role {
			return r
		}
	}
	f.t.Fatalf("no %s recommendation", role)
	return Recommendation{}
}

// truth is the need computed from the fluid's own parameters, by hand of
// the formulas in the package doc.
func (f *fluid) truth(cfg Config) (prefill, decode int) {
	s := float64(f.prompt) / f.mu
	prefill, _ = prefillWorkers(f.lambda*s, s, cfg.SLOTTFT.Seconds())
	slo := cfg.SLOITL.Seconds()
	k := (slo - f.b) / f.k
	return max(prefill, 1), max(decodeWorkers(f.lambda*float64(f.out)*slo, k), 1)
}

func TestRecommenderSteadyState(t *testing.T) {
	t.Parallel()
	cfg := Config{SLOTTFT: 100 * time.Millisecond, SLOITL: 20 * time.Millisecond}
	f := newFluid(t, cfg)
	peak := 0
	for range int(60 * time.Second / tick) {
		f.step()
		for _, r := range f.r.Snapshot() {
			peak = max(peak, r.Recommended)
		}
	}
	if peak > 3 { // the first ticks' noise must not spike the answer (held for the hold time)
		t.Errorf("peak recommendation %d while warming up, want at most the need + 1 (3)", peak)
	}
	// By hand: S = 400/8000 = 50ms, a = 20·0.05 = 1 → 2 workers (Erlang C
	// wait 16.7ms ≤ 50ms). Decode: K = (20−6)/0.35 = 40 sequences; L =
	// 20·100·0.02 = 40; (40+√40)/40 = 1.16 → 2.
	p, d := f.rec(RolePrefill), f.rec(RoleDecode)
	if p.Recommended != 2 || d.Recommended != 2 {
		t.Fatalf("recommended prefill %d, decode %d; want 2, 2\nprefill: %s\ndecode: %s", p.Recommended, d.Recommended, p.Reason, d.Reason)
	}
	if tp, td := f.truth(cfg); tp != 2 || td != 2 {
		t.Fatalf("truth %d, %d; the test's arithmetic is off", tp, td)
	}
	in := p.Inputs
	if math.Abs(in.PrefillRate-8000) > 400 || math.Abs(in.ArrivalRate-20) > 1 || in.PromptTokens != 400 || in.OutputTokens != 100 {
		t.Errorf("inputs %+v, want rate≈8000, λ≈20, 400/100 tokens", in)
	}
	if !in.FitOK || math.Abs(in.ITLBase.Seconds()-0.006) > 0.001 || math.Abs(in.ITLSlope.Seconds()-0.00035) > 0.00005 {
		t.Errorf("ITL fit %v + %v·n (ok %v), want 6ms + 0.35ms·n", in.ITLBase, in.ITLSlope, in.FitOK)
	}
	for _, want := range []string{"Erlang C", "Little's law", "TTFT SLO"} {
		if !strings.Contains(p.Reason, want) {
			t.Errorf("prefill reason %q lacks %q", p.Reason, want)
		}
	}
	if !strings.Contains(d.Reason, "ITL SLO") {
		t.Errorf("decode reason %q lacks the SLO", d.Reason)
	}
}

func TestRecommenderHysteresis(t *testing.T) {
	t.Parallel()
	cfg := Config{SLOTTFT: 100 * time.Millisecond, SLOITL: 20 * time.Millisecond, ScaleDownHold: 15 * time.Second}
	f := newFluid(t, cfg)
	f.run(40 * time.Second)
	f.lambda = 40 // 2x: up at once (within a few smoothing constants)
	f.run(20 * time.Second)
	wantP, wantD := f.truth(cfg)
	up := f.rec(RolePrefill).Recommended
	if up != wantP || f.rec(RoleDecode).Recommended < wantD-1 {
		t.Fatalf("after the step up: prefill %d (want %d), decode %d (want %d±1)", up, wantP, f.rec(RoleDecode).Recommended, wantD)
	}
	f.lambda = 5
	f.run(10 * time.Second) // the target has fallen, the hold has not passed
	p := f.rec(RolePrefill)
	if p.Recommended != up || p.Target >= up || p.HoldUntil.IsZero() || !strings.Contains(p.Reason, "holding") {
		t.Fatalf("10s after the step down: recommended %d target %d hold %v (%s); want %d held", p.Recommended, p.Target, p.HoldUntil, p.Reason, up)
	}
	changes, last := 0, up
	for range int(30 * time.Second / tick) {
		f.step()
		if n := f.rec(RolePrefill).Recommended; n != last {
			changes++
			last = n
		}
	}
	wantP, _ = f.truth(cfg)
	if last != wantP || changes > 2 {
		t.Fatalf("after the hold: prefill %d in %d changes, want %d in at most 2", last, changes, wantP)
	}
}

func TestRecommenderFloor(t *testing.T) {
	t.Parallel()
	cfg := Config{SLOTTFT: 100 * time.Millisecond, SLOITL: 20 * time.Millisecond}
	f := newFluid(t, cfg)
	f.prefillLimit = 2
	f.run(20 * time.Second)
	f.extraPrefillHot = 7 // 7+ slots held against a limit of 2 per worker: 4+ workers busy
	f.run(10 * time.Second)
	p := f.rec(RolePrefill)
	if p.Floor < 4 || p.Recommended < p.Floor || p.Target >= p.Floor {
		t.Fatalf("floor %d target %d recommended %d; want the busy floor (≥4) to win", p.Floor, p.Target, p.Recommended)
	}
	if !strings.Contains(p.Reason, "busy now") {
		t.Errorf("reason %q does not say the floor won", p.Reason)
	}
}

func TestRecommenderUnsizedDecode(t *testing.T) {
	t.Parallel()
	f := newFluid(t, Config{}) // no ITL SLO, no seat limit
	f.nd = 3
	f.run(20 * time.Second)
	d := f.rec(RoleDecode)
	if d.Sized || d.Recommended != 3 || !strings.Contains(d.Reason, "not sized") {
		t.Fatalf("decode %+v; want unsized, kept at the 3 current workers", d)
	}
	f2 := newFluid(t, Config{})
	f2.seatLimit = 16
	f2.run(30 * time.Second)
	// Seat-limited: the seat limit sizes it, L = λ·out·ITL(16), K = 16.
	d = f2.rec(RoleDecode)
	l := 20 * 100 * (0.006 + 0.00035*16)
	if want := decodeWorkers(l, 16); !d.Sized || d.Recommended != want {
		t.Fatalf("seat-limited decode %d (sized %v: %s), want %d", d.Recommended, d.Sized, d.Reason, want)
	}
}

func TestRecommenderForgetsModels(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	deleted := []string{}
	m := metricsFunc{del: func(s string) { mu.Lock(); deleted = append(deleted, s); mu.Unlock() }}
	r, err := New(Config{}, m)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(0, 0)
	r.Tick(t0, map[string]Pool{"a": {Prefill: []Worker{{Key: "p"}}}})
	r.Tick(t0.Add(tick), map[string]Pool{"a": {Prefill: []Worker{{Key: "p"}}}})
	if len(r.Snapshot()) != 2 {
		t.Fatalf("snapshot %v, want two roles of a", r.Snapshot())
	}
	r.Observe(Request{Model: "unknown"}) // not served: ignored, no state
	r.Tick(t0.Add(2*tick), map[string]Pool{})
	if len(r.Snapshot()) != 0 || len(deleted) != 1 || deleted[0] != "a" {
		t.Fatalf("after a left: snapshot %v, deleted %v", r.Snapshot(), deleted)
	}
}

type metricsFunc struct{ del func(string) }

func (metricsFunc) SetRecommendation(*Recommendation) {}
func (m metricsFunc) DeleteModel(s string)            { m.del(s) }

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if _, err := New(Config{SLOITL: -time.Second}, nil); err == nil {
		t.Fatal("a negative SLO must be refused")
	}
}

func TestRunTicksUntilCancelled(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r, err := New(Config{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		samples := 0
		done := make(chan struct{})
		go func() {
			defer close(done)
			r.Run(ctx, time.Second, func() map[string]Pool {
				samples++
				return map[string]Pool{"m": {Decode: []Worker{{Key: "d"}}}}
			})
		}()
		time.Sleep(3500 * time.Millisecond) // fake time: three ticks after the first sample
		synctest.Wait()
		cancel()
		<-done
		if samples != 4 || len(r.Snapshot()) != 2 {
			t.Fatalf("samples %d, snapshot %d; want 4 samples and two roles", samples, len(r.Snapshot()))
		}
	})
}

func TestRecommenderOneOperatingPointOverAsks(t *testing.T) {
	t.Parallel()
	cfg := Config{SLOTTFT: 100 * time.Millisecond, SLOITL: 20 * time.Millisecond}
	f := newFluid(t, cfg)
	f.split = []float64{0.5, 0.5} // one batch size everywhere: base and slope cannot be told apart
	f.run(30 * time.Second)
	d := f.rec(RoleDecode)
	_, truth := f.truth(cfg)
	if d.Inputs.FitOK || d.Inputs.MeanBatch <= 0 || !d.Sized {
		t.Fatalf("decode inputs %+v sized %v; want no fit but a measured operating point", d.Inputs, d.Sized)
	}
	if d.PerWorker > 40 || d.Recommended < truth || !strings.Contains(d.Reason, "conservative") {
		t.Fatalf("decode per worker %.1f (true 40), recommended %d (truth %d): %s; want a safe over-ask", d.PerWorker, d.Recommended, truth, d.Reason)
	}
}

func TestNeedFromKnownParameters(t *testing.T) {
	t.Parallel()
	// 20 req/s × 1024 tokens at 8000 tokens/s: a = 2.56; N=3 waits C(3,2.56)·0.128/0.44 ≈ 0.23 s,
	// within 1 s − 0.128 s.
	if n := PrefillNeed(20, 1024, 8000, time.Second); n != 3 {
		t.Errorf("PrefillNeed = %d, want 3", n)
	}
	if n := PrefillNeed(0, 1024, 8000, time.Second); n != 1 {
		t.Errorf("PrefillNeed without load = %d, want the minimum 1", n)
	}
	// K = (25−6)/0.35 = 54.3; L = 20·200·0.025 = 100; (100+10)/54.3 = 2.03 → 3.
	if n := DecodeNeed(20, 200, 6*time.Millisecond, 350*time.Microsecond, 25*time.Millisecond, 0); n != 3 {
		t.Errorf("DecodeNeed = %d, want 3", n)
	}
	// A seat limit of 16 below K: L = 20·200·(6+0.35·16)ms = 46.4; (46.4+6.8)/16 = 3.3 → 4.
	if n := DecodeNeed(20, 200, 6*time.Millisecond, 350*time.Microsecond, 25*time.Millisecond, 16); n != 4 {
		t.Errorf("DecodeNeed with 16 seats = %d, want 4", n)
	}
}

// A light load needs one prefill worker, and the reason says so in words that agree with the count
// ("1 worker keeps", not "1 workers keep"), the way sluice capacity prints it.
func TestReasonCountsOneWorker(t *testing.T) {
	t.Parallel()
	f := newFluid(t, Config{SLOTTFT: 100 * time.Millisecond, SLOITL: 20 * time.Millisecond})
	f.lambda = 2
	f.run(40 * time.Second)
	p := f.rec(RolePrefill)
	if p.Target != 1 {
		t.Fatalf("prefill target %d, want 1 (%s)", p.Target, p.Reason)
	}
	if !strings.Contains(p.Reason, "Erlang C: 1 worker keeps") || strings.Contains(p.Reason, "1 workers") {
		t.Errorf("prefill reason %q: want \"1 worker keeps\" and no \"1 workers\"", p.Reason)
	}
}
