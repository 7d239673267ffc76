package placement

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/sluicegw/sluice/internal/worker"
)

// Request carries what placement needs to know about one client request.
type Request struct {
	// Model is the requested model id; empty means any worker of the role.
	Model string
	// Text is the prompt text, used by cache_aware and as the implicit
	// consistent_hashing key.
	Text string
	// RoutingKey is an explicit routing key (routing-key headers): consistent_hashing's key, manual's
	// pin, and with Config.SessionAffinity the session cache_aware and kv_aware keep on its worker.
	RoutingKey string
	// TargetWorker is a strict 0-based index into the candidate order (the
	// workers of the role serving Model, sorted by URL, whatever their
	// health), or -1 for none.
	TargetWorker int
	// Handoffs, when not empty, keeps only candidates speaking one of these KV handoffs (a PD pair
	// must be able to hand KV from prefill to decode); the others count as not routable.
	Handoffs worker.HandoffSet
	// IgnoreRanks picks among engines, never among the data-parallel ranks of one (--dp-aware=false):
	// the engine then places the request itself.
	IgnoreRanks bool
	// TokenIDs are the prompt's exact tokens when the gateway knows them (kv_aware matches them
	// against the engines' KV-cache events); nil otherwise.
	TokenIDs []uint32
	// Avoid are the workers (URLs) an earlier attempt of the request failed on: they are left out
	// while another candidate remains.
	Avoid []string
	// Picks, when set, collects predicted_latency's picks so the dispatcher can report their
	// measured TTFT (picks.go); nil records nothing.
	Picks *Picks
	// Partners, when set (a PD prefill selection), returns the decode workers prefill candidate pw may
	// pair with now: predicted_latency scores a prefill worker by the best pair it can form (pairs.go).
	Partners func(pw *worker.Worker) []*worker.Worker
	// Prefill is the prefill worker of the pair a decode selection completes (PD), or nil:
	// predicted_latency scores a decode candidate by that prefill worker's model of the pair's TTFT.
	Prefill *worker.Worker
}

// Policy picks one of the candidates for a request. Pick must not block and
// must not retain cands. It returns an index into cands, or -1 when cands is
// empty.
type Policy interface {
	Name() string
	Pick(cands []*worker.Worker, req *Request) int
}

// Forgetter is implemented by policies that keep per-worker state; Forget
// drops everything known about the worker with that key (Worker.Key: its
// URL, or URL@rank for a rank view).
type Forgetter interface {
	Forget(workerKey string)
}

// Evictor is implemented by policies whose state must be trimmed
// periodically (cache_aware).
type Evictor interface {
	Evict()
}

// Policy names.
const (
	PolicyRandom            = "random"
	PolicyRoundRobin        = "round_robin"
	PolicyPowerOfTwo        = "power_of_two"
	PolicyCacheAware        = "cache_aware"
	PolicyConsistentHashing = "consistent_hashing"
	PolicyManual            = "manual" // manual.go: SMG's header-pinned routing
	// PolicyLeastLoad reads the engines' own load reports; it needs the load
	// monitor (worker.LoadMonitor) running.
	PolicyLeastLoad = "least_load"
)

// PolicyNames lists the valid policy names.
func PolicyNames() []string {
	return []string{PolicyRandom, PolicyRoundRobin, PolicyPowerOfTwo, PolicyCacheAware, PolicyConsistentHashing, PolicyLeastLoad, PolicyManual, PolicyKVAware,
		PolicyPredictedLatency}
}

// DefaultMaxTreeSize is the default cache_aware budget, in bytes of prompt
// text per worker per model tree: 2^26, the value SGLang's router uses.
const DefaultMaxTreeSize = 1 << 26

// maxVirtualNodes bounds the ring: beyond it lookups get slower for no gain.
const maxVirtualNodes = 10_000

// Config configures the policies: the operator's [Settings] and what the gateway injects. Start from
// DefaultConfig: zero values of MaxTreeSize, EvictionInterval, VirtualNodes, StickyIdle,
// AssignmentMode, Policy, Rand and Now are replaced by defaults, but CacheThreshold and the balance
// thresholds take zero literally.
type Config struct {
	Settings
	// Rand returns uniformly random 64-bit values and must be safe for
	// concurrent use; nil means math/rand/v2's Uint64.
	Rand func() uint64
	// Now is manual's clock for key idleness and predicted_latency's for its TTFT measurements; nil
	// means time.Now.
	Now func() time.Time
	// KVIndex is what kv_aware matches prompts against (the engines' KV-cache events); nil makes
	// kv_aware always fall back to cache_aware.
	KVIndex PrefixIndex
	// SessionAffinity makes cache_aware and kv_aware keep a request with a RoutingKey on the worker
	// its key used last while that worker is a candidate and not overloaded (session.go); keys
	// unused for StickyIdle are forgotten.
	SessionAffinity bool
}

// DefaultConfig returns the default configuration (the Rust gateway's
// defaults; policy cache_aware).
func DefaultConfig() Config {
	return Config{Settings: DefaultSettings()}
}

// Validate reports whether c is usable.
func (c Config) Validate() error {
	_, err := c.normalized()
	return err
}

