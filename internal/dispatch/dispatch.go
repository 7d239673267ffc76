package dispatch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/backend"
	"github.com/sluicegw/sluice/internal/placement"
	"github.com/sluicegw/sluice/internal/worker"
)

// Headers sluice reads from clients and sets on responses. The SMG names are accepted as aliases so
// deployments of the Rust gateway can switch without touching clients.
const (
	HeaderTargetWorker     = "X-Sluice-Target-Worker"
	HeaderRoutingKey       = "X-Sluice-Routing-Key"
	HeaderSMGTargetWorker  = "X-SMG-Target-Worker"
	HeaderSMGRoutingKey    = "X-SMG-Routing-Key"
	HeaderWorker           = "X-Sluice-Worker"
	HeaderPrefillWorker    = "X-Sluice-Prefill-Worker"
	HeaderRequestID        = "X-Request-Id"
	maxUpstreamErrorBody   = 64 << 10
	defaultRequestAttempts = 5
)

// Metrics are the request-path instruments dispatch records.
type Metrics interface {
	ObserveUpstream(worker string, status int)
	IncRetry()
	AddWorkerActive(worker string, delta float64)
	ObservePrefill(d time.Duration)
}

// RetryConfig controls retries of failed attempts.
type RetryConfig struct {
	// MaxAttempts counts attempts in total, the first included; <= 1 means no retries.
	MaxAttempts int
	Backoff     backend.BackoffConfig
}

// Config is the dispatcher's behaviour.
type Config struct {
	// PD selects prefill/decode disaggregation; else requests go to regular workers.
	PD bool
	// Retry controls retries.
	Retry RetryConfig
	// RequestTimeout bounds a request end to end, streaming included; 0 means none.
	RequestTimeout time.Duration
	// DropClientAuthorization keeps the client's Authorization header from reaching engines. Set it when
	// the gateway checks its own API key: that header carries the gateway's key, not an engine's.
	DropClientAuthorization bool
}

// Deps are the dispatcher's collaborators.
type Deps struct {
	Registry  *worker.Registry
	Admission *admission.Controller
	Policies  *placement.Set
	// HTTP calls every worker: http(s) engines directly, grpc:// workers through the worker-protocol
	// transport that backend.NewHTTPClient registers for the grpc scheme.
	HTTP       *http.Client
	Metrics    Metrics
	Tracer     trace.Tracer
	Propagator propagation.TextMapPropagator
	Logger     *slog.Logger
	// Rand draws bootstrap rooms and backoff jitter; nil uses math/rand/v2.
	Rand *rand.Rand
}

// Dispatcher runs requests. It is safe for concurrent use.
type Dispatcher struct {
	cfg Config
	d   Deps
	rmu sync.Mutex // guards d.Rand when injected (rand.Rand is not safe for concurrent use)
}

