package cli

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
)

// Right after a burst the recommendation holds the peak (5) while the load now needs 1 and 2 workers
// are registered: the output names each count, says how the recommendation follows from them, and
// its sentences agree with the table (no unlabeled CURRENT/TARGET, no "1 workers").
func TestCapacityAfterBurstExplainsEachCount(t *testing.T) {
	t.Parallel()
	r := &adminv1.GetCapacityResponse{Enabled: true, ScaleDownHold: durationpb.New(5 * time.Minute),
		Recommendations: []*adminv1.CapacityRecommendation{{
			Model: "m", Role: "prefill", RecommendedWorkers: 5, CurrentWorkers: 2, TargetWorkers: 1, BusyWorkers: 0, Sized: true,
			ScaleDownAt: "2026-12-05T00:10:00Z",
			Reason:      "0.50 req/s × 400 prompt tokens at 8000 tokens per busy worker-second is 0.03 busy workers (Little's law, service 0.050s); Erlang C: 1 worker keeps wait plus service within the 1s TTFT SLO; holding 5 until 00:10:00 before scaling down to 1",
		}, {
			Model: "m", Role: "decode", RecommendedWorkers: 1, CurrentWorkers: 1, Sized: false,
			Reason: "decode is not sized: no --slo-itl and no decode seat limit; keeping the current count",
		}}}
	var out bytes.Buffer
	if err := printCapacity(&out, r); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	t.Log(got)
	lines := strings.Split(got, "\n")
	var table []string // the table's rows, single-spaced
	for _, l := range lines[2:5] {
		table = append(table, strings.Join(strings.Fields(l), " "))
	}
	if want := []string{"MODEL ROLE RECOMMENDED REGISTERED NEEDED-NOW BUSY-NOW CHANGE", "m prefill 5 2 1 0 add 3", "m decode 1 1 - 0 keep"}; !slices.Equal(table, want) {
		t.Errorf("table %q, want %q", table, want)
	}
	for _, want := range []string{
		"RECOMMENDED: workers to scale to", "NEEDED-NOW: what the measured load asks for at this instant",
		"m prefill: recommended 5 workers (2 registered). The load now needs 1 worker; the recommendation keeps the recent peak until 2026-12-05T00:10:00Z",
		"m decode: recommended 1 worker (1 registered). Why: decode is not sized",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(got, "1 workers") || strings.Contains(got, "CURRENT") || strings.Contains(got, "TARGET") {
		t.Errorf("output has an unlabeled or disagreeing count:\n%s", got)
	}
}
