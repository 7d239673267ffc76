package admission

import (
	"slices"
	"time"

	"github.com/sluicegw/sluice/internal/fielderr"
)

// Defaults of the command-line flags (see DESIGN.md §3).
const (
	DefaultMaxInflightPerWorker = 0 // off
	DefaultQueueSize            = 100
	DefaultQueueTimeout         = 60 * time.Second
	// DefaultPollInterval is how often the head of a queue re-selects without
	// any event: circuit breakers turn half-open lazily and emit nothing.
	DefaultPollInterval = time.Second
	// DefaultAging is how long a waiter waits before it rises by one priority
	// band, when bands are configured without an aging time.
	DefaultAging = 10 * time.Second
	// MaxBands bounds the number of priority bands: a few are useful, and the
	// queues keep one list per band.
	MaxBands = 8
)

// Band is one priority band: requests whose priority is at least MinPriority
// and below the next band's MinPriority. Requests below the first band's
// MinPriority belong to the first band. Name is the metric label and span
// attribute.
type Band struct {
	Name        string
	MinPriority int
}

// AdaptiveLimit is the range in which the adaptive controller moves each
// worker's request limit. The zero value turns adaptation off.
type AdaptiveLimit struct {
	Min, Max int
}

// On reports whether each worker's limit adapts.
func (a AdaptiveLimit) On() bool { return a.Max > 0 }

// Settings are the tunable limits. They are validated in one place
// ([Settings.Validate]) and may be changed live with [Controller.Update].
// The zero value of every field added after the source contract (tokens,
// bands, early rejection, adaptation) leaves that feature off, so that
// settings with only the first three fields behave exactly as the contract
// says.
type Settings struct {
	// MaxInflightPerWorker is the number of client requests that may hold a
	// prefill slot on one worker at a time. <= 0 means no request bound
	// (and admission off unless a token budget or an adaptive limit is set).
	MaxInflightPerWorker int
	// QueueSize bounds the number of requests waiting, summed over all
	// queues and bands. 0 means never wait: a request that finds no capacity
	// is rejected at once.
	QueueSize int
	// QueueTimeout is the longest time one request may wait, measured from
	// the moment it enters the queue. A change applies to new waiters only.
	QueueTimeout time.Duration

	// MaxInflightTokensPerWorker bounds the estimated prompt tokens
	// ([Request.Tokens], less what the worker is expected to hold in its
	// prefix cache) of the requests holding slots on one worker. <= 0 means
	// no token bound. A request larger than the bound is admitted on an idle
	// worker, alone.
	MaxInflightTokensPerWorker int64
	// Bands are the priority bands, lowest first, with strictly increasing
	// MinPriority. Fewer than two means one band: priorities are ignored.
	Bands []Band
	// Aging raises a waiter by one band per Aging waited, up to the top
	// band, so no band starves: a waiter of band b is overtaken by nobody
	// who arrives more than (top-b) x Aging after it. Used with two or more
	// bands, where it must be positive.
	Aging time.Duration
	// EarlyRejection rejects a request on arrival when its predicted wait
	// (queue position / measured slot-release rate) exceeds its timeout: the
	// queue timeout, or the client's own bound ([Request.MaxWait]), which
	// then also bounds its wait.
	EarlyRejection bool
	// Adaptive, when on, moves each worker's request limit inside [Min, Max]
	// from the measured prefill time per token; MaxInflightPerWorker (clamped
	// to the range) is then only each worker's starting limit.
	Adaptive AdaptiveLimit

	// DecodeMaxInflightPerWorker bounds the PD requests holding a decode
	// seat on one decode worker (one DP rank where ranks are known), taken
	// with the prefill slot and held until the decode leg ends (DESIGN.md
	// §3b). <= 0 means no fixed bound; with DecodeAuto it is the bound of
	// workers whose window is unknown.
	DecodeMaxInflightPerWorker int
	// DecodeAuto bounds each decode worker by its own window where it is
	// known ([Controller.SetDecodeCapacity]: reported by the engine or
	// declared), else by DecodeMaxInflightPerWorker (none if <= 0).
	DecodeAuto bool

	// Tenants turn on fair queueing across tenants and a per-tenant queue
	// bound (tenants.go); the zero value is off.
	Tenants TenantSettings
}

// DefaultSettings returns the flag defaults: admission off, queue of 100,
// 60 s timeout.
func DefaultSettings() Settings {
	return Settings{
		MaxInflightPerWorker: DefaultMaxInflightPerWorker,
		QueueSize:            DefaultQueueSize,
		QueueTimeout:         DefaultQueueTimeout,
	}
}

// Enabled reports whether admission is on: prefill slots are bounded or PD
// requests take decode seats.
func (s Settings) Enabled() bool { return s.PrefillBounded() || s.SeatsOn() }