// New validates cfg and builds a dispatcher.
func New(cfg Config, d Deps) (*Dispatcher, error) {
	if d.Registry == nil || d.Policies == nil || d.Admission == nil {
		return nil, errors.New("dispatch: registry, policies and admission are required")
	}
	if cfg.Retry.MaxAttempts <= 0 {
		cfg.Retry.MaxAttempts = 1
	}
	if d.HTTP == nil {
		d.HTTP = backend.NewHTTPClient(backend.HTTPClientOptions{})
	}
	if d.Tracer == nil {
		d.Tracer = noop.NewTracerProvider().Tracer("")
	}
	if d.Propagator == nil {
		d.Propagator = propagation.TraceContext{}
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Metrics == nil {
		d.Metrics = nopMetrics{}
	}
	return &Dispatcher{cfg: cfg, d: d}, nil
}

type nopMetrics struct{}

func (nopMetrics) ObserveUpstream(string, int)     {}
func (nopMetrics) IncRetry()                       {}
func (nopMetrics) AddWorkerActive(string, float64) {}
func (nopMetrics) ObservePrefill(time.Duration)    {}

func (x *Dispatcher) uint64() uint64 {
	if x.d.Rand == nil {
		return rand.Uint64()
	}
	x.rmu.Lock()
	defer x.rmu.Unlock()
	return x.d.Rand.Uint64()
}

func (x *Dispatcher) float64() float64 {
	if x.d.Rand == nil {
		return rand.Float64()
	}
	x.rmu.Lock()
	defer x.rmu.Unlock()
	return x.d.Rand.Float64()
}

// Models lists the models the registered workers serve, sorted.
func (x *Dispatcher) Models() []string { return x.d.Registry.Snapshot().Models() }

// Do runs one request. On success the caller must Close the response.
func (x *Dispatcher) Do(ctx context.Context, r *Request) (*Response, error) {
	br, err := backend.ParseRequest(r.Route, r.Body)
	if err != nil {
		return nil, classifyRequestError(err)
	}
	preq, err := placementRequest(br, r.Header)
	if err != nil {
		return nil, err
	}
	if r.RequestID == "" && r.Header.Get(HeaderRequestID) != "" {
		rc := *r // do not write into the caller's request
		rc.RequestID = r.Header.Get(HeaderRequestID)
		r = &rc
	}

	cancel := context.CancelFunc(func() {})
	if x.cfg.RequestTimeout > 0 {
		ctx, cancel = context.WithTimeoutCause(ctx, x.cfg.RequestTimeout, errRequestTimeout)
	}
	for attempt := 0; ; attempt++ {
		resp, err := x.attempt(ctx, r, br, preq)
		if err == nil {
			resp.Body = &onClose{ReadCloser: resp.Body, fn: cancel}
			return resp, nil
		}
		if ctx.Err() != nil {
			cancel()
			return nil, contextError(ctx, err)
		}
		if attempt+1 >= x.cfg.Retry.MaxAttempts || !isRetryable(err) {
			cancel()
			return nil, x.final(err)
		}
		x.d.Metrics.IncRetry()
		wait := backend.Backoff(attempt, x.cfg.Retry.Backoff, x.float64)
		x.d.Logger.Debug("retrying", "attempt", attempt+1, "backoff", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			cancel()
			return nil, contextError(ctx, err)
		case <-t.C:
		}
	}
}

var errRequestTimeout = errors.New("request timeout")

// final classifies the error a request ends with; admission rejections and unavailability carry a
// Retry-After estimated from the measured slot-release rate.
func (x *Dispatcher) final(err error) error {
	e := apierror.From(err)
	if (e.Status == http.StatusTooManyRequests || e.Status == http.StatusServiceUnavailable) && e.RetryAfter == 0 {
		e.RetryAfter = x.d.Admission.RetryAfter()
	}
	return e
}

func contextError(ctx context.Context, last error) error {
	if errors.Is(context.Cause(ctx), errRequestTimeout) {
		return apierror.New(http.StatusGatewayTimeout, apierror.CodeTimeout, "request timed out", last)
	}
	// The client went away: report the cancellation itself, not the upstream error it caused.
	return fmt.Errorf("%w (last attempt: %s)", ctx.Err(), last.Error())
}

func (x *Dispatcher) attempt(ctx context.Context, r *Request, br *backend.Request, preq *placement.Request) (*Response, error) {
	if !x.cfg.PD {
		return x.regular(ctx, r, br, preq)
	}
	return x.pd(ctx, r, br, preq)
}

// placementRequest extracts routing inputs; a malformed target-worker header is the client's error.
func placementRequest(br *backend.Request, h http.Header) (*placement.Request, error) {
	p := &placement.Request{Model: br.Model, Text: br.Text, TargetWorker: -1}
	p.RoutingKey = h.Get(HeaderRoutingKey)
	if p.RoutingKey == "" {
		p.RoutingKey = h.Get(HeaderSMGRoutingKey)
	}
	name, tw := HeaderTargetWorker, h.Get(HeaderTargetWorker)
	if tw == "" {
		name, tw = HeaderSMGTargetWorker, h.Get(HeaderSMGTargetWorker)
	}
	if tw != "" {
		n, err := strconv.Atoi(tw)
		if err != nil || n < 0 {
			return nil, apierror.InvalidRequest(name, name+" must be a worker index >= 0, got "+strconv.Quote(tw))
		}
		p.TargetWorker = n
	}
	return p, nil
}

// regular proxies to one regular worker; its load guard is held until the response body is closed.
func (x *Dispatcher) regular(ctx context.Context, r *Request, br *backend.Request, preq *placement.Request) (*Response, error) {
	snap := x.d.Registry.Snapshot()
	w, err := placement.SelectRegular(snap, preq, x.d.Policies.Regular, nil, time.Now())
	if err != nil {
		return nil, err
	}
	load := x.acquireLoad(w)
	resp, err := x.call(ctx, w, "regular", br.Route.Path(), br.Body, r) //nolint:bodyclose // closed through Response.Close
	if err != nil {
		x.releaseLoad(w, load)
		return nil, err
	}
	out := x.response(resp, br, w, nil)
	out.Body = &onClose{ReadCloser: resp.Body, fn: func() { x.releaseLoad(w, load) }}
	return out, nil
}

func (x *Dispatcher) acquireLoad(w *worker.Worker) *worker.LoadGuard {
	x.d.Metrics.AddWorkerActive(w.URL(), 1)
	return w.AcquireLoad()
}

func (x *Dispatcher) releaseLoad(w *worker.Worker, g *worker.LoadGuard) {
	if g == nil {
		return
	}
	x.d.Metrics.AddWorkerActive(w.URL(), -1)
	g.Release()
}

func (x *Dispatcher) response(resp *http.Response, br *backend.Request, decode, prefill *worker.Worker) *Response {
	h := http.Header{}
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		h.Set("Content-Type", ct)
	}
	h.Set(HeaderWorker, decode.URL())
	out := &Response{Status: resp.StatusCode, Header: h, Model: br.Model, Worker: decode.URL()}
	if prefill != nil {
		h.Set(HeaderPrefillWorker, prefill.URL())
		out.PrefillWorker = prefill.URL()
	}
	out.Stream = br.Stream || isEventStream(resp.Header.Get("Content-Type"))
	return out
}

