package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Registry errors.
var (
	ErrNotFound      = errors.New("worker not found")
	ErrAlreadyExists = errors.New("worker already exists")
	ErrInvalidSpec   = errors.New("invalid worker spec")
	ErrDraining      = errors.New("worker is draining")
	// ErrManaged is returned by callers (the admin API) that refuse to change
	// a worker owned by service discovery; the registry itself does not check.
	ErrManaged = errors.New("worker is managed by service discovery")
)

// EventKind says what changed.
type EventKind int

// The event kinds.
const (
	EventAdded EventKind = iota + 1
	EventRemoved
	EventReplaced
	EventHealthChanged
	EventUpdated
	// EventBreakerRecovered: a passing health probe turned the worker's
	// open breaker half-open, so it is routable again.
	EventBreakerRecovered
)

func (k EventKind) String() string {
	switch k {
	case EventAdded:
		return "added"
	case EventRemoved:
		return "removed"
	case EventReplaced:
		return "replaced"
	case EventHealthChanged:
		return "health_changed"
	case EventUpdated:
		return "updated"
	case EventBreakerRecovered:
		return "breaker_recovered"
	}
	return "EventKind(" + strconv.Itoa(int(k)) + ")"
}

// Event describes one registry change. Breaker transitions are not events
// (Open -> HalfOpen after the timeout happens lazily on read), except the
// one a passing health probe causes (EventBreakerRecovered): waiters for a
// routable worker should not wait for their next poll.
type Event struct {
	Kind EventKind
	// Worker is the worker concerned; for EventReplaced, the new one.
	Worker *Worker
	// Prev is the replaced worker (EventReplaced only).
	Prev *Worker
	// Old and New are the health before and after (EventHealthChanged; for
	// other kinds both hold the worker's current health).
	Old, New Health
}

// RegistryOptions configures a Registry. Zero values are usable.
type RegistryOptions struct {
	// Clock is used by the circuit breakers; nil means time.Now.
	Clock func() time.Time
	// Logger; nil discards.
	Logger *slog.Logger
	// Breaker configures each worker's circuit breaker; zero fields take
	// defaults.
	Breaker BreakerConfig
	// StartReady makes new workers Ready at once instead of Pending. Set it
	// when health checks are disabled.
	StartReady bool
	// OnBreakerTransition, when set, is told of every circuit breaker state
	// change, with the worker. It must not block.
	OnBreakerTransition func(w *Worker, from, to BreakerState, reason string)
}

// Registry is the set of known workers. See the package doc for its
// concurrency model.
type Registry struct {
	clock      func() time.Time
	logger     *slog.Logger
	breakerCfg BreakerConfig
	startReady bool
	onBreaker  func(w *Worker, from, to BreakerState, reason string)

	snap atomic.Pointer[Snapshot]

	// emitMu serialises writers end to end (change + event delivery) so that
	// subscribers see events in publication order.
	emitMu sync.Mutex
	// mu guards the fields below; never held while callbacks run.
	mu      sync.Mutex
	byID    map[string]*Worker
	nextID  uint64
	version uint64

	subsMu  sync.Mutex
	subs    []*subscriber
	nextSub uint64
}

type subscriber struct {
	id uint64
	fn func(Event)
}

// NewRegistry returns an empty registry. An invalid breaker configuration
// is replaced by defaults field by field and logged.
func NewRegistry(opts RegistryOptions) *Registry {
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	bc, err := opts.Breaker.Normalized()
	if err != nil {
		opts.Logger.Warn("invalid circuit breaker config, using defaults", "err", err)
		bc = DefaultBreakerConfig()
		bc.Disabled = opts.Breaker.Disabled
	}
	r := &Registry{
		clock:      opts.Clock,
		logger:     opts.Logger,
		breakerCfg: bc,
		startReady: opts.StartReady,
		onBreaker:  opts.OnBreakerTransition,
		byID:       make(map[string]*Worker),
	}
	r.snap.Store(buildSnapshot(0, nil))
	return r
}

// Snapshot returns the current immutable snapshot. It never locks.
func (r *Registry) Snapshot() *Snapshot { return r.snap.Load() }

// Get returns the worker with the given id.
func (r *Registry) Get(id string) (*Worker, bool) {
	w, ok := r.snap.Load().byID[id]
	return w, ok
}

