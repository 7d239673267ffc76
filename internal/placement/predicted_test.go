package placement

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/worker"
)

// fakeClock is a settable Config.Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// engineTTFT is a synthetic engine: a fixed cost, a per-kilo-character prefill cost and a
// per-queued-request cost.
type engineTTFT struct{ base, perK, perLoad float64 }

func (e engineTTFT) ttft(chars int, load int64) time.Duration {
	s := e.base + e.perK*float64(chars)/1000 + e.perLoad*float64(load)
	return time.Duration(s * float64(time.Second))
}

// pickOnce runs one request through the policy with the given gateway loads held on the workers
// and reports its measured TTFT as the engine would make it; it returns the pick.
func pickOnce(t *testing.T, p Policy, clk *fakeClock, cands []*worker.Worker, engines []engineTTFT, text string, loads []int) int {
	t.Helper()
	var guards []*worker.LoadGuard
	for i, n := range loads {
		for range n {
			guards = append(guards, cands[i].AcquireLoad())
		}
	}
	req := &Request{Model: "m", Text: text, Picks: &Picks{}}
	i := p.Pick(cands, req)
	clk.Advance(engines[i].ttft(len(text), int64(loads[i])))
	if _, ok := req.Picks.FirstToken(); !ok {
		t.Fatal("FirstToken: no pick was recorded")
	}
	req.Picks.Done()
	for _, g := range guards {
		g.Release()
	}
	return i
}

// After warm-up the policy sends work to the worker its models predict faster: the fast engine at
// equal loads, the slow one when the fast one is loaded enough that its queue outweighs its speed.
func TestPredictedLatencyPrefersPredictedFaster(t *testing.T) {
	_, cands := newFleet(t, worker.RolePrefill, "m", 2)
	clk := &fakeClock{t: time.Unix(1000, 0)}
	cfg := DefaultConfig()
	cfg.Now = clk.Now
	p := mustNew(t, PolicyPredictedLatency, cfg)
	engines := []engineTTFT{{0.02, 0.4, 0.05}, {0.02, 0.1, 0.05}} // worker 1 prefills 4x faster
	r := rand.New(rand.NewPCG(7, 8))
	prompt := func() string {
		return strings.Repeat(string(rune('a'+r.IntN(26))), 200+r.IntN(3000)) + strconv.FormatUint(r.Uint64(), 36)
	}
	for range 300 { // warm-up: random loads so both models see both features move
		pickOnce(t, p, clk, cands, engines, prompt(), []int{r.IntN(20), r.IntN(20)})
	}
	fast := 0
	for range 100 {
		if pickOnce(t, p, clk, cands, engines, prompt(), []int{0, 0}) == 1 {
			fast++
		}
	}
	if fast < 95 {
		t.Errorf("equal loads: %d of 100 picks went to the faster worker, want at least 95", fast)
	}
	pw := p.(*PredictedLatency)
	short := &Request{Model: "m", Text: prompt()[:300]}
	setLoad(t, cands[1], 30)
	slowY, _ := pw.Predict(cands[0], short)
	fastY, _ := pw.Predict(cands[1], short)
	if got := p.Pick(cands, short); got != 0 {
		t.Errorf("fast worker loaded with 30: Pick = %d (predicted slow %v, fast %v), want the idle slow worker", got, slowY, fastY)
	}
}

// Cold start: each cold model gets picks (least loaded first) until its samples are on the way,
// never more at once; with every model cold and waiting, the pick is least_load's.
func TestPredictedLatencyColdStart(t *testing.T) {
	_, cands := newFleet(t, worker.RolePrefill, "m", 2)
	clk := &fakeClock{t: time.Unix(1000, 0)}
	cfg := DefaultConfig()
	cfg.Now = clk.Now
	p := mustNew(t, PolicyPredictedLatency, cfg)
	counts := [2]int{}
	var pending []*Picks
	for range 2 * modelMinSamples {
		req := &Request{Model: "m", Text: "hello", Picks: &Picks{}}
		counts[p.Pick(cands, req)]++
		pending = append(pending, req.Picks)
	}
	if counts != [2]int{modelMinSamples, modelMinSamples} {
		t.Fatalf("cold picks %v, want %d each", counts, modelMinSamples)
	}
	setLoad(t, cands[0], 3)
	if got := p.Pick(cands, &Request{Model: "m", Text: "hello"}); got != 1 {
		t.Errorf("all cold and saturated: Pick = %d, want least_load's 1", got)
	}
	for _, pk := range pending {
		pk.Done()
	}
}