func isEventStream(ct string) bool {
	return len(ct) >= 17 && ct[:17] == "text/event-stream"
}

// admitPrefill reserves an admission slot on a prefill worker chosen by the prefill policy, under the
// admission lock (so a stateful policy never picks a worker that then has no slot for it).
func (x *Dispatcher) admitPrefill(ctx context.Context, preq *placement.Request) (*admission.Slot, *worker.Worker, error) {
	var chosen *worker.Worker
	slot, err := x.d.Admission.Acquire(ctx, admission.Request{
		Queue: preq.Model,
		Select: func(hasCapacity func(string) bool) (string, error) {
			w, err := placement.SelectPrefill(x.d.Registry.Snapshot(), preq, x.d.Policies.Prefill,
				func(w *worker.Worker) bool { return hasCapacity(w.URL()) }, time.Now())
			if err != nil {
				if errors.Is(err, placement.ErrAtCapacity) {
					return "", admission.ErrNoCapacity
				}
				return "", err
			}
			chosen = w
			return w.URL(), nil
		},
	})
	if err != nil {
		return nil, nil, err
	}
	return slot, chosen, nil
}

// pd runs one PD attempt in the style of the chosen prefill worker's protocol.
func (x *Dispatcher) pd(ctx context.Context, r *Request, br *backend.Request, preq *placement.Request) (*Response, error) {
	if br.N > 1 && x.vllmRuntime() {
		// vLLM's prefill serves one sample; n > 1 goes straight to decode, which recomputes the prompt.
		return x.decodeOnly(ctx, r, br, preq)
	}
	slot, pw, err := x.admitPrefill(ctx, preq)
	if err != nil {
		return nil, err
	}
	if pw.Protocol() == worker.ProtocolVLLM {
		return x.pdSequential(ctx, r, br, preq, slot, pw)
	}
	return x.pdParallel(ctx, r, br, preq, slot, pw)
}

// vllmRuntime reports whether the prefill fleet speaks vLLM's sequential protocol.
func (x *Dispatcher) vllmRuntime() bool {
	for _, w := range x.d.Registry.Snapshot().ByRole(worker.RolePrefill) {
		return w.Protocol() == worker.ProtocolVLLM
	}
	return false
}

func (x *Dispatcher) decodeOnly(ctx context.Context, r *Request, br *backend.Request, preq *placement.Request) (*Response, error) {
	dw, err := placement.SelectDecode(x.d.Registry.Snapshot(), preq, x.d.Policies.Decode, time.Now())
	if err != nil {
		return nil, err
	}
	load := x.acquireLoad(dw)
	resp, err := x.call(ctx, dw, "decode", br.Route.Path(), br.Body, r) //nolint:bodyclose // closed through Response.Close
	if err != nil {
		x.releaseLoad(dw, load)
		return nil, err
	}
	out := x.response(resp, br, dw, nil)
	out.Body = &onClose{ReadCloser: resp.Body, fn: func() { x.releaseLoad(dw, load) }}
	return out, nil
}