// normalized fills the zero values a configuration built in code leaves (see Config), clamps the
// virtual nodes, then validates with [Settings.Validate].
func (c Config) normalized() (Config, error) {
	d := DefaultSettings()
	if c.Policy == "" {
		c.Policy = d.Policy
	}
	if c.PrefillPolicy == "" {
		c.PrefillPolicy = c.Policy
	}
	if c.DecodePolicy == "" {
		c.DecodePolicy = c.Policy
	}
	if c.MaxTreeSize == 0 {
		c.MaxTreeSize = d.MaxTreeSize
	}
	if c.EvictionInterval == 0 {
		c.EvictionInterval = d.EvictionInterval
	}
	if c.VirtualNodes == 0 {
		c.VirtualNodes = d.VirtualNodes
	}
	c.VirtualNodes = min(c.VirtualNodes, maxVirtualNodes)
	if c.StickyIdle == 0 {
		c.StickyIdle = d.StickyIdle
	}
	if c.AssignmentMode == "" {
		c.AssignmentMode = d.AssignmentMode
	}
	if c.Rand == nil {
		c.Rand = rand.Uint64
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, c.Settings.Validate()
}

func unknownPolicy(name string) error {
	return fmt.Errorf("unknown policy %q (valid: %s)", name, strings.Join(PolicyNames(), ", "))
}

// New builds the named policy.
func New(name string, cfg Config) (Policy, error) {
	cfg, err := cfg.normalized()
	if err != nil {
		return nil, err
	}
	switch name {
	case PolicyRandom:
		return newRandom(cfg.Rand), nil
	case PolicyRoundRobin:
		return &RoundRobin{}, nil
	case PolicyPowerOfTwo:
		return newPowerOfTwo(cfg.Rand), nil
	case PolicyCacheAware:
		return newCacheAware(cfg), nil
	case PolicyConsistentHashing:
		return newConsistentHash(cfg.VirtualNodes), nil
	case PolicyManual:
		return newManual(cfg), nil
	case PolicyLeastLoad:
		return LeastLoad{}, nil
	case PolicyKVAware:
		return newKVAware(cfg, cfg.KVIndex), nil
	case PolicyPredictedLatency:
		return newPredictedLatency(cfg), nil
	}
	return nil, unknownPolicy(name)
}

// Set holds the policies of one gateway: Regular for regular mode, Prefill
// and Decode for PD mode. Each is its own instance, so stateful policies
// keep separate state per role, except that the prefill and decode policies
// keep their prompts in one set of trees when both keep prompts.
type Set struct {
	Regular, Prefill, Decode Policy
	interval                 time.Duration
}

// NewSet builds the three policies from cfg.
func NewSet(cfg Config) (*Set, error) {
	cfg, err := cfg.normalized()
	if err != nil {
		return nil, err
	}
	s := &Set{interval: cfg.EvictionInterval}
	if s.Regular, err = New(cfg.Policy, cfg); err != nil {
		return nil, err
	}
	if s.Prefill, err = New(cfg.PrefillPolicy, cfg); err != nil {
		return nil, err
	}
	if s.Decode, err = New(cfg.DecodePolicy, cfg); err != nil {
		return nil, err
	}
	// One tree per model for both roles: both see every PD request's prompt (CacheAware.shareTrees).
	if p, ok := s.Prefill.(treeHolder); ok {
		if d, ok := s.Decode.(treeHolder); ok {
			d.cacheAware().shareTrees(p.cacheAware())
		}
	}
	return s, nil
}

// MappedBytes is the memory the set's cache_aware trees hold outside the Go heap (bulk.go), which
// the runtime's memory limit does not see.
func (s *Set) MappedBytes() int64 {
	var n int64
	seen := map[*modelTrees]bool{}
	for _, p := range s.all() {
		if h, ok := p.(treeHolder); ok && !seen[h.cacheAware().trees] {
			seen[h.cacheAware().trees] = true
			n += h.cacheAware().trees.mapped.Load()
		}
	}
	return n
}

func (s *Set) all() []Policy { return []Policy{s.Regular, s.Prefill, s.Decode} }

// Uses reports whether any of the three policies is the named one (e.g.
// least_load, which needs the load monitor).
func (s *Set) Uses(name string) bool {
	for _, p := range s.all() {
		if p.Name() == name {
			return true
		}
	}
	return false
}

// Forget drops per-worker state in every policy, for the worker and its rank
// views. Call it when a worker is removed or replaced.
func (s *Set) Forget(w *worker.Worker) {
	for _, p := range s.all() {
		f, ok := p.(Forgetter)
		if !ok {
			continue
		}
		f.Forget(w.Key())
		for _, r := range w.Ranks() {
			f.Forget(r.Key())
		}
	}
}

// Evict trims every policy that keeps prompt state.
func (s *Set) Evict() {
	for _, p := range s.all() {
		if e, ok := p.(Evictor); ok {
			e.Evict()
		}
	}
}

// Run calls Evict every EvictionInterval until ctx is done.
func (s *Set) Run(ctx context.Context) {
	runEvery(ctx, s.interval, s.Evict)
}

func runEvery(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}
