package telemetry

import (
	"context"
	"fmt"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// spanTree starts a server span under ctx and a child, a grandchild and a sibling of the child under
// it, as a PD request does (leg, admission wait, slot), and reports what each Start returned.
func spanTree(ctx context.Context, tr trace.Tracer) []trace.SpanContext {
	sctx, server := tr.Start(ctx, "server", trace.WithSpanKind(trace.SpanKindServer))
	cctx, child := tr.Start(sctx, "child")
	_, grandchild := tr.Start(cctx, "grandchild")
	_, sibling := tr.Start(sctx, "sibling")
	out := []trace.SpanContext{server.SpanContext(), child.SpanContext(), grandchild.SpanContext(), sibling.SpanContext()}
	for _, s := range []trace.Span{grandchild, sibling, child, server} {
		s.End()
	}
	return out
}

// TestParentBasedShortcutRecordsWhatTheSDKRecords: with the shortcut, the same spans are recorded,
// with the same parents, as without it, whatever the sampling ratio and the incoming parent; and a
// Start under an unsampled parent hands back the context it was given.
func TestParentBasedShortcutRecordsWhatTheSDKRecords(t *testing.T) {
	remote := func(flags trace.TraceFlags) context.Context {
		return trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: flags, Remote: true}))
	}
	parents := map[string]func() context.Context{
		"no parent":        context.Background,
		"sampled remote":   func() context.Context { return remote(trace.FlagsSampled) },
		"unsampled remote": func() context.Context { return remote(0) },
	}
	for _, ratio := range []float64{0, 1} {
		for name, parent := range parents {
			t.Run(fmt.Sprintf("ratio=%v/%s", ratio, name), func(t *testing.T) {
				record := func(wrap bool) (names []string, parentNames map[string]string, scs []trace.SpanContext) {
					rec := tracetest.NewSpanRecorder()
					var tp trace.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec),
						sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))))
					if wrap {
						tp = parentBasedShortcut{tp}
					}
					scs = spanTree(parent(), tp.Tracer("t"))
					byID := map[trace.SpanID]string{}
					for _, s := range rec.Ended() {
						byID[s.SpanContext().SpanID()] = s.Name()
					}
					parentNames = map[string]string{}
					for _, s := range rec.Ended() {
						names = append(names, s.Name())
						parentNames[s.Name()] = byID[s.Parent().SpanID()]
					}
					return names, parentNames, scs
				}
				wantNames, wantParents, wantSCs := record(false)
				gotNames, gotParents, gotSCs := record(true)
				if fmt.Sprint(gotNames) != fmt.Sprint(wantNames) || fmt.Sprint(gotParents) != fmt.Sprint(wantParents) {
					t.Fatalf("recorded %v with parents %v, the SDK alone %v with %v", gotNames, gotParents, wantNames, wantParents)
				}
				// Trace ids are drawn at random for a new root; every span is in the root's trace.
				for i := range gotSCs {
					if gotSCs[i].IsSampled() != wantSCs[i].IsSampled() || gotSCs[i].TraceID() != gotSCs[0].TraceID() {
						t.Fatalf("span %d: sampled %v in trace %s (the root's %s), the SDK alone sampled %v", i,
							gotSCs[i].IsSampled(), gotSCs[i].TraceID(), gotSCs[0].TraceID(), wantSCs[i].IsSampled())
					}
				}
				if sc := trace.SpanContextFromContext(parent()); sc.IsValid() && gotSCs[0].TraceID() != sc.TraceID() {
					t.Fatalf("server span in trace %s, its remote parent's is %s", gotSCs[0].TraceID(), sc.TraceID())
				}
			})
		}
	}
	t.Run("context unchanged under an unsampled parent", func(t *testing.T) {
		tp := parentBasedShortcut{sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())))}
		ctx, root := tp.Tracer("t").Start(context.Background(), "root")
		if root.SpanContext().IsSampled() || !root.SpanContext().IsValid() {
			t.Fatalf("root span context %v: want valid and unsampled", root.SpanContext())
		}
		got, child := tp.Tracer("t").Start(ctx, "child")
		if got != ctx || !child.SpanContext().Equal(root.SpanContext()) {
			t.Fatal("a Start under an unsampled parent made a new context or span")
		}
	})
}

// BenchmarkUnsampledSpans: the five spans a PD request starts under its server span (admission wait,
// slot, the two legs, one more), in a trace that is not sampled, with and without the shortcut.
func BenchmarkUnsampledSpans(b *testing.B) {
	for _, wrap := range []bool{false, true} {
		b.Run(fmt.Sprintf("shortcut=%v", wrap), func(b *testing.B) {
			var tp trace.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())))
			if wrap {
				tp = parentBasedShortcut{tp}
			}
			tr := tp.Tracer("t")
			ctx, root := tr.Start(context.Background(), "server")
			defer root.End()
			// A request's context is a few layers deep by the time its spans start.
			for range 6 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				defer cancel()
			}
			b.ReportAllocs()
			for b.Loop() {
				for range 5 {
					_, s := tr.Start(ctx, "child")
					s.End()
				}
			}
		})
	}
}
