package admission_test

import (
	"testing"
	"testing/synctest"

	"github.com/google/go-cmp/cmp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicegw/sluice/internal/admission"
)

type spanView struct {
	Name     string
	ChildOf  bool // parent is the request span
	Attrs    map[string]string
	Finished bool
}

func TestSpansCarryAttributes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		defer func() { _ = tp.Shutdown(bg) }()
		tr := tp.Tracer("test")

		p := newPlacement(map[string][]string{"m": {"A"}, "gone": {"Z"}})
		p.down["Z"] = true
		c := mustNew(t, on(1, 10), admission.Deps{Tracer: tr})
		ctx, reqSpan := tr.Start(bg, "request")

		first, err := c.Acquire(ctx, p.req("m", "r1", "")) // admitted at once
		if err != nil {
			t.Fatal(err)
		}
		w := goAcquire(ctx, c, p.req("m", "r2", "")) // queued at position 1
		synctest.Wait()
		first.Release(admission.ReleaseFailed)
		synctest.Wait()
		second := mustAdmit(t, "r2", w)
		g := second.Guard()
		g.Release(admission.ReleaseCancelled) // an abnormal sub-request is not hidden
		second.Release(admission.ReleaseCompleted)
		if _, err := c.Acquire(ctx, p.req("gone", "r3", "")); err == nil {
			t.Fatal("r3 admitted, want unavailable")
		}
		reqSpan.End()

		reqID := reqSpan.SpanContext().SpanID()
		var got []spanView
		for _, s := range exp.GetSpans() {
			if s.Name == "request" {
				continue
			}
			v := spanView{Name: s.Name, ChildOf: s.Parent.SpanID() == reqID, Attrs: map[string]string{}, Finished: !s.EndTime.IsZero()}
			for _, kv := range s.Attributes {
				v.Attrs[string(kv.Key)] = kv.Value.String()
			}
			got = append(got, v)
		}
		wait := func(outcome, pos, worker, queue string) spanView {
			a := map[string]string{
				"sluice.admission.outcome":        outcome,
				"sluice.admission.queue_position": pos,
				"sluice.admission.queue":          queue,
			}
			if worker != "" {
				a["sluice.admission.worker"] = worker
			}
			return spanView{Name: "sluice.admission.wait", ChildOf: true, Attrs: a, Finished: true}
		}
		slot := func(reason string) spanView {
			return spanView{Name: "sluice.admission.slot", ChildOf: true, Finished: true,
				Attrs: map[string]string{"sluice.worker": "A", "sluice.admission.release_reason": reason}}
		}
		want := []spanView{ // in end order
			wait("admitted", "0", "A", "m"),
			slot("failed"),
			wait("admitted", "1", "A", "m"),
			slot("cancelled"),
			wait("unavailable", "0", "", "gone"),
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("spans (-want +got):\n%s", diff)
		}
	})
}