// PrefillBounded reports whether prefill slots are bounded: a request limit,
// a token budget or an adaptive limit is set.
func (s Settings) PrefillBounded() bool {
	return s.MaxInflightPerWorker > 0 || s.MaxInflightTokensPerWorker > 0 || s.Adaptive.On()
}

// SeatsOn reports whether PD requests also take a decode seat: a decode
// bound (fixed or auto) is set.
func (s Settings) SeatsOn() bool { return s.DecodeMaxInflightPerWorker > 0 || s.DecodeAuto }

// Clone returns a copy that shares no memory with s.
func (s Settings) Clone() Settings {
	s.Bands = slices.Clone(s.Bands)
	s.Tenants = s.Tenants.clone()
	return s
}

// numBands is the number of bands in use (at least 1).
func (s *Settings) numBands() int { return max(len(s.Bands), 1) }

// BandOf returns the index of priority's band: the highest band whose
// MinPriority is at most priority, or 0.
func (s Settings) BandOf(priority int) int {
	b := 0
	for i, band := range s.Bands {
		if priority >= band.MinPriority {
			b = i
		}
	}
	return b
}

// BandName returns band i's name ("default" without bands).
func (s Settings) BandName(i int) string {
	if len(s.Bands) < 2 || i < 0 || i >= len(s.Bands) {
		return "default"
	}
	return s.Bands[i].Name
}

// initialLimit is a new worker's request limit under adaptation.
// StartLimit is the request limit of a worker admission has not seen yet
// (<= 0: none, a token budget alone bounds it).
func (s Settings) StartLimit() int {
	if !s.Adaptive.On() {
		return s.MaxInflightPerWorker
	}
	return s.initialLimit()
}

func (s *Settings) initialLimit() int {
	if s.MaxInflightPerWorker <= 0 {
		return s.Adaptive.Min
	}
	return min(max(s.MaxInflightPerWorker, s.Adaptive.Min), s.Adaptive.Max)
}

// fieldNames are the fields as this package's own errors name them.
var fieldNames = map[string]string{
	"QueueSize":         "queue size",
	"QueueTimeout":      "queue timeout",
	"Bands":             "priority bands",
	"Aging":             "aging",
	"Adaptive":          "adaptive limit range",
	"Tenants.MaxQueued": "tenant max queued",
	"Tenants.Burst":     "tenant burst",
	"Tenants.Weights":   "tenant weights",
}

// Validate reports every invalid field, each a *[fielderr.Error] (errors.Join) keyed by the field's
// Go name ("QueueSize", "Tenants.Burst"). Rejecting queue flags
// given without a positive limit is the flag parser's job: only it knows whether a value was set
// explicitly or is a default. Tenants are checked by their own rules (tenants.go).
func (s Settings) Validate() error {
	l := fielderr.New("admission", fieldNames)
	bad := l.Add
	if s.QueueSize < 0 {
		bad("QueueSize", "must be at least 0, got %d", s.QueueSize)
	}
	switch {
	case s.Enabled() && s.QueueSize > 0 && s.QueueTimeout <= 0:
		bad("QueueTimeout", "must be positive when requests may wait (queue size %d), got %v; a queue size of 0 never waits",
			s.QueueSize, s.QueueTimeout)
	case s.QueueTimeout < 0:
		bad("QueueTimeout", "must be >= 0, got %v", s.QueueTimeout)
	}
	if len(s.Bands) > MaxBands {
		bad("Bands", "lists at most %d bands, got %d", MaxBands, len(s.Bands))
	}
	seen := map[string]bool{}
	for i, b := range s.Bands {
		if !validBandName(b.Name) {
			bad("Bands", "has band name %q, which must be 1-32 characters of a-z, 0-9, _ or -", b.Name)
		}
		if seen[b.Name] {
			bad("Bands", "has band %q given twice", b.Name)
		}
		seen[b.Name] = true
		if i > 0 && b.MinPriority <= s.Bands[i-1].MinPriority {
			bad("Bands", "has band %q starting at %d, which must be above the previous band's %d (list bands lowest first)",
				b.Name, b.MinPriority, s.Bands[i-1].MinPriority)
		}
	}
	if s.Aging < 0 {
		bad("Aging", "must be >= 0, got %v", s.Aging)
	} else if len(s.Bands) > 1 && s.Aging == 0 {
		bad("Aging", "must be positive with several priority bands, so that low bands are never starved")
	}
	switch a := s.Adaptive; {
	case a == AdaptiveLimit{}:
	case a.Min < 1 || a.Max < a.Min:
		bad("Adaptive", "%d:%d must have 1 <= min <= max", a.Min, a.Max)
	}
	s.Tenants.validate(l)
	return l.Err()
}

func validBandName(n string) bool {
	if n == "" || len(n) > 32 {
		return false
	}
	for _, r := range n {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '_' && r != '-' {
			return false
		}
	}
	return true
}
