package admission

import (
	"context"
	"errors"
	"fmt"
)

// ErrNoCapacity is returned by a [Request.Select] callback when candidate
// workers exist but every one is at its limit (or otherwise temporarily
// unusable, e.g. its circuit breaker is open): the request waits. It never
// reaches the caller of [Controller.Acquire].
var ErrNoCapacity = errors.New("admission: no worker has capacity")

// ErrNoSeat is returned by a [Request.SelectPair] callback when a prefill
// worker has a slot but no compatible decode worker has a seat (or is vetoed
// by its engine's load): the request waits, held back by the decode side. It
// matches ErrNoCapacity.
var ErrNoSeat = fmt.Errorf("%w: no decode worker has a free seat", ErrNoCapacity)

// Error classes. Specific errors are wrapped in their class, so callers may
// test either: errors.Is(err, ErrRejected) or errors.Is(err, ErrQueueFull).
var (
	// ErrRejected is the class of admission refusals (HTTP 429, or 503 for
	// ErrShuttingDown). The gateway does not retry them.
	ErrRejected = errors.New("admission: rejected")
	// ErrCancelled is the class of requests whose context ended before they
	// were admitted. Errors of this class also match ctx.Err().
	ErrCancelled = errors.New("admission: cancelled")
)

// Specific rejections, always returned wrapped in [ErrRejected].
var (
	// ErrQueueFull: no capacity and the queue is at its bound (or its bound
	// is 0). Code pd_prefill_queue_full.
	ErrQueueFull = errors.New("prefill queue full")
	// ErrQueueTimeout: the request waited QueueTimeout without getting a
	// slot. Code pd_prefill_queue_timeout.
	ErrQueueTimeout = errors.New("prefill queue timeout")
	// ErrPredictedTimeout: with early rejection, the request's predicted
	// wait exceeded its timeout, so it was rejected on arrival. It is
	// returned wrapped in ErrQueueTimeout too (same code,
	// pd_prefill_queue_timeout: the timeout was certain), but counted under
	// its own outcome. When the decode side holds the request back (decode
	// seats), it is wrapped in ErrDecodeQueueTimeout instead
	// (pd_decode_queue_timeout).
	ErrPredictedTimeout = errors.New("predicted prefill queue wait exceeds the timeout")
	// ErrDisplaced: with priority bands, the request waited in a full queue
	// and a request of a higher band took its place. It is returned wrapped
	// in ErrQueueFull too (code pd_prefill_queue_full), but counted under
	// its own outcome. When the decode side holds the waiter back (decode
	// seats), it is wrapped in ErrDecodeQueueFull instead
	// (pd_decode_queue_full).
	ErrDisplaced = errors.New("displaced from the full prefill queue by a higher-priority request")
	// ErrDecodeQueueFull: like ErrQueueFull, but the decode side (no free
	// seat) held the head back. Code pd_decode_queue_full.
	ErrDecodeQueueFull = errors.New("decode queue full")
	// ErrDecodeQueueTimeout: like ErrQueueTimeout, but the decode side held
	// the request back when its wait ended. Code pd_decode_queue_timeout.
	ErrDecodeQueueTimeout = errors.New("decode queue timeout")
	// ErrTenantQueueFull: the request's tenant already has
	// Settings.Tenants.MaxQueued waiters. Code tenant_queue_full.
	ErrTenantQueueFull = errors.New("tenant queue full")
	// ErrShuttingDown: the controller was drained ([Controller.Drain]) for
	// shutdown, while the request waited or as it arrived. Code
	// shutting_down (503: another replica can take it).
	ErrShuttingDown = errors.New("gateway shutting down")
)