// Subscribe registers fn to be called after every change, synchronously and
// in order. fn must not block and must not call the Registry's mutating
// methods. The returned function unsubscribes; it is idempotent.
func (r *Registry) Subscribe(fn func(Event)) (unsubscribe func()) {
	r.subsMu.Lock()
	r.nextSub++
	id := r.nextSub
	// Copy-on-write so delivery can iterate without holding subsMu.
	r.subs = append(slices.Clip(r.subs), &subscriber{id: id, fn: fn})
	r.subsMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.subsMu.Lock()
			defer r.subsMu.Unlock()
			r.subs = slices.DeleteFunc(slices.Clone(r.subs), func(s *subscriber) bool { return s.id == id })
		})
	}
}

func (r *Registry) emit(evs ...Event) {
	r.subsMu.Lock()
	subs := r.subs
	r.subsMu.Unlock()
	for _, ev := range evs {
		for _, s := range subs {
			s.fn(ev)
		}
	}
}

func (r *Registry) initialHealth() Health {
	if r.startReady {
		return HealthReady
	}
	return HealthPending
}

// publishLocked rebuilds and swaps the snapshot; r.mu must be held.
func (r *Registry) publishLocked() {
	r.version++
	ws := make([]*Worker, 0, len(r.byID))
	for _, w := range r.byID {
		ws = append(ws, w)
	}
	r.snap.Store(buildSnapshot(r.version, ws))
}

func (r *Registry) findURLLocked(url string) *Worker {
	for _, w := range r.byID {
		if w.url == url {
			return w
		}
	}
	return nil
}

// Add registers a new worker. It fails with ErrInvalidSpec (wrapping the
// reason) or ErrAlreadyExists when a worker has the same URL.
func (r *Registry) Add(spec Spec) (*Worker, error) {
	spec, err := spec.Normalized()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	r.emitMu.Lock()
	defer r.emitMu.Unlock()

	r.mu.Lock()
	if r.findURLLocked(spec.URL) != nil {
		r.mu.Unlock()
		return nil, fmt.Errorf("%w: %s", ErrAlreadyExists, spec.URL)
	}
	r.nextID++
	w := r.newWorker("w"+strconv.FormatUint(r.nextID, 10), spec)
	r.byID[w.id] = w
	r.publishLocked()
	r.mu.Unlock()

	r.logger.Info("worker added", "id", w.id, "url", w.url, "role", w.role, "health", w.Health())
	h := w.Health()
	r.emit(Event{Kind: EventAdded, Worker: w, Old: h, New: h})
	return w, nil
}

// notifyBreakerRecovered emits EventBreakerRecovered for w.
func (r *Registry) notifyBreakerRecovered(w *Worker) {
	r.emitMu.Lock()
	defer r.emitMu.Unlock()
	if w.Removed() {
		return
	}
	h := w.Health()
	r.emit(Event{Kind: EventBreakerRecovered, Worker: w, Old: h, New: h})
}

// newWorker builds a worker with a fresh breaker wired to the transition observer.
func (r *Registry) newWorker(id string, spec Spec) *Worker {
	br := NewBreaker(r.breakerCfg, r.clock)
	w := newWorker(id, spec, r.initialHealth(), br)
	if r.onBreaker != nil {
		br.observer = func(from, to BreakerState, reason string) { r.onBreaker(w, from, to, reason) }
	}
	return w
}

