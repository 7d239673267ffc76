package telemetry

import (
	"context"
	"strings"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// RPCTracing is a Connect interceptor that opens a server span per RPC (continuing an incoming
// traceparent), so typed requests are traced like REST ones and the core's spans hang under it.
type RPCTracing struct {
	Tracer     trace.Tracer
	Propagator propagation.TextMapPropagator
	// Attributes, when set, adds attributes taken from the request context (the caller's id).
	Attributes func(context.Context) []attribute.KeyValue
}

func (t RPCTracing) start(ctx context.Context, spec connect.Spec, h interface{ Get(string) string }) (context.Context, trace.Span) {
	ctx = t.Propagator.Extract(ctx, headerCarrier{h})
	// OpenTelemetry names RPC spans "package.Service/Method", without the leading slash.
	ctx, span := t.Tracer.Start(ctx, strings.TrimPrefix(spec.Procedure, "/"), rpcServerSpan)
	if span.IsRecording() { // attributes are allocations, for the calls whose trace is not sampled too
		span.SetAttributes(attribute.String("rpc.system", "connect_rpc"), attribute.String("rpc.method", spec.Procedure))
		if t.Attributes != nil {
			span.SetAttributes(t.Attributes(ctx)...)
		}
	}
	return ctx, span
}

var rpcServerSpan = trace.WithSpanKind(trace.SpanKindServer)

func end(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetAttributes(attribute.String("rpc.connect_rpc.error_code", connect.CodeOf(err).String()))
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// WrapUnary traces unary RPCs.
func (t RPCTracing) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		ctx, span := t.start(ctx, req.Spec(), req.Header())
		resp, err := next(ctx, req)
		end(span, err)
		return resp, err
	}
}

// WrapStreamingClient leaves client streams alone: sluice's handlers make no streaming calls.
func (t RPCTracing) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler traces streaming RPCs.
func (t RPCTracing) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ctx, span := t.start(ctx, conn.Spec(), conn.RequestHeader())
		err := next(ctx, conn)
		end(span, err)
		return err
	}
}

// headerCarrier adapts http.Header (read-only) to the propagator.
type headerCarrier struct {
	h interface{ Get(string) string }
}

func (c headerCarrier) Get(k string) string { return c.h.Get(k) }
func (headerCarrier) Set(string, string)    {}
func (headerCarrier) Keys() []string        { return nil }
