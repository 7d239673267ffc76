package admission_test

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
)

// featureMetrics adds the features' calls to fakeMetrics. With budget
// > 0 it checks every token reservation: a worker's tokens in flight may only
// exceed the budget while it holds exactly one slot (the oversize request
// admitted alone on an idle worker).
type featureMetrics struct {
	*fakeMetrics
	fmu        sync.Mutex
	budget     int64
	tokens     map[string]int64
	limits     map[string][]int // every SetLimit value, in order
	bandQueued map[string]int
	bandWaits  map[string][]time.Duration
	fviolation []string
}

func newFeatureMetrics(budget int64) *featureMetrics {
	return &featureMetrics{fakeMetrics: newFakeMetrics(), budget: budget, tokens: map[string]int64{},
		limits: map[string][]int{}, bandQueued: map[string]int{}, bandWaits: map[string][]time.Duration{}}
}

var _ admission.Metrics = (*featureMetrics)(nil)

func (m *featureMetrics) SetInflightTokens(w string, n int64) {
	m.fmu.Lock()
	defer m.fmu.Unlock()
	if n < 0 {
		m.fviolation = append(m.fviolation, "negative tokens in flight on "+w)
	}
	// SetInflight ran just before, with the new slot count.
	m.mu.Lock()
	slots := m.inflight[w]
	m.mu.Unlock()
	if m.budget > 0 && n > m.tokens[w] && n > m.budget && slots != 1 {
		m.fviolation = append(m.fviolation, "token reservation over the budget on "+w+" with other slots held")
	}
	m.tokens[w] = n
}

func (m *featureMetrics) SetLimit(w string, n int) {
	m.fmu.Lock()
	defer m.fmu.Unlock()
	m.limits[w] = append(m.limits[w], n)
}

func (m *featureMetrics) SetBandQueued(b string, n int) {
	m.fmu.Lock()
	defer m.fmu.Unlock()
	if n < 0 {
		m.fviolation = append(m.fviolation, "negative band queue "+b)
	}
	m.bandQueued[b] = n
}

func (m *featureMetrics) ObserveBandWait(b string, d time.Duration) {
	m.fmu.Lock()
	defer m.fmu.Unlock()
	m.bandWaits[b] = append(m.bandWaits[b], d)
}

func (m *featureMetrics) setBudget(b int64) {
	m.fmu.Lock()
	defer m.fmu.Unlock()
	m.budget = b
}

type featureSnap struct {
	tokens     map[string]int64
	limits     map[string][]int
	bandQueued map[string]int
	bandWaits  map[string][]time.Duration
	violations []string
}

func (m *featureMetrics) fsnap() featureSnap {
	m.fmu.Lock()
	defer m.fmu.Unlock()
	s := featureSnap{tokens: maps.Clone(m.tokens), limits: map[string][]int{}, bandQueued: maps.Clone(m.bandQueued),
		bandWaits: map[string][]time.Duration{}, violations: slices.Clone(m.fviolation)}
	for k, v := range m.limits {
		s.limits[k] = slices.Clone(v)
	}
	for k, v := range m.bandWaits {
		s.bandWaits[k] = slices.Clone(v)
	}
	return s
}

// tok returns r asking for n estimated tokens.
func tok(r admission.Request, n int64) admission.Request {
	r.Tokens = n
	return r
}

// prio returns r with priority p.
func prio(r admission.Request, p int) admission.Request {
	r.Priority = p
	return r
}

// threeBands are low (< 0), default (0..9) and high (>= 10).
var threeBands = []admission.Band{{Name: "low", MinPriority: -1000}, {Name: "default", MinPriority: 0}, {Name: "high", MinPriority: 10}}

func tokenBudget(budget int64, queue int) admission.Settings {
	return admission.Settings{MaxInflightTokensPerWorker: budget, QueueSize: queue, QueueTimeout: time.Minute}
}
