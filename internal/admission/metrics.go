package admission

import "time"

// Metrics receives admission measurements. The controller calls every method
// with its lock held, so gauge updates are applied in the order the changes
// happened; implementations must be fast and must not call back into the
// controller. The worker label is the worker's key (its URL; for a decode
// worker, URL@rank for a data-parallel rank); the queue label is the queue
// key (the model). An implementation that records only some of these embeds
// [NopMetrics] for the rest.
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

	// The features beyond the source contract:

	// SetInflightTokens reports the estimated prompt tokens held on worker
	// after every change (admission on).
	SetInflightTokens(worker string, n int64)
	// SetLimit reports worker's current request limit when it adapts
	// (Settings.Adaptive on): at the worker's first grant and every change.
	SetLimit(worker string, n int)
	// SetBandQueued reports the waiters of one priority band (by its name)
	// after every change, with two or more bands configured.
	SetBandQueued(band string, n int)
	// ObserveBandWait records a wait, as ObserveWait does, labelled with the
	// request's band, with two or more bands configured.
	ObserveBandWait(band string, d time.Duration)

	// Decode seats:

	// SetSeats reports the seats held on decode worker after every change.
	SetSeats(worker string, n int)
	// SetSeatLimit reports decode worker's seat bound (<= 0: none) at each
	// grant and when its capacity changes.
	SetSeatLimit(worker string, n int)
	// ObserveDecodeWait records the wait (as ObserveWait) of a request the
	// decode side held back when its wait ended.
	ObserveDecodeWait(queue string, d time.Duration)
	// DeleteSeatWorker drops decode worker's series (RemoveWorker).
	DeleteSeatWorker(worker string)
}

// NopMetrics records nothing; [Deps] without Metrics uses it, and an
// implementation embeds it for the measurements it does not record.
type NopMetrics struct{}

var _ Metrics = NopMetrics{}

func (NopMetrics) SetInflight(string, int)                   {}
func (NopMetrics) DeleteWorker(string)                       {}
func (NopMetrics) AddQueued(string, int)                     {}
func (NopMetrics) ObserveWait(string, string, time.Duration) {}
func (NopMetrics) IncRejection(string, Outcome)              {}
func (NopMetrics) SetInflightTokens(string, int64)           {}
func (NopMetrics) SetLimit(string, int)                      {}
func (NopMetrics) SetBandQueued(string, int)                 {}
func (NopMetrics) ObserveBandWait(string, time.Duration)     {}
func (NopMetrics) SetSeats(string, int)                      {}
func (NopMetrics) SetSeatLimit(string, int)                  {}
func (NopMetrics) ObserveDecodeWait(string, time.Duration)   {}
func (NopMetrics) DeleteSeatWorker(string)                   {}