type prefillResult struct {
	err error
	// body is the prefill response, kept only when input logprobs must be merged.
	body []byte
}

// pdParallel sends the same body, with bootstrap fields, to both legs at once (SGLang style; also the
// worker gRPC protocol). The prefill leg runs in its own goroutine and frees the slot when it ends.
func (x *Dispatcher) pdParallel(ctx context.Context, r *Request, br *backend.Request, preq *placement.Request, slot *admission.Slot, pw *worker.Worker) (*Response, error) {
	dw, err := placement.SelectDecode(x.d.Registry.Snapshot(), preq, x.d.Policies.Decode, time.Now())
	if err != nil {
		slot.Release(admission.ReleaseFailed)
		return nil, err
	}
	rooms := make([]uint64, backend.RoomCount(br))
	for i := range rooms {
		rooms[i] = backend.NewRoom(x.uint64)
	}
	body, err := backend.InjectBootstrap(br.Body, hostOf(pw.URL()), pw.BootstrapPort(), rooms)
	if err != nil {
		slot.Release(admission.ReleaseFailed)
		return nil, apierror.InvalidRequest("", "cannot add bootstrap fields to the request body: "+err.Error())
	}

	// SGLang computes input logprobs on the prefill leg: keep its body to merge them into decode's.
	mergeLogprobs := br.Route == RouteGenerate && br.ReturnLogprob && !br.Stream
	legCtx, cancelLegs := context.WithCancel(ctx)
	pload := x.acquireLoad(pw)
	dload := x.acquireLoad(dw)
	done := make(chan prefillResult, 1)
	go func() {
		reason := admission.ReleaseCompleted
		defer func() {
			x.releaseLoad(pw, pload)
			slot.Release(reason)
		}()
		start := time.Now()
		var keep *[]byte
		var kept []byte
		if mergeLogprobs {
			keep = &kept
		}
		err := x.drainLeg(legCtx, pw, "prefill", br.Route.Path(), body, r, keep)
		if err != nil {
			reason = admission.ReleaseFailed
			if legCtx.Err() != nil {
				reason = admission.ReleaseCancelled
			}
			cancelLegs() // a failed prefill leaves decode waiting for KV that never comes
		} else {
			x.d.Metrics.ObservePrefill(time.Since(start))
		}
		done <- prefillResult{err: err, body: kept}
	}()

	resp, err := x.call(legCtx, dw, "decode", br.Route.Path(), body, r)
	if err != nil {
		cancelLegs()
		pres := <-done
		x.releaseLoad(dw, dload)
		if pres.err != nil && legCtx.Err() != nil && ctx.Err() == nil {
			// Decode failed because prefill failed first: report the cause.
			return nil, pres.err
		}
		return nil, err
	}
	out := x.response(resp, br, dw, pw)
	if mergeLogprobs {
		return x.mergedResponse(out, resp, cancelLegs, done, func() { x.releaseLoad(dw, dload) })
	}
	var once sync.Once
	out.Body = &onClose{ReadCloser: &legBody{ReadCloser: resp.Body, ctx: legCtx}, fn: func() {
		once.Do(func() {
			cancelLegs()
			<-done
			x.releaseLoad(dw, dload)
		})
	}}
	return out, nil
}

