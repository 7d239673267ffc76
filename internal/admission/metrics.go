package admission

import "time"

// Metrics receives admission measurements. The controller calls every method
// with its lock held, so gauge updates are applied in the order the changes
// happened; implementations must be fast and must not call back into the
// controller. The worker label is the worker's key (its URL); the queue label
// is the queue key (the model). Priority bands (a later issue) will add a
// band argument to AddQueued, ObserveWait and IncRejection.
type Metrics interface {
	// SetInflight reports the slots held on worker after every change.
	SetInflight(worker string, n int)
	// DeleteWorker drops worker's series (called by RemoveWorker).
	DeleteWorker(worker string)
	// AddQueued moves the number of requests waiting in queue by delta (+1
	// on entry, -1 on leaving, whatever the reason); the queues' sum is the
	// value bounded by QueueSize.
	AddQueued(queue string, delta int)
	// ObserveWait records the time from arrival to the end of the wait, with
	// admission on, for every request admitted at once (0, so the histogram
	// shows which share of requests waited at all) and every request that
	// queued, whatever its outcome. Requests answered on arrival with an
	// error (queue full, unavailable) are not observed: they did not wait.
	// worker is the worker whose slot ended the wait, "" when none did
	// (timeout, cancellation, failure).
	ObserveWait(queue, worker string, d time.Duration)
	// IncRejection counts gateway refusals: QueueFull and QueueTimeout, and
	// PredictedTimeout and Displaced when those features are on.
	// Client cancellations are not rejections and are not counted here
	// (Status reports them).
	IncRejection(queue string, reason Outcome)
}

type noopMetrics struct{}

func (noopMetrics) SetInflight(string, int)                   {}
func (noopMetrics) DeleteWorker(string)                       {}
func (noopMetrics) AddQueued(string, int)                     {}
func (noopMetrics) ObserveWait(string, string, time.Duration) {}
func (noopMetrics) IncRejection(string, Outcome)              {}

// FeatureMetrics is implemented by Metrics that also record the measurements
// of the features beyond the source contract; the controller calls them, with
// its lock held, only when a [Metrics] value implements this interface.
type FeatureMetrics interface {
	// SetInflightTokens reports the estimated prompt tokens held on worker
	// after every change (admission on).
	SetInflightTokens(worker string, n int64)
	// SetLimit reports worker's current request limit when it adapts
	// (Settings.Adaptive on): at the worker's first grant and every change.
	SetLimit(worker string, n int)
	// SetBandQueued reports the waiters of one priority band (by its name)
	// after every change, with two or more bands configured.
	SetBandQueued(band string, n int)
	// ObserveBandWait records a wait, as Metrics.ObserveWait does, labelled
	// with the request's band, with two or more bands configured.
	ObserveBandWait(band string, d time.Duration)
}

type noopFeatureMetrics struct{}

func (noopFeatureMetrics) SetInflightTokens(string, int64)       {}
func (noopFeatureMetrics) SetLimit(string, int)                  {}
func (noopFeatureMetrics) SetBandQueued(string, int)             {}
func (noopFeatureMetrics) ObserveBandWait(string, time.Duration) {}

// DecodeMetrics is implemented by Metrics that also record decode seats; the
// controller calls them, with its lock held, only when a [Metrics] value
// implements this interface. The worker label is the decode worker's key
// (URL, or URL@rank for a data-parallel rank).
type DecodeMetrics interface {
	// SetSeats reports the seats held on decode worker after every change.
	SetSeats(worker string, n int)
	// SetSeatLimit reports decode worker's seat bound (<= 0: none) at each
	// grant and when its capacity changes.
	SetSeatLimit(worker string, n int)
	// ObserveDecodeWait records the wait (as Metrics.ObserveWait) of a
	// request the decode side held back when its wait ended.
	ObserveDecodeWait(queue string, d time.Duration)
	// DeleteSeatWorker drops decode worker's series (RemoveWorker).
	DeleteSeatWorker(worker string)
}

type noopDecodeMetrics struct{}

func (noopDecodeMetrics) SetSeats(string, int)                    {}
func (noopDecodeMetrics) SetSeatLimit(string, int)                {}
func (noopDecodeMetrics) ObserveDecodeWait(string, time.Duration) {}
func (noopDecodeMetrics) DeleteSeatWorker(string)                 {}

// sink is every measurement the controller reports, through one interface:
// a [Metrics] value's own methods, and its [FeatureMetrics] and
// [DecodeMetrics] methods when it implements them (no-ops otherwise),
// resolved once by newSink.
type sink interface {
	Metrics
	FeatureMetrics
	DecodeMetrics
}

// sinkOf completes a Metrics value that lacks the optional interfaces.
type sinkOf struct {
	Metrics
	FeatureMetrics
	DecodeMetrics
}

type noopSink struct {
	noopMetrics
	noopFeatureMetrics
	noopDecodeMetrics
}

func newSink(m Metrics) sink {
	if m == nil {
		return noopSink{}
	}
	if s, ok := m.(sink); ok {
		return s
	}
	s := sinkOf{Metrics: m, FeatureMetrics: noopFeatureMetrics{}, DecodeMetrics: noopDecodeMetrics{}}
	if fm, ok := m.(FeatureMetrics); ok {
		s.FeatureMetrics = fm
	}
	if dm, ok := m.(DecodeMetrics); ok {
		s.DecodeMetrics = dm
	}
	return s
}
