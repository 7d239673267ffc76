package admission

import (
	"errors"
	"fmt"
	"time"
)

// Defaults of the command-line flags (see DESIGN.md §3).
const (
	DefaultMaxInflightPerWorker = -1
	DefaultQueueSize            = 100
	DefaultQueueTimeout         = 60 * time.Second
	// DefaultPollInterval is how often the head of a queue re-selects without
	// any event: circuit breakers turn half-open lazily and emit nothing.
	DefaultPollInterval = time.Second
)

// Settings are the tunable limits. They are validated in one place
// ([Settings.Validate]) and may be changed live with [Controller.Update].
type Settings struct {
	// MaxInflightPerWorker is the number of client requests that may hold a
	// prefill slot on one worker at a time. <= 0 turns admission off.
	MaxInflightPerWorker int
	// QueueSize bounds the number of requests waiting, summed over all
	// queues. 0 means never wait: a request that finds no capacity is
	// rejected at once.
	QueueSize int
	// QueueTimeout is the longest time one request may wait, measured from
	// the moment it enters the queue. A change applies to new waiters only.
	QueueTimeout time.Duration
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

// Enabled reports whether admission limits prefill concurrency.
func (s Settings) Enabled() bool { return s.MaxInflightPerWorker > 0 }

// Validate reports every invalid field. Rejecting queue flags given without
// a positive limit is the flag parser's job: only it knows whether a value
// was set explicitly or is a default.
func (s Settings) Validate() error {
	var errs []error
	if s.QueueSize < 0 {
		errs = append(errs, fmt.Errorf("admission: queue size must be >= 0, got %d", s.QueueSize))
	}
	if s.QueueTimeout < 0 {
		errs = append(errs, fmt.Errorf("admission: queue timeout must be >= 0, got %v", s.QueueTimeout))
	}
	if s.Enabled() && s.QueueSize > 0 && s.QueueTimeout <= 0 {
		errs = append(errs, fmt.Errorf("admission: queue timeout must be positive when requests may wait (queue size %d), got %v",
			s.QueueSize, s.QueueTimeout))
	}
	return errors.Join(errs...)
}