// pdSequential runs vLLM's flow: prefill with the rewritten body to completion (slot released as soon
// as its response is read), then decode with the returned kv_transfer_params.
func (x *Dispatcher) pdSequential(ctx context.Context, r *Request, br *backend.Request, preq *placement.Request, slot *admission.Slot, pw *worker.Worker) (*Response, error) {
	pbody, err := backend.VLLMPrefillBody(br.Route, br.Body)
	if err != nil {
		slot.Release(admission.ReleaseFailed)
		return nil, apierror.InvalidRequest("", "cannot build the prefill request: "+err.Error())
	}
	pload := x.acquireLoad(pw)
	start := time.Now()
	presp, err := x.call(ctx, pw, "prefill", br.Route.Path(), pbody, r)
	var pout []byte
	if err == nil {
		pout, err = io.ReadAll(io.LimitReader(presp.Body, maxMergedBody))
		presp.Body.Close()
	}
	x.releaseLoad(pw, pload)
	if err != nil {
		slot.Release(admission.ReleaseFailed)
		return nil, err
	}
	slot.Release(admission.ReleaseCompleted)
	x.d.Metrics.ObservePrefill(time.Since(start))
	params, err := backend.ExtractKVTransferParams(pout)
	if err != nil {
		return nil, &UpstreamError{Worker: pw.URL(), Status: http.StatusBadGateway, Message: "prefill response has no usable kv_transfer_params: " + err.Error()}
	}
	dbody, err := backend.VLLMDecodeBody(br.Body, params)
	if err != nil {
		return nil, apierror.InvalidRequest("", "cannot build the decode request: "+err.Error())
	}
	dw, err := placement.SelectDecode(x.d.Registry.Snapshot(), preq, x.d.Policies.Decode, time.Now())
	if err != nil {
		return nil, err
	}
	dload := x.acquireLoad(dw)
	resp, err := x.call(ctx, dw, "decode", br.Route.Path(), dbody, r) //nolint:bodyclose // closed through Response.Close
	if err != nil {
		x.releaseLoad(dw, dload)
		return nil, err
	}
	out := x.response(resp, br, dw, pw)
	out.Body = &onClose{ReadCloser: resp.Body, fn: func() { x.releaseLoad(dw, dload) }}
	return out, nil
}

// drainLeg calls a leg and reads its body to the end; the body is dropped unless keep is given.
func (x *Dispatcher) drainLeg(ctx context.Context, w *worker.Worker, leg, path string, body []byte, r *Request, keep *[]byte) error {
	resp, err := x.call(ctx, w, leg, path, body, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if keep != nil {
		*keep, err = io.ReadAll(io.LimitReader(resp.Body, maxMergedBody))
	} else {
		_, err = io.Copy(io.Discard, resp.Body)
	}
	if err != nil {
		return &TransportError{Worker: w.URL(), Err: err}
	}
	return nil
}

// maxMergedBody bounds the responses held in memory to merge input logprobs.
const maxMergedBody = 64 << 20

// mergedResponse reads the whole decode response, waits for prefill, and answers decode's JSON with
// prefill's input logprobs prepended. Everything is released before it returns.
func (x *Dispatcher) mergedResponse(out *Response, resp *http.Response, cancelLegs context.CancelFunc,
	done <-chan prefillResult, releaseDecode func()) (*Response, error) {
	dbody, err := io.ReadAll(io.LimitReader(resp.Body, maxMergedBody))
	resp.Body.Close()
	if err != nil {
		err = &TransportError{Worker: out.Worker, Err: err}
	}
	pres := <-done
	cancelLegs()
	releaseDecode()
	if err != nil {
		return nil, err
	}
	if pres.err != nil {
		return nil, pres.err
	}
	merged, merr := backend.MergeInputLogprobs(pres.body, dbody)
	if merr != nil {
		x.d.Logger.Debug("input logprobs not merged", "err", merr)
		merged = dbody
	}
	out.Body = io.NopCloser(bytes.NewReader(merged))
	out.Header.Del("Content-Length")
	return out, nil
}

func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Hostname()
}

// call sends one leg and returns its response head. Statuses >= 400 come back as *UpstreamError (body
// read and closed); transport failures as *TransportError. Breakers and upstream metrics are fed here.
// The leg's client span ends when the returned body is closed.
func (x *Dispatcher) call(ctx context.Context, w *worker.Worker, leg, path string, body []byte, r *Request) (*http.Response, error) {
	ctx, span := x.d.Tracer.Start(ctx, "sluice.leg."+leg, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("sluice.worker", w.URL()), attribute.String("sluice.leg", leg)))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL()+path, bytes.NewReader(body))
	if err != nil {
		span.End()
		return nil, err
	}
	backend.ForwardHeaders(req.Header, r.Header, HeaderRoutingKey, HeaderSMGRoutingKey)
	if x.cfg.DropClientAuthorization {
		req.Header.Del("Authorization")
	}
	if k := w.APIKey(); k != "" {
		req.Header.Set("Authorization", "Bearer "+k)
	}
	req.Header.Set("Content-Type", "application/json")
	if r.RequestID != "" {
		req.Header.Set(HeaderRequestID, r.RequestID)
	}
	if w.Protocol() == worker.ProtocolGRPC {
		req.Header.Set(backend.RoleHeader, string(w.Role())) // which RPC the worker-protocol transport calls
	}
	x.d.Propagator.Inject(ctx, propagation.HeaderCarrier(req.Header))

	resp, err := x.d.HTTP.Do(req)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "transport error")
		span.End()
		if ctx.Err() == nil { // our own cancellation is not the worker's fault
			w.Breaker().RecordFailure()
			x.d.Metrics.ObserveUpstream(w.URL(), 0)
		}
		return nil, &TransportError{Worker: w.URL(), Err: err}
	}
	x.d.Metrics.ObserveUpstream(w.URL(), resp.StatusCode)
	span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	w.Breaker().RecordStatus(resp.StatusCode)
	if resp.StatusCode >= 400 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, maxUpstreamErrorBody))
		resp.Body.Close()
		span.SetStatus(codes.Error, "upstream status "+strconv.Itoa(resp.StatusCode))
		span.End()
		return nil, &UpstreamError{Worker: w.URL(), Status: resp.StatusCode, Body: msg, RetryAfter: resp.Header.Get("Retry-After")}
	}
	resp.Body = &onClose{ReadCloser: resp.Body, fn: func() { span.End() }}
	return resp, nil
}

