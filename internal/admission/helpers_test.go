package admission_test

import (
	"context"
	"errors"
	"flag"
	"maps"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicegw/sluice/internal/admission"
)

func TestMain(m *testing.M) {
	// The property test's steps are cheap (synctest time): run more cases
	// than rapid's default 100 unless -rapid.checks was given.
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
	if !set {
		if err := flag.Set("rapid.checks", "1000"); err != nil {
			panic(err)
		}
	}
	goleak.VerifyTestMain(m)
}

// errNoWorkers stands for placement's "no available workers" (503).
var errNoWorkers = errors.New("no available workers")

// placement is a fake prefill placement: per-queue candidate pools, workers
// that can be down (removed/unhealthy: final error when none is left) or
// have an open circuit breaker (temporarily unusable: ErrNoCapacity). It
// picks the first usable candidate with capacity.
type placement struct {
	mu    sync.Mutex
	pools map[string][]string
	down  map[string]bool
	open  map[string]bool
	picks []pick         // successful selections, in order
	calls map[string]int // Select calls by request id
	// sawCapacity records requests for which hasCapacity ever said yes.
	sawCapacity map[string]bool
	// onPick, if set, runs for every successful selection (under the
	// controller's lock).
	onPick func(p pick, hasCap func(string) bool)
}

type pick struct{ queue, id, worker string }

func newPlacement(pools map[string][]string) *placement {
	return &placement{
		pools:       pools,
		down:        map[string]bool{},
		open:        map[string]bool{},
		calls:       map[string]int{},
		sawCapacity: map[string]bool{},
	}
}

func (p *placement) set(f func(p *placement)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(p)
}

func (p *placement) callsOf(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[id]
}

func (p *placement) pickIDs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ids []string
	for _, pk := range p.picks {
		ids = append(ids, pk.id)
	}
	return ids
}

// req builds the request id for queue; target != "" is a strict target
// worker (consistent hashing's header): wait for it, never move.
func (p *placement) req(queue, id, target string) admission.Request {
	return admission.Request{Queue: queue, Select: func(hasCap func(string) bool) (string, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.calls[id]++
		var live []string
		for _, w := range p.pools[queue] {
			if !p.down[w] {
				live = append(live, w)
			}
		}
		if len(live) == 0 || (target != "" && !slices.Contains(live, target)) {
			return "", errNoWorkers
		}
		if target != "" {
			live = []string{target}
		}
		for _, w := range live {
			if p.open[w] {
				continue
			}
			if hasCap(w) {
				p.sawCapacity[id] = true
				pk := pick{queue, id, w}
				p.picks = append(p.picks, pk)
				if p.onPick != nil {
					p.onPick(pk, hasCap)
				}
				return w, nil
			}
		}
		return "", admission.ErrNoCapacity
	}}
}

type result struct {
	slot *admission.Slot
	err  error
}

// goAcquire starts Acquire in a goroutine; in a synctest bubble, follow it
// with synctest.Wait() so it has queued before the next step.
func goAcquire(ctx context.Context, c *admission.Controller, r admission.Request) <-chan result {
	ch := make(chan result, 1)
	go func() {
		s, err := c.Acquire(ctx, r)
		ch <- result{s, err}
	}()
	return ch
}

// done returns the result if Acquire has returned.
func done(ch <-chan result) (result, bool) {
	select {
	case r := <-ch:
		return r, true
	default:
		return result{}, false
	}
}

func mustDone(t *testing.T, name string, ch <-chan result) result {
	t.Helper()
	r, ok := done(ch)
	if !ok {
		t.Fatalf("%s: still waiting, want a result", name)
	}
	return r
}

func mustAdmit(t *testing.T, name string, ch <-chan result) *admission.Slot {
	t.Helper()
	r := mustDone(t, name, ch)
	if r.err != nil {
		t.Fatalf("%s: err = %v, want admitted", name, r.err)
	}
	return r.slot
}

func mustWait(t *testing.T, name string, ch <-chan result) {
	t.Helper()
	if r, ok := done(ch); ok {
		t.Fatalf("%s: returned (slot %v, err %v), want still waiting", name, r.slot != nil, r.err)
	}
}

func mustNew(t testing.TB, s admission.Settings, d admission.Deps) *admission.Controller {
	t.Helper()
	c, err := admission.New(s, d)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func on(limit, queue int) admission.Settings {
	return admission.Settings{MaxInflightPerWorker: limit, QueueSize: queue, QueueTimeout: time.Minute}
}

// fakeMetrics records every call; it checks that each reservation keeps the
// worker at or under limit (when limit > 0) and that no gauge goes negative.
type fakeMetrics struct {
	admission.NopMetrics // the features' and seats' series: featureMetrics, seatMetrics
	mu                   sync.Mutex
	limit                int
	inflight             map[string]int
	setCalls             []string // "worker=n"
	deleted              []string
	queued               int
	queuedBy             map[string]int // per queue key
	waits                []time.Duration
	waitLabels           []string // "queue/worker" of each wait
	rejections           map[admission.Outcome]int
	violations           []string
}

func newFakeMetrics() *fakeMetrics {
	return &fakeMetrics{inflight: map[string]int{}, rejections: map[admission.Outcome]int{}}
}

func (m *fakeMetrics) SetInflight(w string, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n < 0 {
		m.violations = append(m.violations, "negative in-flight on "+w)
	}
	if m.limit > 0 && n > m.inflight[w] && n > m.limit {
		m.violations = append(m.violations, "reservation over the limit on "+w)
	}
	m.inflight[w] = n
	m.setCalls = append(m.setCalls, w+"="+strconv.Itoa(n))
}

func (m *fakeMetrics) DeleteWorker(w string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.inflight, w)
	m.deleted = append(m.deleted, w)
}

func (m *fakeMetrics) AddQueued(q string, delta int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.queued += delta
	if m.queuedBy == nil {
		m.queuedBy = map[string]int{}
	}
	m.queuedBy[q] += delta
	if m.queuedBy[q] < 0 {
		m.violations = append(m.violations, "negative queue length of "+q)
	}
}

func (m *fakeMetrics) ObserveWait(q, w string, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.waits = append(m.waits, d)
	m.waitLabels = append(m.waitLabels, q+"/"+w)
}

func (m *fakeMetrics) IncRejection(_ string, o admission.Outcome) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rejections[o]++
}

func (m *fakeMetrics) setLimit(n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.limit = n
}

func (m *fakeMetrics) snapshot() fakeMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	return fakeMetrics{
		inflight:   maps.Clone(m.inflight),
		setCalls:   slices.Clone(m.setCalls),
		deleted:    slices.Clone(m.deleted),
		queued:     m.queued,
		queuedBy:   maps.Clone(m.queuedBy),
		waits:      slices.Clone(m.waits),
		waitLabels: slices.Clone(m.waitLabels),
		rejections: maps.Clone(m.rejections),
		violations: slices.Clone(m.violations),
	}
}
