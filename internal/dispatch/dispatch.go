package dispatch

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/alias"
	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/auth"
	"github.com/sluicegw/sluice/internal/backend"
	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/enginebook"
	"github.com/sluicegw/sluice/internal/placement"
	"github.com/sluicegw/sluice/internal/tenant"
	"github.com/sluicegw/sluice/internal/tokenizer"
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
	defaultRequestAttempts = 5
)

// Metrics are the request-path instruments dispatch records (docs/metrics.md names them).
type Metrics interface {
	// ObserveUpstream records a worker's answer status; 0 for a transport error.
	ObserveUpstream(worker string, status int)
	// IncWorkerError counts a leg's failure on worker that has no HTTP status: ClassTransport,
	// ClassTimeout or ClassStream (failures with a status are classed from ObserveUpstream's).
	IncWorkerError(worker, class string)
	IncRetry()
	// ObservePrefill records a prefill leg that succeeded, by KV handoff label.
	ObservePrefill(handoff string, d time.Duration, sc trace.SpanContext)
	// IncKVTransferFallback counts a decode sent without KV transfer parameters, by handoff label.
	IncKVTransferFallback(handoff string)
	// IncSplit counts an n > 1 request split into samples single-sample requests.
	IncSplit(handoff string, samples int)
	// IncPrefillSkipped counts a PD request sent to a decode worker alone, and why.
	IncPrefillSkipped(handoff, reason string)
	// ObserveRequest records one finished request; s is not retained.
	ObserveRequest(s *RequestStats)
}

// Error classes of Metrics.IncWorkerError.
const (
	ClassTransport = "transport" // the connection failed before an answer
	ClassTimeout   = "timeout"   // no answer within a deadline
	ClassStream    = "stream"    // a streamed answer broke off
)

// The IncPrefillSkipped reasons: requests a single-consumer KV handoff (vLLM's) cannot carry, and
// short prompts a kv_both decode engine prefills itself (local.go).
const (
	// ReasonLocalPrefill: the uncached prompt is below Config.LocalPrefillMaxTokens.
	ReasonLocalPrefill = "local_prefill"
	// ReasonLocalPrefillWait: with decode seats, the request would wait for a prefill slot while a
	// kv_both decode worker has a seat.
	ReasonLocalPrefillWait = "local_prefill_wait"
	// ReasonNGreaterThanOne: each of the n samples would pull the one KV transfer.
	ReasonNGreaterThanOne = "n_gt_1"
	// ReasonBatch: a prompt batch would get the KV transfer of one prompt.
	ReasonBatch = "batch"
)

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
	// IgnoreRanks places requests on engines only, never on their data-parallel ranks, and sends no
	// rank hints (--dp-aware=false).
	IgnoreRanks bool
	// PrefillGrace is how long a finished request waits for a parallel prefill leg still running to
	// end by itself before cancelling it (which costs its upstream connection); 0 means 50ms.
	PrefillGrace time.Duration
	// RequestIDHeaders are read in order for a request's id (the first present wins); empty means
	// X-Request-Id alone.
	RequestIDHeaders []string
	// RoutingKeyHeaders are read in order for the routing key; empty means X-Sluice-Routing-Key, then
	// X-SMG-Routing-Key.
	RoutingKeyHeaders []string
	// CharsPerToken turns prompt text into admission's token estimate; 0 means DefaultCharsPerToken.
	CharsPerToken float64
	// CheckOverload makes a prefill worker whose engine last reported more than OverloadWaitingRequests
	// waiting requests count as at capacity for admission (worker.LoadMonitor supplies the reports).
	CheckOverload           bool
	OverloadWaitingRequests int
	// CheckDecodeOverload vetoes, with decode seats on, a decode worker whose engine last reported more
	// than DecodeOverloadWaitingRequests waiting requests (--decode-overload-waiting-requests);
	// DecodeMaxKVUsage > 0 one whose KV cache usage is above it (--decode-max-kv-usage).
	CheckDecodeOverload           bool
	DecodeOverloadWaitingRequests int
	DecodeMaxKVUsage              float64
	// LocalPrefillMaxTokens > 0 sends a PD request whose estimated uncached prompt is below it to a
	// decode worker of KV role kv_both alone (local.go); 0 = off.
	LocalPrefillMaxTokens int64
	// Tenants, when set, names each request's tenant for admission's tenancy (internal/auth).
	Tenants *auth.TenantResolver
	// Budgets, when set, are the tenants' token and request budgets (budget.go); needs Tenants.
	Budgets *tenant.Budgets
	// Aliases, when set, maps client model names to served models (alias.go).
	Aliases *alias.Table
	// ExposeAliasTarget answers an aliased request with the served model's name.
	ExposeAliasTarget bool
	// Pairing matches a PD pair's workers by topology and revision (topology.go); New clamps it.
	Pairing placement.Pairing
	// MaxMigrations bounds the continuations of one streamed PD request whose decode engine broke off
	// mid-stream (migrate.go, engine-gRPC mode); 0 = no migration.
	MaxMigrations int
}

