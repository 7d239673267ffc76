package bench

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestPercentile(t *testing.T) {
	ten := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	tests := []struct {
		name string
		in   []float64
		q    float64
		want float64
	}{
		{"median even", ten, 0.5, 5.5},
		{"p90", ten, 0.9, 9.1},
		{"p99", ten, 0.99, 9.91},
		{"min", ten, 0, 1},
		{"max", ten, 1, 10},
		{"single", []float64{3}, 0.99, 3},
		{"median odd", []float64{1, 2, 100}, 0.5, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percentile(tt.in, tt.q); math.Abs(got-tt.want) > 1e-9 {
				t.Fatalf("Percentile(%v) = %v, want %v", tt.q, got, tt.want)
			}
		})
	}
	if got := Percentile(nil, 0.5); !math.IsNaN(got) {
		t.Fatalf("empty: got %v, want NaN", got)
	}
}

func TestPoissonSchedule(t *testing.T) {
	const rate, n = 1000.0, 200000
	p := NewPoisson(rate, 42)
	var prev time.Duration
	var sum, sumSq float64
	perSecond := map[int64]int{}
	for i := 0; i < n; i++ {
		at := p.Next()
		if at < prev {
			t.Fatalf("arrival %d at %v before the previous one at %v", i, at, prev)
		}
		gap := (at - prev).Seconds()
		sum += gap
		sumSq += gap * gap
		prev = at
		perSecond[int64(at/time.Second)]++
	}
	mean := sum / n
	cv := math.Sqrt(sumSq/n-mean*mean) / mean
	// Exponential gaps: mean 1/rate and coefficient of variation 1.
	if math.Abs(mean*rate-1) > 0.01 {
		t.Fatalf("mean gap %v s, want %v s", mean, 1/rate)
	}
	if math.Abs(cv-1) > 0.02 {
		t.Fatalf("coefficient of variation %v, want 1", cv)
	}
	// Counts per second: Poisson, so variance ≈ mean (index of dispersion 1).
	var cs, cs2 float64
	full := int64(prev / time.Second) // drop the last, partial second
	for s := int64(0); s < full; s++ {
		c := float64(perSecond[s])
		cs += c
		cs2 += c * c
	}
	cm := cs / float64(full)
	disp := (cs2/float64(full) - cm*cm) / cm
	if math.Abs(cm-rate)/rate > 0.01 || disp < 0.6 || disp > 1.4 {
		t.Fatalf("per-second counts: mean %v (want %v), dispersion %v (want about 1)", cm, rate, disp)
	}
	// Same seed, same schedule; another seed, another schedule.
	a, b, c := NewPoisson(rate, 7), NewPoisson(rate, 7), NewPoisson(rate, 8)
	differs := false
	for i := 0; i < 100; i++ {
		x, y, z := a.Next(), b.Next(), c.Next()
		if x != y {
			t.Fatalf("arrival %d: %v != %v with equal seeds", i, x, y)
		}
		differs = differs || x != z
	}
	if !differs {
		t.Fatal("another seed gave the same schedule")
	}
}

func TestSummarize(t *testing.T) {
	recs := []Record{
		{Status: 200, TTFTMS: 10, E2EMS: 40, ITLMS: []float64{1, 2}, OutputTokens: 3, Worker: "a"},
		{Status: 200, TTFTMS: 30, E2EMS: 60, ITLMS: []float64{3}, OutputTokens: 2, Worker: "b"},
		{Status: 200, TTFTMS: 500, E2EMS: 900, OutputTokens: 5, Worker: "a"},
		{Status: 429, Code: "pd_prefill_queue_full", Worker: ""},
		{Status: 200, Code: CodeTruncated, Error: "stream ended without [DONE]"},
		{Status: 0, Code: CodeConnRefused, Error: "refused"},
	}
	got := Summarize(recs, 2, 2*time.Second, 100*time.Millisecond)
	want := Summary{
		Requests: 8, Sent: 6, Succeeded: 3, Failed: 3, Dropped: 2, DurationSec: 2,
		RequestsPerSec: 1.5, OutputTokensPerSec: 5,
		TTFT:           Dist{Count: 3, Mean: 180, P50: 30, P90: 406, P99: 490.6, Max: 500},
		ITL:            Dist{Count: 3, Mean: 2, P50: 2, P90: 2.8, P99: 2.98, Max: 3},
		E2E:            Dist{Count: 3, Mean: 333.333, P50: 60, P90: 732, P99: 883.2, Max: 900},
		ScheduleLag:    Dist{Count: 6},
		SLOTTFTms:      100,
		Goodput:        0.25, // 2 of 8 offered met the SLO
		ErrorsByStatus: map[string]int{"429": 1, "200": 1, "0": 1},
		ErrorsByCode: map[string]int{"pd_prefill_queue_full": 1, CodeTruncated: 1, CodeConnRefused: 1,
			CodeDropped: 2},
		Workers: map[string]int{"a": 2, "b": 1},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("summary (-want +got):\n%s", diff)
	}
}
