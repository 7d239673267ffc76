package kvevents

import "time"

// Metrics receives the index's and the subscribers' measurements. Methods are called from subscriber
// goroutines, concurrently for different workers; implementations must be fast. The worker label is
// the worker's key (its URL), as everywhere in the gateway.
type Metrics interface {
	// SetBlocks reports the blocks indexed for (worker, rank) after every batch and clear.
	SetBlocks(worker string, rank int, n int)
	// AddEvents counts applied events by kind (EventKind.String: a string, so that the metrics
	// need not link this package).
	AddEvents(worker string, kind string, n int)
	// AddDropped counts stored blocks not indexed, by reason (see ApplyStats.Dropped).
	AddDropped(worker string, reason string, n int)
	// IncGap counts sequence gaps, repaired through the replay socket or not (then the index was
	// cleared).
	IncGap(worker string, repaired bool)
	// IncCleared counts index clears the subscriber decided, by reason: "gap" (unrepaired), "restart"
	// (the sequence went back, or on reconnection the replay socket lacks the batch applied last: a new
	// engine process).
	IncCleared(worker string, reason string)
	// IncMalformed counts frames dropped as undecodable.
	IncMalformed(worker string)
	// ObserveLag records how long after the engine stamped it a batch was applied (engine clock).
	ObserveLag(worker string, d time.Duration)
	// DeleteWorker drops worker's series.
	DeleteWorker(worker string)
}

type noopMetrics struct{}

func (noopMetrics) SetBlocks(string, int, int)       {}
func (noopMetrics) AddEvents(string, string, int)    {}
func (noopMetrics) AddDropped(string, string, int)   {}
func (noopMetrics) IncGap(string, bool)              {}
func (noopMetrics) IncCleared(string, string)        {}
func (noopMetrics) IncMalformed(string)              {}
func (noopMetrics) ObserveLag(string, time.Duration) {}
func (noopMetrics) DeleteWorker(string)              {}
