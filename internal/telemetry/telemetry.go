// Package telemetry owns sluice's observability plumbing: the Prometheus registry and the gateway's
// instruments, and the OpenTelemetry tracer provider (OTLP/gRPC when an endpoint is configured).
// Nothing here is global: the gateway builds one Metrics and one tracer provider and injects them.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// NewRegistry returns a Prometheus registry with the Go runtime and process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// MetricsHandler serves the registry in the Prometheus text format, or in the OpenMetrics format when
// the scraper's Accept header asks for it (Prometheus does): only OpenMetrics carries the exemplars
// (trace ids) of the latency histograms.
func MetricsHandler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true})
}

// Propagator is the W3C trace-context propagator used on every hop.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// TracerProvider is a tracer provider and the function that flushes and stops it.
type TracerProvider struct {
	trace.TracerProvider
	Shutdown func(context.Context) error
}

// NewLocalTracerProvider samples every trace and exports none: requests get sampled trace ids, so the
// latency histograms carry exemplars without a collector (sluice demo uses it for a first look).
func NewLocalTracerProvider() *TracerProvider {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	return &TracerProvider{TracerProvider: tp, Shutdown: tp.Shutdown}
}

// NewTracerProvider builds the tracer provider: an OTLP/gRPC exporter when endpoint is set (host:port or
// http(s)://host:port; plaintext unless https), else a no-op provider that records nothing.
func NewTracerProvider(ctx context.Context, endpoint string, sampleRatio float64, version string) (*TracerProvider, error) {
	if endpoint == "" {
		return &TracerProvider{TracerProvider: noop.NewTracerProvider(), Shutdown: func(context.Context) error { return nil }}, nil
	}
	opts := []otlptracegrpc.Option{}
	switch {
	case strings.HasPrefix(endpoint, "https://"):
		opts = append(opts, otlptracegrpc.WithEndpoint(strings.TrimPrefix(endpoint, "https://")))
	case strings.HasPrefix(endpoint, "http://"):
		opts = append(opts, otlptracegrpc.WithEndpoint(strings.TrimPrefix(endpoint, "http://")), otlptracegrpc.WithInsecure())
	default:
		opts = append(opts, otlptracegrpc.WithEndpoint(endpoint), otlptracegrpc.WithInsecure())
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("otlp exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewWithAttributes(semconv.SchemaURL,
		semconv.ServiceName("sluice"), semconv.ServiceVersion(version)))
	if err != nil && !errors.Is(err, resource.ErrSchemaURLConflict) {
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(sampleRatio))),
	)
	return &TracerProvider{TracerProvider: parentBasedShortcut{tp}, Shutdown: tp.Shutdown}, nil
}
