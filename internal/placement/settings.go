package placement

import (
	"slices"
	"strings"
	"time"

	"github.com/sluicegw/sluice/internal/fielderr"
)

// Settings are the policies' tuning an operator sets (flags, a config file). placement owns their
// meaning, defaults and validation; internal/config only binds flags to these fields.
type Settings struct {
	// Policy is used in regular mode and as the default of the two below.
	Policy string
	// PrefillPolicy and DecodePolicy choose in PD mode; empty means Policy.
	PrefillPolicy, DecodePolicy string

	// CacheThreshold: cache_aware routes to the best-matching worker when the
	// matched fraction of the prompt is above it (0.3). Range [0, 1].
	CacheThreshold float64
	// BalanceAbsThreshold and BalanceRelThreshold: the candidates are
	// imbalanced when max load - min load > Abs AND max > Rel * min (64,
	// 1.5); cache_aware then routes to the least-loaded worker.
	BalanceAbsThreshold int64
	BalanceRelThreshold float64
	// MaxTreeSize is cache_aware's budget in bytes of prompt text per worker
	// per model; Evict trims each worker's least recently used prefixes down
	// to it (DefaultMaxTreeSize), and so does a pick that takes a worker past
	// twice the budget: a worker never holds more than 2x between runs.
	MaxTreeSize int
	// EvictionInterval is how often Run calls Evict (120s).
	EvictionInterval time.Duration
	// VirtualNodes per worker on the consistent hashing ring (150); values
	// above 10,000 are clamped.
	VirtualNodes int
	// StickyIdle is how long manual remembers an unused routing key (4h, SMG's --max-idle-secs).
	StickyIdle time.Duration
	// AssignmentMode is how manual places a new routing key: AssignRandom (default),
	// AssignMinLoad, AssignMinGroup or AssignDelegate.
	AssignmentMode string
	// ITLSLO: predicted_latency prefers the candidates whose predicted inter-token latency is within
	// it (0: no bound). Range >= 0.
	ITLSLO time.Duration
}

// DefaultSettings are the Rust gateway's defaults, policy cache_aware.
func DefaultSettings() Settings {
	return Settings{
		Policy:              PolicyCacheAware,
		CacheThreshold:      0.3,
		BalanceAbsThreshold: 64,
		BalanceRelThreshold: 1.5,
		MaxTreeSize:         DefaultMaxTreeSize,
		EvictionInterval:    120 * time.Second,
		VirtualNodes:        150,
		StickyIdle:          4 * time.Hour,
		AssignmentMode:      AssignRandom,
	}
}

// fieldNames are the fields as this package's own errors name them.
var fieldNames = map[string]string{
	"Policy": "policy", "PrefillPolicy": "prefill policy", "DecodePolicy": "decode policy",
	"CacheThreshold": "cache threshold", "BalanceAbsThreshold": "balance abs threshold",
	"BalanceRelThreshold": "balance rel threshold", "MaxTreeSize": "max tree size",
	"EvictionInterval": "eviction interval", "VirtualNodes": "virtual nodes", "StickyIdle": "sticky idle",
	"AssignmentMode": "assignment mode", "ITLSLO": "itl slo",
}

// Validate reports every invalid field, each a *[fielderr.Error] (errors.Join) keyed by the
// field's Go name. It is strict: a zero size, interval or count is refused here; only [Config]'s normalization, for configurations built
// in code, reads those zeros as "the default". An empty PD policy means Policy.
func (s Settings) Validate() error {
	l := fielderr.New("placement", fieldNames)
	bad := l.Add
	for _, f := range []struct{ field, value string }{
		{"Policy", s.Policy}, {"PrefillPolicy", s.PrefillPolicy}, {"DecodePolicy", s.DecodePolicy},
	} {
		if f.field != "Policy" && f.value == "" {
			continue
		}
		if !slices.Contains(PolicyNames(), f.value) {
			bad(f.field, "%q is not a policy; valid: %s", f.value, strings.Join(PolicyNames(), ", "))
		}
	}
	if t := s.CacheThreshold; !(t >= 0 && t <= 1) {
		bad("CacheThreshold", "must be between 0 and 1, got %v", t)
	}
	if s.BalanceAbsThreshold < 0 {
		bad("BalanceAbsThreshold", "must be at least 0, got %d", s.BalanceAbsThreshold)
	}
	if t := s.BalanceRelThreshold; !(t >= 0) {
		bad("BalanceRelThreshold", "must not be negative, got %v", t)
	}
	if s.MaxTreeSize < 1 {
		bad("MaxTreeSize", "must be at least 1, got %d", s.MaxTreeSize)
	}
	if s.EvictionInterval <= 0 {
		bad("EvictionInterval", "must be positive, got %v", s.EvictionInterval)
	}
	if s.VirtualNodes < 1 {
		bad("VirtualNodes", "must be at least 1, got %d", s.VirtualNodes)
	}
	if s.StickyIdle <= 0 {
		bad("StickyIdle", "must be positive, got %v", s.StickyIdle)
	}
	if s.ITLSLO < 0 {
		bad("ITLSLO", "must not be negative, got %v", s.ITLSLO)
	}
	switch s.AssignmentMode {
	case AssignRandom, AssignMinLoad, AssignMinGroup, AssignDelegate:
	default:
		bad("AssignmentMode", "must be random, min_load, min_group or delegate, got %q", s.AssignmentMode)
	}
	return l.Err()
}