// onClose runs fn once, after closing the body.
type onClose struct {
	io.ReadCloser
	fn   func()
	once sync.Once
}

func (o *onClose) Close() error {
	err := o.ReadCloser.Close()
	o.once.Do(o.fn)
	return err
}

// legBody turns a read error caused by the legs' cancellation (the prefill failed mid-request) into a
// clear error for the relay.
type legBody struct {
	io.ReadCloser
	ctx context.Context
}

func (l *legBody) Read(p []byte) (int, error) {
	n, err := l.ReadCloser.Read(p)
	if err != nil && err != io.EOF && l.ctx.Err() != nil {
		return n, fmt.Errorf("request aborted: %w", context.Cause(l.ctx))
	}
	return n, err
}

// UpstreamError is a worker's error response.
type UpstreamError struct {
	Worker     string
	Status     int
	Body       []byte
	Message    string
	RetryAfter string
}

func (e *UpstreamError) Error() string {
	if e.Message != "" {
		return e.Message
	}
	return fmt.Sprintf("worker %s answered %d: %s", e.Worker, e.Status, truncate(e.Body, 512))
}

// APIError relays the worker's status, with its OpenAI-shaped message when it has one (else a generic
// one: worker URLs and raw engine bodies stay in logs and traces), and the engine's Retry-After.
func (e *UpstreamError) APIError() *apierror.Error {
	msg := e.Message
	if msg == "" {
		msg = "upstream worker answered HTTP " + strconv.Itoa(e.Status)
	}
	ae := apierror.FromUpstream(e.Status, e.Body, msg, e)
	if secs, err := strconv.Atoi(e.RetryAfter); err == nil && secs > 0 {
		ae.RetryAfter = time.Duration(secs) * time.Second
	}
	return ae
}

// TransportError is a failure to reach a worker or to read its response.
type TransportError struct {
	Worker string
	Err    error
}

func (e *TransportError) Error() string { return "worker " + e.Worker + ": " + e.Err.Error() }
func (e *TransportError) Unwrap() error { return e.Err }

// APIError maps a transport failure to 502 (504 when the worker timed out).
func (e *TransportError) APIError() *apierror.Error {
	var ne net.Error
	if errors.As(e.Err, &ne) && ne.Timeout() {
		return apierror.New(http.StatusGatewayTimeout, apierror.CodeUpstream, "upstream worker timed out", e)
	}
	return apierror.New(http.StatusBadGateway, apierror.CodeUpstream, "upstream worker unreachable or failed", e)
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

func isRetryable(err error) bool {
	var ue *UpstreamError
	if errors.As(err, &ue) {
		return backend.IsRetryableStatus(ue.Status)
	}
	var te *TransportError
	if errors.As(err, &te) {
		return !errors.Is(te.Err, context.Canceled)
	}
	return false
}

func classifyRequestError(err error) error {
	var re *backend.RequestError
	if errors.As(err, &re) {
		if re.Malformed {
			return apierror.New(http.StatusBadRequest, apierror.CodeInvalidJSON, re.Message, err)
		}
		return apierror.InvalidRequest(re.Param, re.Message)
	}
	return apierror.InvalidRequest("", err.Error())
}