// defaultPrefillGrace bounds the wait for a prefill leg that answers after its decode.
const defaultPrefillGrace = 50 * time.Millisecond

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
	// Tokenizer returns the tokenizer of a model, or nil (tokens.go); nil means none for any.
	Tokenizer func(model string) *tokenizer.Tokenizer
	// Now is the clock every duration and instant of a request is read from (its stats, TTFT, the
	// legs' timing, placement's health checks); nil means time.Now. Timers (backoff, the prefill
	// grace) run on real time.
	Now func() time.Time
}

// Dispatcher runs requests. It is safe for concurrent use.
type Dispatcher struct {
	cfg      Config
	d        Deps
	rmu      sync.Mutex // guards d.Rand when injected (rand.Rand is not safe for concurrent use)
	mooncake mooncakePD
	live     enginebook.Book[*migratingStream] // HTTP-mode migratable streams, for MigrateFrom (migrate_drain.go)
	vllmHTTP atomic.Uint64                     // servesVLLMOverHTTP's answer for a registry version: version<<1 | answer
	// predicting: a policy is predicted_latency, so each request carries Picks (the policies are fixed
	// at construction; asked once here, not per request).
	predicting bool
}

// New validates cfg and builds a dispatcher.
func New(cfg Config, d Deps) (*Dispatcher, error) {
	if d.Registry == nil || d.Policies == nil || d.Admission == nil {
		return nil, errors.New("dispatch: registry, policies and admission are required")
	}
	if cfg.Retry.MaxAttempts <= 0 {
		cfg.Retry.MaxAttempts = 1
	}
	if cfg.PrefillGrace <= 0 {
		cfg.PrefillGrace = defaultPrefillGrace
	}
	cfg.Pairing = cfg.Pairing.Clamped()
	if len(cfg.RequestIDHeaders) == 0 {
		cfg.RequestIDHeaders = []string{HeaderRequestID}
	}
	if len(cfg.RoutingKeyHeaders) == 0 {
		cfg.RoutingKeyHeaders = []string{HeaderRoutingKey, HeaderSMGRoutingKey}
	}
	// Canonical once here: Header.Get would canonicalize (and allocate for) a lower-case name, as the
	// flags spell them, on every request.
	cfg.RequestIDHeaders = canonicalHeaders(cfg.RequestIDHeaders)
	cfg.RoutingKeyHeaders = canonicalHeaders(cfg.RoutingKeyHeaders)
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
	x := &Dispatcher{cfg: cfg, d: d, predicting: d.Policies.Uses(placement.PolicyPredictedLatency)}
	x.mooncake.x = x
	return x, nil
}

type nopMetrics struct{}

func (nopMetrics) ObserveUpstream(string, int)                             {}
func (nopMetrics) IncWorkerError(string, string)                           {}
func (nopMetrics) IncRetry()                                               {}
func (nopMetrics) ObservePrefill(string, time.Duration, trace.SpanContext) {}
func (nopMetrics) IncKVTransferFallback(string)                            {}
func (nopMetrics) IncSplit(string, int)                                    {}
func (nopMetrics) IncPrefillSkipped(string, string)                        {}
func (nopMetrics) ObserveRequest(*RequestStats)                            {}

func (x *Dispatcher) uint64() uint64 {
	if x.d.Rand == nil {
		return rand.Uint64()
	}
	x.rmu.Lock()
	defer x.rmu.Unlock()
	return x.d.Rand.Uint64()
}

// newRequestID returns a random (version 4) UUID, the X-Request-Id of a request whose client sent none.
func (x *Dispatcher) newRequestID() string {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], x.uint64())
	binary.LittleEndian.PutUint64(b[8:], x.uint64())
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 9562 variant
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:], b[10:])
	return string(out[:])
}

