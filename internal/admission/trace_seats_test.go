package admission_test

import (
	"errors"
	"testing"
	"testing/synctest"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicegw/sluice/internal/admission"
)

// spanAttrs returns the attributes of every ended span of name, in end order.
func spanAttrs(exp *tracetest.InMemoryExporter, name string) []map[string]string {
	var out []map[string]string
	for _, sp := range exp.GetSpans() {
		if sp.Name != name {
			continue
		}
		m := map[string]string{}
		for _, kv := range sp.Attributes {
			m[string(kv.Key)] = kv.Value.String()
		}
		out = append(out, m)
	}
	return out
}

// The wait span names the side that held the request back and the decode worker; the seat has a span
// of its own, ended with its release reason.
func TestWaitSpanNamesTheSide(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		defer func() { _ = tp.Shutdown(bg) }()
		p := newPairPlacement([]string{"P0", "P1"}, []string{"D0"})
		c := mustNew(t, seatsOn(1, 1, 0), admission.Deps{Tracer: tp.Tracer("test")})
		a, err := c.Acquire(bg, p.req("a", ""))
		if err != nil {
			t.Fatal(err)
		}
		a.Release(admission.ReleaseCompleted) // prefill over; the decode holds the seat
		if _, err := c.Acquire(bg, p.req("b", "")); !errors.Is(err, admission.ErrDecodeQueueFull) {
			t.Fatalf("b: %v", err)
		}
		a.Seat().Release(admission.ReleaseFailed)
		waits := spanAttrs(exp, "sluice.admission.wait")
		if len(waits) != 2 {
			t.Fatalf("%d wait spans, want 2", len(waits))
		}
		if w := waits[0]; w["sluice.admission.decode_worker"] != "D0" || w["sluice.admission.worker"] != "P0" {
			t.Errorf("admitted wait span %v, want worker P0 and decode worker D0", w)
		}
		if w := waits[1]; w["sluice.admission.side"] != "decode" || w["sluice.admission.outcome"] != "decode_queue_full" {
			t.Errorf("rejected wait span %v, want side decode, outcome decode_queue_full", w)
		}
		seats := spanAttrs(exp, "sluice.admission.seat")
		if len(seats) != 1 || seats[0]["sluice.worker"] != "D0" || seats[0]["sluice.admission.release_reason"] != "failed" {
			t.Errorf("seat spans %v, want one on D0 released as failed", seats)
		}
	})
}
