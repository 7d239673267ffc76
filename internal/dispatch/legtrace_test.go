package dispatch

import (
	"context"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicegw/sluice/internal/worker"
)

// countingPropagator counts Inject calls.
type countingPropagator struct {
	propagation.TextMapPropagator
	injects atomic.Int32
}

func (p *countingPropagator) Inject(ctx context.Context, c propagation.TextMapCarrier) {
	p.injects.Add(1)
	p.TextMapPropagator.Inject(ctx, c)
}

// TestLegsShareAnUnsampledTraceContext: both legs of a PD request carry the request's trace context;
// when it is not sampled the legs share its span, so the propagator runs once for the request, and
// once per leg when it is sampled.
func TestLegsShareAnUnsampledTraceContext(t *testing.T) {
	t.Parallel()
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	for _, tt := range []struct {
		name        string
		flags       trace.TraceFlags
		traceparent string
		injects     int32
	}{
		{"unsampled", 0, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", 1},
		{"sampled", trace.FlagsSampled, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newEngine(t, "prefill", chatAnswer)
			dec := newEngine(t, "decode", chatAnswer)
			d, _ := newPDDispatcher(t, Config{},
				pdWorker{p.srv.URL, worker.RolePrefill, worker.ProtocolSGLang},
				pdWorker{dec.srv.URL, worker.RoleDecode, worker.ProtocolSGLang})
			prop := &countingPropagator{TextMapPropagator: propagation.TraceContext{}}
			d.d.Propagator = prop
			// The dispatcher's no-op tracer gives each leg the span of its parent, as telemetry's
			// shortcut does under an unsampled parent.
			ctx := trace.ContextWithSpanContext(t.Context(), trace.NewSpanContext(trace.SpanContextConfig{
				TraceID: tid, SpanID: sid, TraceFlags: tt.flags}))
			for range 2 { // the second request makes its own headers, not the first's
				prop.injects.Store(0)
				resp, err := d.Do(ctx, &Request{Route: RouteChat, Body: []byte(`{"model":"m","messages":[{"role":"user","content":"x"}]}`)})
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if n := prop.injects.Load(); n != tt.injects {
					t.Errorf("the propagator ran %d times for one request, want %d", n, tt.injects)
				}
			}
			for _, e := range []*engine{p, dec} {
				for _, l := range e.recorded() {
					if l.traceparent != tt.traceparent {
						t.Errorf("%s leg: traceparent %q, want %q", l.role, l.traceparent, tt.traceparent)
					}
				}
				if n := len(e.recorded()); n != 2 {
					t.Errorf("%s legs: %d, want 2", e.role, n)
				}
			}
			assertReleased(t, d)
		})
	}
}