// Remove unregisters a worker at once, whatever its load. Use Drain and
// WaitIdle first for a graceful removal.
func (r *Registry) Remove(id string) error {
	r.emitMu.Lock()
	defer r.emitMu.Unlock()

	r.mu.Lock()
	w, ok := r.byID[id]
	if !ok {
		r.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	delete(r.byID, id)
	w.s.removed.Store(true)
	r.publishLocked()
	r.mu.Unlock()

	r.logger.Info("worker removed", "id", id, "url", w.url)
	h := w.Health()
	r.emit(Event{Kind: EventRemoved, Worker: w, Old: h, New: h})
	return nil
}

// Replace swaps the worker with the given id for a new Worker built from
// spec. The id is kept; health starts afresh (Pending, or Ready with
// StartReady), and so do the breaker and the load counter. In-flight guards
// still release against the old Worker, which is never routable again.
func (r *Registry) Replace(id string, spec Spec) (*Worker, error) {
	spec, err := spec.Normalized()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	r.emitMu.Lock()
	defer r.emitMu.Unlock()

	r.mu.Lock()
	old, ok := r.byID[id]
	if !ok {
		r.mu.Unlock()
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if other := r.findURLLocked(spec.URL); other != nil && other != old {
		r.mu.Unlock()
		return nil, fmt.Errorf("%w: %s", ErrAlreadyExists, spec.URL)
	}
	w := r.newWorker(id, spec)
	r.byID[id] = w
	old.s.removed.Store(true)
	r.publishLocked()
	r.mu.Unlock()

	r.logger.Info("worker replaced", "id", id, "old_url", old.url, "url", w.url)
	h := w.Health()
	r.emit(Event{Kind: EventReplaced, Worker: w, Prev: old, Old: h, New: h})
	return w, nil
}

// Update changes a worker's mutable spec fields (labels, API key, bootstrap
// port, DetectPending) in place, copy-on-write. fn receives a deep copy; changing the URL,
// role, protocol or models is rejected (use Replace).
func (r *Registry) Update(id string, fn func(*Spec)) error {
	r.emitMu.Lock()
	defer r.emitMu.Unlock()

	r.mu.Lock()
	w, ok := r.byID[id]
	if !ok {
		r.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	cur := w.s.spec.Load()
	next := cur.Clone()
	fn(&next)
	if next.URL != cur.URL || next.Role != cur.Role || next.Protocol != cur.Protocol ||
		!slices.Equal(next.Models, cur.Models) || next.DPSize != cur.DPSize || next.KVConnector != cur.KVConnector || next.KVRole != cur.KVRole || next.DecodeWindow != cur.DecodeWindow ||
		next.KVEvents != cur.KVEvents {
		r.mu.Unlock()
		return fmt.Errorf("%w: update may change only labels, API key and bootstrap port; use replace", ErrInvalidSpec)
	}
	if err := next.Validate(); err != nil {
		r.mu.Unlock()
		return fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	if g := next.Given; g != nil {
		// What the operator changes later is what detection must start from next time too.
		g.Labels, g.APIKey = maps.Clone(next.Labels), next.APIKey
		if next.BootstrapPort != cur.BootstrapPort {
			g.BootstrapPort = next.BootstrapPort
		}
	}
	oldPlace := w.Place()
	w.s.storeSpec(&next)
	if w.Place() != oldPlace {
		r.publishLocked() // Snapshot.Placed may change
	}
	r.mu.Unlock()

	h := w.Health()
	r.emit(Event{Kind: EventUpdated, Worker: w, Old: h, New: h})
	return nil
}

// SetHealth sets a worker's health, emitting EventHealthChanged when it
// changes. Draining is sticky: leaving it fails with ErrDraining.
func (r *Registry) SetHealth(id string, h Health) error {
	if h < HealthPending || h > HealthDraining {
		return fmt.Errorf("invalid health %d", h)
	}
	r.emitMu.Lock()
	defer r.emitMu.Unlock()

	r.mu.Lock()
	w, ok := r.byID[id]
	if !ok {
		r.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	old := w.Health()
	if old == h {
		r.mu.Unlock()
		return nil
	}
	if old == HealthDraining {
		r.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrDraining, id)
	}
	w.s.health.Store(int32(h))
	r.mu.Unlock()

	r.logger.Info("worker health changed", "id", id, "url", w.url, "from", old, "to", h)
	r.emit(Event{Kind: EventHealthChanged, Worker: w, Old: old, New: h})
	return nil
}

// Drain marks a worker Draining: it is no longer routable and its in-flight
// requests finish. Wait with WaitIdle, then Remove.
func (r *Registry) Drain(id string) error {
	return r.SetHealth(id, HealthDraining)
}

// WaitIdle blocks until the worker's load reaches zero or ctx is done.
func (r *Registry) WaitIdle(ctx context.Context, id string) error {
	w, ok := r.Get(id)
	if !ok {
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return w.waitIdle(ctx)
}

// Snapshot is an immutable view of the registry. Slices it returns are
// shared: do not modify them.
type Snapshot struct {
	version uint64
	all     []*Worker // sorted by URL
	byID    map[string]*Worker
	byURL   map[string]*Worker
	byRole  [numRoles][]*Worker
	// anyModel[r]: workers of role r that list no model (serve any).
	anyModel [numRoles][]*Worker
	// byModel[r][m]: workers of role r serving model m, including anyModel.
	byModel [numRoles]map[string][]*Worker
	models  []string
	// handoffs[r]: the KV handoffs spoken by workers of role r.
	handoffs [numRoles]HandoffSet
	// rankModel[r][m] (and rankAny[r]): like byModel and anyModel with every data-parallel engine
	// replaced by its rank views; nil when no worker of role r has ranks.
	rankModel [numRoles]map[string][]*Worker
	rankAny   [numRoles][]*Worker
	rankRole  [numRoles][]*Worker
	// placed: some worker has a topology or a revision (topology.go).
	placed bool
}

func buildSnapshot(version uint64, ws []*Worker) *Snapshot {
	slices.SortFunc(ws, func(a, b *Worker) int { return cmp.Compare(a.url, b.url) })
	s := &Snapshot{
		version: version,
		all:     ws,
		byID:    make(map[string]*Worker, len(ws)),
		byURL:   make(map[string]*Worker, len(ws)),
	}
	modelSet := map[string]struct{}{}
	for _, w := range ws {
		s.byID[w.id] = w
		s.byURL[w.url] = w
		ri := w.role.index()
		s.byRole[ri] = append(s.byRole[ri], w)
		s.handoffs[ri] = s.handoffs[ri].Add(w.handoff)
		s.placed = s.placed || w.s.place.Load() != nil
		if len(w.models) == 0 {
			s.anyModel[ri] = append(s.anyModel[ri], w)
		}
		for _, m := range w.models {
			modelSet[m] = struct{}{}
		}
	}
	for m := range modelSet {
		s.models = append(s.models, m)
	}
	slices.Sort(s.models)
	for ri := range numRoles {
		s.byModel[ri] = make(map[string][]*Worker, len(s.models))
		for _, m := range s.models {
			var list []*Worker
			// byRole is sorted by URL, so list is too.
			for _, w := range s.byRole[ri] {
				if w.ServesModel(m) {
					list = append(list, w)
				}
			}
			if len(list) > 0 {
				s.byModel[ri][m] = list
			}
		}
		if anyRanks(s.byRole[ri]) {
			s.rankRole[ri] = expandRanks(s.byRole[ri])
			s.rankAny[ri] = expandRanks(s.anyModel[ri])
			s.rankModel[ri] = make(map[string][]*Worker, len(s.byModel[ri]))
			for m, list := range s.byModel[ri] {
				s.rankModel[ri][m] = expandRanks(list)
			}
		}
	}
	return s
}

func anyRanks(ws []*Worker) bool {
	for _, w := range ws {
		if len(w.ranks) > 0 {
			return true
		}
	}
	return false
}

// expandRanks replaces each data-parallel engine by its rank views.
func expandRanks(ws []*Worker) []*Worker {
	var out []*Worker
	for _, w := range ws {
		if len(w.ranks) > 0 {
			out = append(out, w.ranks...)
		} else {
			out = append(out, w)
		}
	}
	return out
}

// Version increases with every published change.
func (s *Snapshot) Version() uint64 { return s.version }

// Len returns the number of workers.
func (s *Snapshot) Len() int { return len(s.all) }

// All returns every worker, sorted by URL.
func (s *Snapshot) All() []*Worker { return s.all }

// Get returns the worker with the given id.
func (s *Snapshot) Get(id string) (*Worker, bool) {
	w, ok := s.byID[id]
	return w, ok
}

// ByURL returns the worker with the given normalised URL.
func (s *Snapshot) ByURL(url string) (*Worker, bool) {
	w, ok := s.byURL[url]
	return w, ok
}

// ByRole returns the workers of a role, sorted by URL.
func (s *Snapshot) ByRole(role Role) []*Worker {
	ri := role.index()
	if ri < 0 {
		return nil
	}
	return s.byRole[ri]
}

// RankCandidates is Candidates with every data-parallel engine replaced by its rank views (in rank
// order): the candidates of placement, which picks a (worker, rank). Without data-parallel workers it
// is Candidates. Precomputed: calling it does not allocate.
func (s *Snapshot) RankCandidates(role Role, model string) []*Worker {
	ri := role.index()
	if ri < 0 || s.rankModel[ri] == nil {
		return s.Candidates(role, model)
	}
	if model == "" {
		return s.rankRole[ri]
	}
	if list, ok := s.rankModel[ri][model]; ok {
		return list
	}
	return s.rankAny[ri]
}

// Handoffs returns the set of KV handoffs spoken by the workers of role, whatever their health or
// model. When the prefill and decode sets are one and the same handoff, every pair is compatible.
func (s *Snapshot) Handoffs(role Role) HandoffSet {
	ri := role.index()
	if ri < 0 {
		return 0
	}
	return s.handoffs[ri]
}

// Models returns the model ids listed by any worker, sorted. Workers that
// serve any model contribute nothing.
func (s *Snapshot) Models() []string { return s.models }

// Candidates returns the workers of role that serve model, sorted by URL,
// whatever their health. The list is precomputed: calling this does not
// allocate. An empty model means any worker of the role.
func (s *Snapshot) Candidates(role Role, model string) []*Worker {
	ri := role.index()
	if ri < 0 {
		return nil
	}
	if model == "" {
		return s.byRole[ri]
	}
	if list, ok := s.byModel[ri][model]; ok {
		return list
	}
	return s.anyModel[ri]
}
