package admission_test

import (
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicegw/sluice/internal/admission"
)

func TestWaitSpanCarriesBandAndTokens(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(bg) }()
	p := newPlacement(map[string][]string{"m": {"A"}})
	s := admission.Settings{MaxInflightTokensPerWorker: 100, QueueSize: 0, Bands: threeBands, Aging: time.Second}
	c := mustNew(t, s, admission.Deps{Tracer: tp.Tracer("test")})
	slot, err := c.Acquire(bg, tok(prio(p.req("m", "r", ""), 42), 80))
	if err != nil {
		t.Fatal(err)
	}
	slot.Release(admission.ReleaseCompleted)
	var got map[string]string
	for _, sp := range exp.GetSpans() {
		if sp.Name == "sluice.admission.wait" {
			got = map[string]string{}
			for _, kv := range sp.Attributes {
				got[string(kv.Key)] = kv.Value.String()
			}
		}
	}
	if got["sluice.admission.band"] != "high" || got["sluice.admission.tokens"] != "80" {
		t.Errorf("wait span attributes %v, want band high and tokens 80", got)
	}
}
