package worker

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Health is a worker's health as seen by the gateway.
type Health int32

// The health states. Only Ready workers are routable.
const (
	// HealthPending: newly added, not yet proven healthy.
	HealthPending Health = iota
	// HealthReady: passing health checks; routable.
	HealthReady
	// HealthNotReady: failing health checks.
	HealthNotReady
	// HealthDraining: being removed; never routable again.
	HealthDraining
)

func (h Health) String() string {
	switch h {
	case HealthPending:
		return "pending"
	case HealthReady:
		return "ready"
	case HealthNotReady:
		return "not_ready"
	case HealthDraining:
		return "draining"
	}
	return fmt.Sprintf("Health(%d)", int32(h))
}

// Worker is one inference worker. Only a Registry creates Workers. The URL,
// role, protocol and models of a Worker never change (Registry.Replace makes
// a new Worker); labels, API key and bootstrap port may be updated.
//
// An engine running data-parallel attention (Spec.DPSize > 1) hosts several
// ranks, each with its own queue and KV cache. Its Worker then has one rank
// view per rank ([Worker.Ranks]): a Worker of its own for placement, with its
// own key and load counter, sharing the engine's health, breaker and spec. A
// rank view's URL is the engine's; its load also counts on the engine.
type Worker struct {
	id       string
	url      string
	key      string // url, or url@rank for a rank view
	role     Role
	protocol Protocol
	handoff  Handoff
	models   []string // sorted; empty = any model
	rank     int      // -1 unless a rank view
	parent   *Worker  // the engine of a rank view; nil otherwise
	ranks    []*Worker

	s    *shared
	load atomic.Int64 // in flight against this worker (a rank view: this rank)
	// engineLoad is the engine's last reported load (LoadMonitor); nil when unknown. Set on
	// engines only: a rank view reads its engine's.
	engineLoad atomic.Pointer[EngineLoad]

	// Idle notification for WaitIdle (engines only); only touched when someone waits.
	idleWaiters atomic.Int32
	idleMu      sync.Mutex
	idleCh      chan struct{} // closed and replaced when load reaches 0
}

// shared is the state an engine's Worker and its rank views have in common.
type shared struct {
	spec    atomic.Pointer[Spec] // copy-on-write; never mutated in place
	health  atomic.Int32
	removed atomic.Bool
	breaker *Breaker
	// place is the spec's topology and revision (topology.go), stored with the spec; nil when none.
	place atomic.Pointer[Place]
}

func newWorker(id string, spec Spec, health Health, br *Breaker) *Worker {
	w := &Worker{
		id:       id,
		url:      spec.URL,
		key:      spec.URL,
		role:     spec.Role,
		protocol: spec.Protocol,
		handoff:  spec.Handoff(),
		models:   slices.Clone(spec.Models),
		rank:     -1,
		s:        &shared{breaker: br},
		idleCh:   make(chan struct{}),
	}
	w.s.storeSpec(&spec)
	w.s.health.Store(int32(health))
	if spec.DPSize > 1 {
		w.ranks = make([]*Worker, spec.DPSize)
		for r := range w.ranks {
			w.ranks[r] = &Worker{
				id: id, url: w.url, key: w.url + "@" + strconv.Itoa(r), role: w.role, protocol: w.protocol,
				handoff: w.handoff, models: w.models, rank: r, parent: w, s: w.s,
			}
		}
	}
	return w
}

// storeSpec stores a spec and the placement read from it.
func (s *shared) storeSpec(spec *Spec) {
	s.spec.Store(spec)
	if p := placeOf(spec.Labels); p != (Place{}) {
		s.place.Store(&p)
	} else {
		s.place.Store(nil)
	}
}

// Key names the worker in placement state: its URL, or URL@rank for a rank view (the Rust gateway's
// notation for DP-aware workers).
func (w *Worker) Key() string { return w.key }

// Rank returns a rank view's data-parallel rank, or -1 for an engine.
func (w *Worker) Rank() int { return w.rank }

// Engine returns the engine a rank view belongs to, or w itself.
func (w *Worker) Engine() *Worker {
	if w.parent != nil {
		return w.parent
	}
	return w
}

// Ranks returns the rank views of a data-parallel engine, in rank order; nil when it has one rank.
// The slice is shared: do not modify it.
func (w *Worker) Ranks() []*Worker { return w.ranks }

