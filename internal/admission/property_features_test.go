package admission_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicegw/sluice/internal/admission"
)

// The feature property test: the source contract's operations plus token
// estimates (one above the budget), three priority bands with aging, and
// live updates of the request limit, the token budget and the queue size.

const (
	featAging   = time.Second
	featTimeout = 10 * time.Second // above the aging bound (2 s), so low waiters can reach the top
	featBudget  = 1000
)

var featTokens = []int64{1, 300, 700, 1500} // 1500: larger than the budget
var featPrios = []int{-5, 0, 20}            // low, default, high

type featOp struct {
	Kind    opKind
	Queue   int
	Target  int
	Tokens  int64
	Prio    int
	Index   int
	D       time.Duration
	Limit   int
	Budget  int64
	Size    int
	Disable bool
}

func genFeatOp() *rapid.Generator[featOp] {
	kinds := []opKind{opAcquire, opAcquire, opAcquire, opAcquire, opRelease, opRelease, opRelease,
		opCancel, opAdvance, opAdvance, opRemoveWorker, opAddWorker, opToggleBreaker, opUpdate, opWake}
	return rapid.Custom(func(t *rapid.T) featOp {
		o := featOp{Kind: rapid.SampledFrom(kinds).Draw(t, "kind")}
		switch o.Kind {
		case opAcquire:
			o.Queue = rapid.IntRange(0, 1).Draw(t, "queue")
			o.Target = max(rapid.IntRange(-4, 2).Draw(t, "target"), -1)
			o.Tokens = rapid.SampledFrom(featTokens).Draw(t, "tokens")
			o.Prio = rapid.SampledFrom(featPrios).Draw(t, "prio")
		case opRelease, opCancel:
			o.Index = rapid.IntRange(0, 7).Draw(t, "index")
		case opAdvance:
			o.D = rapid.SampledFrom([]time.Duration{100 * time.Millisecond, time.Second, 2 * time.Second}).Draw(t, "d")
		case opRemoveWorker, opAddWorker, opToggleBreaker:
			o.Index = rapid.IntRange(0, len(propWorkers)-1).Draw(t, "worker")
		case opUpdate:
			o.Limit = rapid.IntRange(0, 3).Draw(t, "limit")
			o.Budget = rapid.SampledFrom([]int64{0, featBudget}).Draw(t, "budget")
			o.Size = rapid.IntRange(0, 6).Draw(t, "size")
			o.Disable = rapid.IntRange(0, 9).Draw(t, "disable") == 0
		}
		return o
	})
}

// TestPropertyFeatureInvariants checks, after every step of random sequences:
// the controller's slots and tokens in flight equal what the test holds; no
// reservation takes a worker's tokens above the budget unless it is the only
// slot there (the oversize request alone on an idle worker); the queue holds
// exactly the callers still blocked; and at the end, over every pair of
// requests of one queue admitted out of arrival order, that the later one
// outranked the earlier one at that moment: a higher effective band, never
// the same band (FIFO within a band), and never after the aging bound. Every
// caller ends exactly once and all counters return to 0.
func TestPropertyFeatureInvariants(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		limit := rapid.IntRange(0, 3).Draw(rt, "limit")
		budget := rapid.SampledFrom([]int64{0, featBudget}).Draw(rt, "budget")
		if limit == 0 && budget == 0 {
			budget = featBudget
		}
		size := rapid.IntRange(0, 6).Draw(rt, "size")
		ops := rapid.SliceOfN(genFeatOp(), 1, 60).Draw(rt, "ops")
		var problems []string
		synctest.Test(t, func(t *testing.T) {
			problems = runFeatureProperty(limit, budget, size, ops)
		})
		if len(problems) > 0 {
			rt.Fatalf("invariants broken:\n%v", problems)
		}
	})
}

type featReq struct {
	id     string
	queue  string
	band   int
	seq    int
	tokens int64
	arr    time.Time
}

type featPick struct {
	id string
	at time.Time
}

type featHeld struct {
	slot    *admission.Slot
	tokens  int64
	counted bool
	stale   bool
}

func featSettings(limit int, budget int64, size int) admission.Settings {
	return admission.Settings{MaxInflightPerWorker: limit, MaxInflightTokensPerWorker: budget, QueueSize: size,
		QueueTimeout: featTimeout, Bands: threeBands, Aging: featAging}
}