// Preallocated so rejecting under overload costs no allocation. They are
// never mutated.
var (
	errQueueFull     = fmt.Errorf("%w: %w", ErrRejected, ErrQueueFull)
	errQueueTimeout  = fmt.Errorf("%w: %w", ErrRejected, ErrQueueTimeout)
	errPredicted     = fmt.Errorf("%w: %w: %w", ErrRejected, ErrQueueTimeout, ErrPredictedTimeout)
	errDisplaced     = fmt.Errorf("%w: %w: %w", ErrRejected, ErrQueueFull, ErrDisplaced)
	errDecodeFull    = fmt.Errorf("%w: %w", ErrRejected, ErrDecodeQueueFull)
	errDecodeTimeout = fmt.Errorf("%w: %w", ErrRejected, ErrDecodeQueueTimeout)
	// The decode side's displacement and predicted timeout.
	errDecodePredicted = fmt.Errorf("%w: %w: %w", ErrRejected, ErrDecodeQueueTimeout, ErrPredictedTimeout)
	errDecodeDisplaced = fmt.Errorf("%w: %w: %w", ErrRejected, ErrDecodeQueueFull, ErrDisplaced)
	errTenantFull      = fmt.Errorf("%w: %w", ErrRejected, ErrTenantQueueFull)
	errShuttingDown    = fmt.Errorf("%w: %w", ErrRejected, ErrShuttingDown)
	errNilSelect       = errors.New("admission: Request.Select is nil")
	errEmptyWorker     = errors.New("admission: Select returned neither a worker nor an error")
)

// cancelled builds the error for a request whose context ended: it matches
// ErrCancelled, ctx.Err() and, when set, the context's cause.
func cancelled(ctx context.Context) error {
	err := ctx.Err()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
		return fmt.Errorf("%w: %w: %w", ErrCancelled, err, cause)
	}
	return fmt.Errorf("%w: %w", ErrCancelled, err)
}

// Outcome is the result of one [Controller.Acquire]. Its String is a
// low-cardinality metric label.
type Outcome uint8

const (
	// Admitted: the request holds a slot.
	Admitted Outcome = iota
	// QueueFull: rejected on arrival (429).
	QueueFull
	// QueueTimeout: rejected after waiting QueueTimeout (429).
	QueueTimeout
	// Cancelled: the request's context ended first.
	Cancelled
	// Unavailable: the Select callback returned a final error (no healthy
	// worker: 503; model not served: 404). Never queued.
	Unavailable
	// PredictedTimeout: rejected on arrival because the predicted wait
	// exceeded the timeout (early rejection; 429 pd_prefill_queue_timeout).
	PredictedTimeout
	// Displaced: a waiter of a lower band gave its place in the full queue
	// to a higher-band newcomer (429 pd_prefill_queue_full).
	Displaced
	// DecodeQueueFull: rejected on arrival, the decode side full (429
	// pd_decode_queue_full).
	DecodeQueueFull
	// DecodeQueueTimeout: rejected after waiting, the decode side full (429
	// pd_decode_queue_timeout).
	DecodeQueueTimeout
	// TenantQueueFull: rejected on arrival, the tenant's own queue bound
	// reached (429 tenant_queue_full).
	TenantQueueFull
	// ShuttingDown: refused or dequeued by a drain (503 shutting_down).
	ShuttingDown
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"admitted", "queue_full", "queue_timeout", "cancelled", "unavailable", "predicted_timeout", "displaced", "decode_queue_full", "decode_queue_timeout", "tenant_queue_full", "shutting_down"}

func (o Outcome) String() string {
	if o < numOutcomes {
		return outcomeNames[o]
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// OutcomeOf classifies an error returned by [Controller.Acquire]; nil is
// Admitted. Errors the callback returned count as Unavailable.
func OutcomeOf(err error) Outcome {
	switch {
	case err == nil:
		return Admitted
	case errors.Is(err, ErrShuttingDown):
		return ShuttingDown
	case errors.Is(err, ErrDisplaced): // either side's
		return Displaced
	case errors.Is(err, ErrPredictedTimeout): // either side's
		return PredictedTimeout
	case errors.Is(err, ErrDecodeQueueFull):
		return DecodeQueueFull
	case errors.Is(err, ErrDecodeQueueTimeout):
		return DecodeQueueTimeout
	case errors.Is(err, ErrTenantQueueFull):
		return TenantQueueFull
	case errors.Is(err, ErrQueueFull):
		return QueueFull
	case errors.Is(err, ErrQueueTimeout):
		return QueueTimeout
	case errors.Is(err, ErrCancelled), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return Cancelled
	default:
		return Unavailable
	}
}