func (x *Dispatcher) float64() float64 {
	if x.d.Rand == nil {
		return rand.Float64()
	}
	x.rmu.Lock()
	defer x.rmu.Unlock()
	return x.d.Rand.Float64()
}

// now reads the dispatcher's clock (Deps.Now, else time.Now).
func (x *Dispatcher) now() time.Time {
	if x.d.Now == nil {
		return time.Now()
	}
	return x.d.Now()
}

// Models lists the models the registered workers serve, sorted.
func (x *Dispatcher) Models() []string { return x.d.Registry.Snapshot().Models() }

// parse reads the request's routing fields: a typed request's as its surface gave them (with the
// per-request state of its typed path), else body.ParseRequest's.
func parse(r *Request) (*body.Request, *typedState, error) {
	if r.Typed == nil {
		br, err := body.ParseRequest(r.Route, r.Body)
		return br, nil, err
	}
	if r.Typed.Parsed == nil || r.Typed.JSON == nil {
		return nil, nil, errors.New("dispatch: a typed request needs its parsed fields and its JSON")
	}
	br := *r.Typed.Parsed
	br.Body = nil
	return &br, &typedState{fn: r.Typed.JSON}, nil
}

// requestAttributes names the request on its span with OpenTelemetry's GenAI conventions.
func requestAttributes(r *Request, br *body.Request) []attribute.KeyValue {
	op := "text_completion"
	if br.Route == body.RouteChat {
		op = "chat"
	}
	attrs := []attribute.KeyValue{
		attribute.String("sluice.request_id", r.RequestID),
		attribute.String("gen_ai.operation.name", op),
		attribute.Bool("sluice.stream", br.Stream),
	}
	if br.Model != "" {
		attrs = append(attrs, attribute.String("gen_ai.request.model", br.Model))
	}
	if br.N > 1 {
		attrs = append(attrs, attribute.Int("gen_ai.request.choice.count", br.N))
	}
	return attrs
}

// errorType is the low-cardinality error.type of a failed attempt: the worker's status, or the kind
// of transport failure.
func errorType(err error) string {
	var ue *UpstreamError
	if errors.As(err, &ue) {
		return strconv.Itoa(ue.Status)
	}
	var te *TransportError
	if errors.As(err, &te) {
		if isTimeout(te.Err) {
			return ClassTimeout
		}
		return ClassTransport
	}
	return "other"
}

var errRequestTimeout = errors.New("request timeout")

// final classifies the error a request ends with; admission rejections and unavailability carry a
// Retry-After estimated from the measured slot-release rate.
func (x *Dispatcher) final(err error) error {
	e := apierror.From(err)
	if (e.Status == http.StatusTooManyRequests || e.Status == http.StatusServiceUnavailable) && e.RetryAfter == 0 {
		e.RetryAfter = x.d.Admission.RetryAfterFor(err)
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

func (x *Dispatcher) attempt(ctx context.Context, r *Request, br *body.Request, preq *placement.Request) (*Response, error) {
	if br.Route.IsAux() {
		return x.aux(ctx, r, br, preq)
	}
	if !x.cfg.PD {
		return x.regular(ctx, r, br, preq)
	}
	return x.pd(ctx, r, br, preq)
}

// placementRequest extracts routing inputs; a malformed target-worker header is the client's error.
func placementRequest(br *body.Request, h http.Header, routingKeyHeaders []string) (*placement.Request, error) {
	p := &placement.Request{Model: br.Model, Text: br.Text, TargetWorker: -1}
	p.RoutingKey = firstHeader(h, routingKeyHeaders)
	name, tw := HeaderTargetWorker, firstHeader(h, targetWorkerHeader)
	if tw == "" {
		name, tw = HeaderSMGTargetWorker, firstHeader(h, smgTargetWorkerHeader)
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

// The target-worker headers in canonical form, for firstHeader.
var targetWorkerHeader, smgTargetWorkerHeader = canonicalHeaders([]string{HeaderTargetWorker}), canonicalHeaders([]string{HeaderSMGTargetWorker})

// firstHeader returns the value of the first of names present in h; names are canonical
// (canonicalHeaders), h is as net/http built it (canonical keys).
func firstHeader(h http.Header, names []string) string {
	for _, n := range names {
		if v := h[n]; len(v) > 0 && v[0] != "" {
			return v[0]
		}
	}
	return ""
}

// canonicalHeaders returns names in their canonical form (a copy: the caller's slice is left alone).
func canonicalHeaders(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = http.CanonicalHeaderKey(n)
	}
	return out
}
