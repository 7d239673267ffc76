package dispatch

import (
	"context"
	"errors"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/backend"
	"github.com/sluicegw/sluice/internal/backend/enginerpc"
	"github.com/sluicegw/sluice/internal/placement"
)

// How Do runs a prepared request: its tenant's budget is reserved, then attempts run (attempt: aux,
// regular or PD) until one answers, the error is final (not retryable, or the attempts are spent) or
// the request's context ends; between two attempts a backoff. An answer is handed back metered
// (meter.go): closing it records the request.

// Do runs one request. On success the caller must Close the response. Every request is recorded
// once (Metrics.ObserveRequest): a failed one here, an answered one when its response is closed.
func (x *Dispatcher) Do(ctx context.Context, r *Request) (*Response, error) {
	start := x.now()
	q, err := x.prepare(ctx, r)
	if err == nil {
		var resp *Response
		if resp, err = x.run(ctx, q, start); err == nil {
			return resp, nil
		}
	}
	if q.preq != nil {
		q.preq.Picks.Done() // the request ends unanswered: its picks' queued work is taken off
	}
	e := apierror.From(err)
	x.d.Metrics.ObserveRequest(&RequestStats{Route: r.Route.Path(), Model: q.model(), Status: e.Status,
		Duration: x.now().Sub(start), Trace: trace.SpanContextFromContext(ctx), Tenant: q.tenant, Rejection: rejection(err, e)})
	return nil, err
}

// run reserves the budget and runs the attempts.
func (x *Dispatcher) run(ctx context.Context, q *prepared, start time.Time) (*Response, error) {
	var err error
	if q.res, q.rateHeader, err = x.reserveBudget(&q.Request, q.br); err != nil {
		return nil, err
	}
	if q.prompt != nil {
		ctx = enginerpc.WithPrompt(ctx, q.prompt) // the transport's ids, tokenized before admission
	}
	ctx = x.withMigration(ctx, q) // a stream whose decode breaks off goes on elsewhere (migrate.go)
	cancel := context.CancelFunc(func() {})
	if x.cfg.RequestTimeout > 0 {
		ctx, cancel = context.WithTimeoutCause(ctx, x.cfg.RequestTimeout, errRequestTimeout)
	}
	actx, interrupt := ctx, context.CancelCauseFunc(nil) // the attempts': a drain may cut them (migrate_drain.go)
	if m := migratorOf(ctx); m != nil && m.http != nil {
		actx, interrupt = interruptible(ctx)
		timeout := cancel
		cancel = func() { interrupt(nil); timeout() }
	}
	preq := q.preq
	for attempt := 0; ; attempt++ {
		resp, err := x.attempt(actx, &q.Request, q.br, preq)
		if err == nil {
			return x.answered(ctx, q, start, x.httpMigration(ctx, q, resp, interrupt), cancel), nil
		}
		if ctx.Err() != nil {
			cancel()
			q.res.Settle(-1)
			return nil, contextError(ctx, err)
		}
		if attempt+1 >= x.cfg.Retry.MaxAttempts || !isRetryable(err) {
			cancel()
			settleFailed(q.res, err)
			x.d.Logger.Debug("request failed", "request_id", q.RequestID, "attempts", attempt+1, "err", err)
			return nil, withRateHeader(x.final(err), q.rateHeader)
		}
		preq = avoiding(preq, err)
		if err := x.backoff(ctx, q, attempt, err); err != nil {
			cancel()
			q.res.Settle(-1)
			return nil, err
		}
	}
}

// avoiding is the placement request of the retry after err: the worker err names is avoided.
func avoiding(preq *placement.Request, err error) *placement.Request {
	var w string
	var ue *UpstreamError
	var te *TransportError
	switch {
	case errors.As(err, &ue):
		w = ue.Worker
	case errors.As(err, &te):
		w = te.Worker
	}
	if w == "" || slices.Contains(preq.Avoid, w) {
		return preq
	}
	p := *preq
	p.Avoid = append(slices.Clip(preq.Avoid), w)
	return &p
}

// answered hands back an attempt's answer: metered, with the request's id and rate headers; closing
// it ends the request (cancel) and records it.
func (x *Dispatcher) answered(ctx context.Context, q *prepared, start time.Time, resp *Response, cancel context.CancelFunc) *Response {
	m := x.newMeter(ctx, start, q.br, q.strip, resp)
	m.picks = q.preq.Picks
	if q.asked != "" && !x.cfg.ExposeAliasTarget {
		m.asked, resp.Model = q.asked, q.asked
		if !resp.Stream {
			resp.Body = &renamedBody{ReadCloser: resp.Body, asked: q.asked}
			resp.Header.Del("Content-Length") // the name's length may differ
		}
	}
	if q.res != nil {
		m.settle = q.res.Settle
	}
	m.tenant = q.tenant
	for k, vs := range q.rateHeader {
		resp.Header[k] = vs
	}
	m.cancel = cancel
	if resp.Stream { // else newMeter's unaryBody ends the request when closed
		resp.Body = &meteredBody{ReadCloser: resp.Body, m: m}
	}
	resp.RequestID = q.RequestID
	resp.Header[HeaderRequestID] = q.requestIDHeader()
	return resp
}

// backoff waits before the retry of a failed attempt; it returns the error to end the request with
// when the request's context ends first.
func (x *Dispatcher) backoff(ctx context.Context, q *prepared, attempt int, err error) error {
	x.d.Metrics.IncRetry()
	wait := backend.Backoff(attempt, x.cfg.Retry.Backoff, x.float64)
	x.d.Logger.Debug("retrying", "request_id", q.RequestID, "attempt", attempt+1, "backoff", wait, "err", err)
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		// One trace shows every attempt: the failed attempt's leg spans, then this event.
		span.AddEvent("sluice.retry", trace.WithAttributes(attribute.Int("sluice.attempt", attempt+1),
			attribute.String("error.type", errorType(err)), attribute.Float64("sluice.retry.backoff", wait.Seconds())))
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return contextError(ctx, err)
	case <-t.C:
		return nil
	}
}