// A retry's pick replaces the earlier one: its queued work is released once, and Done releases the
// rest; nothing is learned from a request that never got a first token.
func TestPicksReleaseQueuedWork(t *testing.T) {
	_, cands := newFleet(t, worker.RolePrefill, "m", 1)
	p, err := NewPredictedLatency(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	st := p.state(cands[0].Key())
	req := &Request{Model: "m", Text: strings.Repeat("x", 2000), Picks: &Picks{}}
	p.Pick(cands, req)
	retry := *req
	retry.Text = strings.Repeat("y", 500)
	p.Pick(cands, &retry)
	if q, o := st.queued.Load(), st.open.Load(); q != 500 || o != 1 {
		t.Fatalf("after a retry: queued %d, open %d; want 500, 1", q, o)
	}
	req.Picks.Done()
	req.Picks.Done()
	if q, o := st.queued.Load(), st.open.Load(); q != 0 || o != 0 {
		t.Fatalf("after Done: queued %d, open %d; want 0, 0", q, o)
	}
	if _, ok := req.Picks.FirstToken(); ok || st.model.Samples() != 0 {
		t.Errorf("learned from a request that ended without a first token (%d samples)", st.model.Samples())
	}
	var nilPicks *Picks
	nilPicks.Done()
	if _, ok := nilPicks.FirstToken(); ok {
		t.Error("a nil Picks reported an outcome")
	}
}

// Forget drops the worker's model: it starts cold again.
func TestPredictedLatencyForget(t *testing.T) {
	_, cands := newFleet(t, worker.RolePrefill, "m", 1)
	p, _ := NewPredictedLatency(DefaultConfig())
	for range modelMinSamples {
		req := &Request{Model: "m", Text: "abc", Picks: &Picks{}}
		p.Pick(cands, req)
		req.Picks.FirstToken()
	}
	if _, ok := p.Predict(cands[0], &Request{Text: "abc"}); !ok {
		t.Fatal("no prediction after MinSamples observations")
	}
	p.Forget(cands[0].Key())
	if _, ok := p.Predict(cands[0], &Request{Text: "abc"}); ok {
		t.Error("predicts after Forget")
	}
}

// train feeds a worker's models directly: TTFT ttft whatever the features, ITL itl at every load.
func train(p *PredictedLatency, w *worker.Worker, ttft, itl float64) {
	st := p.state(w.Key())
	for i := range 2 * modelMinSamples {
		x := [nFeatures]float64{1, float64(i % 3), float64(i % 5), float64(i % 4)}
		st.model.Observe(x[:], ttft)
		st.itl.Observe([]float64{1, float64(i % 4)}, itl)
	}
	st.lastSeen.Store(p.cfg.Now().UnixNano()) // fresh: no refresh pick
}

// With --predicted-itl-slo-secs the pick keeps the predicted inter-token latency within the SLO when a
// candidate can: the slower-to-first-token worker wins when the faster one's decode is too slow; when
// none is within, the lowest TTFT wins anyway; without an SLO, TTFT alone decides.
func TestPredictedLatencyITLSLO(t *testing.T) {
	_, cands := newFleet(t, worker.RoleRegular, "m", 2)
	for _, tc := range []struct {
		slo  time.Duration
		itl0 float64
		want int
	}{
		{0, 0.2, 0},                      // no SLO: the lower TTFT
		{50 * time.Millisecond, 0.2, 1},  // worker 0 decodes at 200 ms per token: over the SLO
		{50 * time.Millisecond, 0.02, 0}, // both within: the lower TTFT
		{5 * time.Millisecond, 0.02, 0},  // none within: the lower TTFT anyway
	} {
		cfg := DefaultConfig()
		cfg.ITLSLO = tc.slo
		p, err := NewPredictedLatency(cfg)
		if err != nil {
			t.Fatal(err)
		}
		train(p, cands[0], 0.1, tc.itl0)
		train(p, cands[1], 0.3, 0.01)
		if got := p.Pick(cands, &Request{Model: "m", Text: "hi"}); got != tc.want {
			t.Errorf("SLO %v, worker 0 ITL %v: Pick = %d, want %d", tc.slo, tc.itl0, got, tc.want)
		}
	}
	cfg := DefaultConfig()
	cfg.ITLSLO = -time.Second
	if _, err := NewPredictedLatency(cfg); err == nil || !strings.Contains(err.Error(), "itl slo") {
		t.Errorf("a negative ITL SLO: err = %v, want one naming the itl slo", err)
	}
}

// Finished teaches the ITL model of the worker that generated, once, and only after a first token.
func TestPicksFinishedLearnsITL(t *testing.T) {
	_, cands := newFleet(t, worker.RoleRegular, "m", 1)
	p, _ := NewPredictedLatency(DefaultConfig())
	st := p.state(cands[0].Key())
	req := &Request{Model: "m", Text: "abc", Picks: &Picks{}}
	p.Pick(cands, req)
	req.Picks.Finished(cands[0].URL(), 10*time.Millisecond) // no first token yet
	req.Picks.FirstToken()
	req.Picks.Finished("http://other:1", 10*time.Millisecond) // another worker generated
	if n := st.itl.Samples(); n != 0 {
		t.Fatalf("%d ITL samples before a first token or from another worker, want 0", n)
	}
	req.Picks.Finished(cands[0].URL(), 10*time.Millisecond)
	req.Picks.Finished(cands[0].URL(), 10*time.Millisecond)
	if n := st.itl.Samples(); n != 1 {
		t.Errorf("%d ITL samples, want 1", n)
	}
}

// Lowest is the lowest prediction among routable candidates, for early rejection; with a cold model
// among them (it may be the fast one) or no candidate, it predicts nothing.
func TestPredictedLatencyLowest(t *testing.T) {
	_, cands := newFleet(t, worker.RolePrefill, "m", 3)
	p, _ := NewPredictedLatency(DefaultConfig())
	now := p.cfg.Now()
	train(p, cands[0], 0.4, 0.01)
	train(p, cands[1], 0.2, 0.01)
	if _, ok := p.Lowest(cands, &Request{Model: "m", Text: "hi"}, now); ok {
		t.Error("a prediction while worker 2's model is cold")
	}
	train(p, cands[2], 0.3, 0.01)
	d, ok := p.Lowest(cands, &Request{Model: "m", Text: "hi"}, now)
	if !ok || d < 190*time.Millisecond || d > 210*time.Millisecond {
		t.Errorf("Lowest = %v, %v; want about 200ms (worker 1's)", d, ok)
	}
	if _, ok := p.Lowest(nil, &Request{Model: "m"}, now); ok {
		t.Error("a prediction without candidates")
	}
}