// ID returns the worker's id, stable for its lifetime (kept across Replace).
func (w *Worker) ID() string { return w.id }

// URL returns the normalised base URL.
func (w *Worker) URL() string { return w.url }

// Role returns the worker's role.
func (w *Worker) Role() Role { return w.role }

// Protocol returns the worker's protocol.
func (w *Worker) Protocol() Protocol { return w.protocol }

// Handoff returns how the worker hands KV to (or takes it from) its PD partner.
func (w *Worker) Handoff() Handoff { return w.handoff }

// Spec returns a deep copy of the current spec.
func (w *Worker) Spec() Spec { return w.s.spec.Load().Clone() }

// KVRole returns the declared KV connector role (Spec.KVRole) without copying the spec.
func (w *Worker) KVRole() string { return w.s.spec.Load().KVRole }

// KVEvents returns the KV-cache events endpoint spec (Spec.KVEvents) without copying the spec.
func (w *Worker) KVEvents() string { return w.s.spec.Load().KVEvents }

// BootstrapPort returns the current bootstrap port (0 = none) without copying
// the spec.
func (w *Worker) BootstrapPort() int { return w.s.spec.Load().BootstrapPort }

// APIKey returns the current API key without copying the spec.
func (w *Worker) APIKey() string { return w.s.spec.Load().APIKey }

// Models returns a copy of the served model ids; empty means any model.
func (w *Worker) Models() []string { return slices.Clone(w.models) }

// ServesModel reports whether the worker serves model m. A worker with no
// models listed serves any model.
func (w *Worker) ServesModel(m string) bool {
	if len(w.models) == 0 {
		return true
	}
	_, ok := slices.BinarySearch(w.models, m)
	return ok
}

// Health returns the current health.
func (w *Worker) Health() Health { return Health(w.s.health.Load()) }

// Removed reports whether the worker was removed or replaced.
func (w *Worker) Removed() bool { return w.s.removed.Load() }

// Breaker returns the worker's circuit breaker.
func (w *Worker) Breaker() *Breaker { return w.s.breaker }

// Routable reports whether requests may be sent to the worker at now: it is
// Ready, still registered, and its breaker allows.
func (w *Worker) Routable(now time.Time) bool {
	return Health(w.s.health.Load()) == HealthReady && !w.s.removed.Load() && w.s.breaker.Allow(now)
}

// Load returns the number of in-flight requests counted against the worker.
func (w *Worker) Load() int64 { return w.load.Load() }

// AcquireLoad counts one more in-flight request against the worker (a rank
// view: against the rank and its engine). The caller must Release the guard
// when the request ends.
func (w *Worker) AcquireLoad() *LoadGuard {
	w.load.Add(1)
	if w.parent != nil {
		w.parent.load.Add(1)
	}
	return &LoadGuard{w: w}
}

// LoadGuard is one unit of a worker's load. Release it exactly once; extra
// Release calls are no-ops.
type LoadGuard struct {
	w    *Worker
	done atomic.Bool
}

// Worker returns the worker the guard counts against (nil for a nil guard).
func (g *LoadGuard) Worker() *Worker {
	if g == nil {
		return nil
	}
	return g.w
}

// Release gives the load back. It is idempotent and safe on a nil guard.
func (g *LoadGuard) Release() {
	if g == nil || !g.done.CompareAndSwap(false, true) {
		return
	}
	e := g.w
	if e.parent != nil {
		e.load.Add(-1)
		e = e.parent
	}
	if e.load.Add(-1) == 0 && e.idleWaiters.Load() > 0 {
		e.signalIdle()
	}
}

func (w *Worker) signalIdle() {
	w.idleMu.Lock()
	close(w.idleCh)
	w.idleCh = make(chan struct{})
	w.idleMu.Unlock()
}

// waitIdle blocks until the worker's load is zero or ctx is done.
func (w *Worker) waitIdle(ctx context.Context) error {
	// Registering as a waiter before reading the load pairs with Release,
	// which decrements before checking for waiters: one of the two sees the
	// other, so a zero crossing is never missed.
	w.idleWaiters.Add(1)
	defer w.idleWaiters.Add(-1)
	for {
		w.idleMu.Lock()
		if w.load.Load() <= 0 {
			w.idleMu.Unlock()
			return nil
		}
		ch := w.idleCh
		w.idleMu.Unlock()
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-ch:
		}
	}
}