func runFeatureProperty(limit int, budget int64, size int, ops []featOp) (problems []string) {
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	m := newFeatureMetrics(budget)
	p := newPlacement(map[string][]string{"q0": {"W0", "W1"}, "q1": {"W1", "W2"}})
	var pmu sync.Mutex // picks are recorded under the controller's lock, from any goroutine
	var picks []featPick
	p.onPick = func(pk pick, _ func(string) bool) {
		pmu.Lock()
		picks = append(picks, featPick{id: pk.id, at: time.Now()})
		pmu.Unlock()
	}
	s := featSettings(limit, budget, size)
	c, err := admission.New(s, admission.Deps{Metrics: m})
	if err != nil {
		return []string{err.Error()}
	}
	enabled := s.Enabled()
	reqs := map[string]featReq{}
	var pending []propWaiter
	var held []featHeld
	tokensOf := map[*admission.Slot]int64{}
	seq := 0

	collect := func(step int) {
		synctest.Wait()
		kept := pending[:0]
		for _, w := range pending {
			r, ok := done(w.ch)
			if !ok {
				kept = append(kept, w)
				continue
			}
			w.cancel()
			if _, again := done(w.ch); again {
				fail("step %d: %s ended twice", step, w.id)
			}
			switch o := admission.OutcomeOf(r.err); {
			case r.err == nil:
				held = append(held, featHeld{slot: r.slot, tokens: reqs[w.id].tokens, counted: enabled})
				tokensOf[r.slot] = reqs[w.id].tokens
			case o == admission.Unavailable && !errors.Is(r.err, errNoWorkers):
				fail("step %d: %s: unexpected error %v", step, w.id, r.err)
			}
		}
		pending = kept
	}
	check := func(step int) {
		st := c.Status()
		if st.QueuedTotal != len(pending) {
			fail("step %d: queued %d, but %d callers are blocked", step, st.QueuedTotal, len(pending))
		}
		slots, toks := map[string]int{}, map[string]int64{}
		for _, h := range held {
			if h.counted && !h.stale {
				slots[h.slot.Worker()]++
				toks[h.slot.Worker()] += h.tokens
			}
		}
		for _, w := range propWorkers {
			if st.Inflight[w] != slots[w] || st.InflightTokens[w] != toks[w] {
				fail("step %d: %s holds %d slots / %d tokens, the test %d / %d", step, w, st.Inflight[w], st.InflightTokens[w], slots[w], toks[w])
			}
		}
	}

	targets := map[string]string{}
	top := len(threeBands) - 1
	eff := func(r featReq, at time.Time) int { return min(r.band+int(at.Sub(r.arr)/featAging), top) }
	live := func(step int) {
		now := time.Now()
		heads := map[string]featReq{}
		for _, w := range pending {
			r := reqs[w.id]
			h, ok := heads[r.queue]
			if !ok || eff(r, now) > eff(h, now) || (eff(r, now) == eff(h, now) && r.seq < h.seq) {
				heads[r.queue] = r
			}
		}
		st := c.Status()
		cur := c.Settings()
		for q, h := range heads {
			p.set(func(p *placement) {
				for _, w := range p.pools[q] {
					if p.down[w] || p.open[w] || (targets[h.id] != "" && targets[h.id] != w) {
						continue
					}
					n, tk := st.Inflight[w], st.InflightTokens[w]
					fitsReq := cur.MaxInflightPerWorker <= 0 || n < cur.MaxInflightPerWorker
					fitsTok := cur.MaxInflightTokensPerWorker <= 0 || n == 0 || tk+h.tokens <= cur.MaxInflightTokensPerWorker
					if fitsReq && fitsTok {
						fail("step %d: head %s waits while %s has room (%d slots, %d tokens)", step, h.id, w, n, tk)
					}
				}
			})
		}
	}

	for i, o := range ops {
		switch o.Kind {
		case opAcquire:
			seq++
			q := fmt.Sprintf("q%d", o.Queue)
			id := fmt.Sprintf("%s#%d", q, seq)
			target := ""
			if o.Target >= 0 {
				target = propWorkers[o.Target]
			}
			targets[id] = target
			r := tok(prio(p.req(q, id, target), o.Prio), o.Tokens)
			reqs[id] = featReq{id: id, queue: q, band: s.BandOf(o.Prio), seq: seq, tokens: o.Tokens, arr: time.Now()}
			ctx, cancel := context.WithCancel(bg)
			pending = append(pending, propWaiter{id: id, ch: goAcquire(ctx, c, r), cancel: cancel})
		case opRelease:
			if len(held) > 0 {
				j := o.Index % len(held)
				h := held[j]
				held = append(held[:j], held[j+1:]...)
				h.slot.Release(admission.ReleaseCompleted)
				h.slot.Release(admission.ReleaseFailed) // idempotent
			}
		case opCancel:
			if len(pending) > 0 {
				pending[o.Index%len(pending)].cancel()
			}
		case opAdvance:
			time.Sleep(o.D)
		case opRemoveWorker:
			w := propWorkers[o.Index]
			p.set(func(p *placement) { p.down[w] = true })
			c.RemoveWorker(w)
			for j := range held {
				if held[j].slot.Worker() == w {
					held[j].stale = true
				}
			}
			c.Wake()
		case opAddWorker:
			w := propWorkers[o.Index]
			p.set(func(p *placement) { p.down[w] = false })
			c.Wake()
		case opToggleBreaker:
			w := propWorkers[o.Index]
			p.set(func(p *placement) { p.open[w] = !p.open[w] })
		case opUpdate:
			ns := featSettings(o.Limit, o.Budget, o.Size)
			if o.Disable {
				ns.MaxInflightPerWorker, ns.MaxInflightTokensPerWorker = 0, 0
			}
			m.setBudget(ns.MaxInflightTokensPerWorker)
			if err := c.Update(ns); err != nil {
				fail("step %d: Update: %v", i, err)
			}
			enabled = ns.Enabled()
		case opWake:
			c.Wake()
		}
		collect(i)
		check(i)
		// Liveness: after a Wake every head has selected, so none may wait
		// while a worker of its pool could take it.
		c.Wake()
		collect(i)
		live(i)
	}

	for _, w := range pending {
		w.cancel()
	}
	collect(len(ops))
	if len(pending) != 0 {
		fail("%d callers still blocked after cancellation", len(pending))
	}
	for _, h := range held {
		h.slot.Release(admission.ReleaseCompleted)
	}
	held = nil
	check(len(ops))

	// Ranking: every pair of one queue admitted out of arrival order.
	pmu.Lock()
	order := append([]featPick(nil), picks...)
	pmu.Unlock()
	pos := map[string]int{}
	for k, pk := range order {
		if _, dup := pos[pk.id]; dup {
			fail("%s selected twice", pk.id)
		}
		pos[pk.id] = k
	}
	for k, pk := range order {
		y := reqs[pk.id]
		for _, later := range order[k+1:] {
			x := reqs[later.id]
			if x.queue != y.queue || x.seq > y.seq {
				continue
			}
			// x arrived before y but was admitted after it.
			switch {
			case x.band == y.band:
				fail("FIFO within band %d broken: %s admitted before %s", x.band, y.id, x.id)
			case y.arr.Sub(x.arr) >= time.Duration(top-x.band)*featAging:
				fail("aging bound broken: %s (band %d, arrived %v later) admitted before %s (band %d)", y.id, y.band, y.arr.Sub(x.arr), x.id, x.band)
			case eff(y, pk.at) <= eff(x, pk.at):
				fail("%s (effective band %d) admitted before %s (effective band %d)", y.id, eff(y, pk.at), x.id, eff(x, pk.at))
			}
		}
	}
	snap, fsnap := m.snapshot(), m.fsnap()
	problems = append(problems, fsnap.violations...)
	for w, n := range snap.inflight {
		if n != 0 || fsnap.tokens[w] != 0 {
			fail("%s: %d slots / %d tokens in the gauges at the end", w, n, fsnap.tokens[w])
		}
	}
	for b, n := range fsnap.bandQueued {
		if n != 0 {
			fail("band %s gauge = %d at the end", b, n)
		}
	}
	if snap.queued != 0 {
		fail("queued gauge = %d at the end", snap.queued)
	}
	return problems
}
