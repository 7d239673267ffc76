// Package httpapi is the OpenAI-compatible REST surface: POST /v1/chat/completions, /v1/completions and
// /generate, GET /v1/models. It is hand-written because it must be byte-compatible with the official
// SDKs: the engine's JSON is relayed as is, SSE frame by frame with a flush per frame, and unknown request
// fields reach the engine untouched. No status line is written before dispatch has admitted the request
// and the decode response head has arrived, so an admission 429 is a real HTTP 429.
package httpapi

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/dispatch"
	"github.com/sluicegw/sluice/internal/tokenizer"
)

// Metrics are the request metrics the surface records itself: only for requests refused before they
// reach dispatch (unreadable or oversized bodies). Dispatch records every request it runs.
type Metrics interface {
	ObserveRequest(route, model string, status int, d time.Duration, sc trace.SpanContext)
}

// Options configure the surface.
type Options struct {
	Dispatcher *dispatch.Dispatcher
	// MaxPayloadSize bounds request bodies; larger ones get 413. Zero means 32 MiB.
	MaxPayloadSize int64
	Metrics        Metrics
	Tracer         trace.Tracer
	Propagator     propagation.TextMapPropagator
	Logger         *slog.Logger
	// SpanAttributes, when set, adds attributes from the request context to the request span (the
	// authenticated caller's id).
	SpanAttributes func(context.Context) []attribute.KeyValue
	// Tokenizer, when set, returns the tokenizer of a model (nil: none); the gateway then answers
	// /tokenize and /v1/tokenize for that model itself (tokenize.go).
	Tokenizer func(model string) *tokenizer.Tokenizer
}

// Handler serves the OpenAI REST routes.
type Handler struct {
	o   Options
	mux *http.ServeMux
	// created is the "created" time reported for models: sluice cannot know when an engine loaded one.
	created int64
}

// New builds the handler.
func New(o Options) *Handler {
	if o.MaxPayloadSize <= 0 {
		o.MaxPayloadSize = 32 << 20
	}
	if o.Tracer == nil {
		o.Tracer = noop.NewTracerProvider().Tracer("")
	}
	if o.Propagator == nil {
		o.Propagator = propagation.TraceContext{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	h := &Handler{o: o, mux: http.NewServeMux(), created: time.Now().Unix()}
	h.mux.Handle("POST /v1/chat/completions", h.inference(dispatch.RouteChat, "/v1/chat/completions"))
	h.mux.Handle("POST /v1/completions", h.inference(dispatch.RouteCompletions, "/v1/completions"))
	h.mux.Handle("POST /generate", h.inference(dispatch.RouteGenerate, "/generate"))
	h.mux.HandleFunc("GET /v1/models", h.models)
	h.registerAux() // aux.go: embeddings, rerank, score, classify, tokenize, responses, messages
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { apierror.NoRoute(w, r, h.mux, "/") })
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// serverSpan is the option of every route's span, made once.
var serverSpan = trace.WithSpanKind(trace.SpanKindServer)

// principalAttributes puts the caller's identity (Options.SpanAttributes) on a recording span.
func (h *Handler) principalAttributes(ctx context.Context, span trace.Span) {
	if h.o.SpanAttributes != nil {
		span.SetAttributes(h.o.SpanAttributes(ctx)...)
	}
}

func (h *Handler) inference(route dispatch.Route, name string) http.Handler {
	spanName := "POST " + name
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ctx := h.o.Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := h.o.Tracer.Start(ctx, spanName, serverSpan)
		if span.IsRecording() { // attributes are allocations, for the requests whose trace is not sampled too
			span.SetAttributes(attribute.String("http.route", name), attribute.String("http.request.method", r.Method),
				attribute.String("url.path", r.URL.Path))
			h.principalAttributes(ctx, span)
		}
		defer span.End()

		rec := &recorder{h: h, route: name, start: start, span: span}
		defer rec.finish()

		// The body is not pooled: an upstream transport may still read a request body after RoundTrip
		// returned (net/http documents this), so the bytes must outlive this handler.
		var buf bytes.Buffer
		if r.ContentLength > 0 && r.ContentLength <= h.o.MaxPayloadSize {
			buf.Grow(int(r.ContentLength) + bytes.MinRead)
		}
		if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, h.o.MaxPayloadSize)); err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				rec.fail(w, apierror.New(http.StatusRequestEntityTooLarge, apierror.CodePayloadTooLarge,
					"request body exceeds the maximum payload size of "+strconv.FormatInt(mbe.Limit, 10)+" bytes", err))
				return
			}
			rec.fail(w, apierror.New(http.StatusBadRequest, apierror.CodeInvalidRequest, "could not read the request body", err))
			return
		}
		body := buf.Bytes()
		if !utf8.Valid(body) {
			// JSON text is UTF-8 (RFC 8259 §8.1); an engine would decode invalid bytes differently
			// from the gateway's own scan, or fail on them later with a less clear error.
			rec.fail(w, apierror.New(http.StatusBadRequest, apierror.CodeInvalidJSON, "request body is not valid UTF-8", nil))
			return
		}

		resp, err := h.o.Dispatcher.Do(ctx, &dispatch.Request{Route: route, Body: body, Header: r.Header})
		rec.dispatched = true // dispatch records the request, answered or not
		if err != nil {
			rec.fail(w, apierror.From(err))
			return
		}
		defer resp.Body.Close()
		rec.model = resp.Model
		rec.status = resp.Status
		relay(r.Context(), w, resp, rec, h.o.Logger)
	})
}

// recorder records the request's span status, and its metrics when dispatch did not (the request
// never reached it).
type recorder struct {
	h          *Handler
	route      string
	model      string
	status     int
	start      time.Time
	span       trace.Span
	dispatched bool
}

func (r *recorder) fail(w http.ResponseWriter, e *apierror.Error) {
	r.status = e.Status
	if e.Status >= 500 {
		r.span.SetStatus(codes.Error, e.Message)
	}
	if r.span.IsRecording() {
		r.span.SetAttributes(attribute.String("sluice.error.code", e.Code))
	}
	e.WriteHTTP(w)
}

func (r *recorder) finish() {
	if r.span.IsRecording() {
		r.span.SetAttributes(attribute.Int("http.response.status_code", r.status))
	}
	if r.h.o.Metrics != nil && !r.dispatched {
		r.h.o.Metrics.ObserveRequest(r.route, r.model, r.status, time.Since(r.start), r.span.SpanContext())
	}
}

func copyHeaders(w http.ResponseWriter, resp *dispatch.Response) {
	h := w.Header()
	for k, v := range resp.Header {
		h[k] = v
	}
	if resp.Stream {
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
		h.Del("Content-Length")
	}
}

// relay copies the decode response to the client. A non-streaming body is copied as is; an SSE body is
// relayed frame by frame with a flush per frame. If the upstream fails mid-stream, the client gets an SSE
// error frame (the status line is long gone).
func relay(ctx context.Context, w http.ResponseWriter, resp *dispatch.Response, rec *recorder, logger *slog.Logger) {
	copyHeaders(w, resp)
	w.WriteHeader(resp.Status)
	if !resp.Stream {
		bp := copyBufPool.Get().(*[]byte)
		defer copyBufPool.Put(bp)
		n, err := io.CopyBuffer(w, resp.Body, *bp)
		if err != nil && !errors.Is(err, context.Canceled) {
			logger.Debug("relay ended early", "err", err, "bytes", n)
		}
		return
	}
	relaySSE(ctx, w, resp.Frames(), logger)
}

var copyBufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
