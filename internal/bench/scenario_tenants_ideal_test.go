package bench

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestIdealGateMatchesTheory checks the model against what queueing theory says when quiet requests
// seldom meet each other and every prefill is T long: alone, a quiet request is served at once (TTFT
// T); under the flood it waits for the first of n running prefills, whose remainders are uniform on
// [0, T] (each quiet request shifts the phase of the slot it takes), so its wait is above x with
// probability (1 - x/T)^n and the p99 of the TTFT is T(2 - 0.01^(1/n)). The prefill times vary by 2%
// so that the slots' phases drift apart, as they do on a real machine (with equal times, slots that
// once end together stay in step).
func TestIdealGateMatchesTheory(t *testing.T) {
	const T = 0.128
	fixed := func(r *rand.Rand) float64 { return T * (0.99 + 0.02*r.Float64()) }
	for _, n := range []int{2, 4, 8} {
		flood, alone := idealGate(n, 0.2, fixed, 5000, 3, false)
		t.Logf("%d slots: p99 %.4f s alone, %.4f s under the flood", n, alone, flood)
		if math.Abs(alone-T)/T > 0.02 {
			t.Errorf("%d slots: alone p99 %.4f s, want %.4f", n, alone, T)
		}
		want := T * (2 - math.Pow(0.01, 1/float64(n)))
		if math.Abs(flood-want)/want > 0.03 {
			t.Errorf("%d slots: flood p99 %.4f s, want %.4f", n, flood, want)
		}
	}
	// Load of their own makes quiet requests wait for each other too: more so under the flood, where a
	// slot frees only when a prefill ends.
	flood, alone := idealGate(4, 12.5, fixed, 50000, 3, false)
	if !(alone > T && flood > alone) {
		t.Errorf("1.6 Erlangs of quiet load: p99 %.4f s alone, %.4f s under the flood", alone, flood)
	}
	if f2, a2 := idealGate(4, 12.5, fixed, 50000, 3, false); f2 != flood || a2 != alone {
		t.Error("not deterministic")
	}
	// Arrival order is what minimises the tail of a wait; any other order lengthens it.
	if rf, _ := idealGate(4, 12.5, fixed, 50000, 3, true); !(rf > flood) {
		t.Errorf("random order: flood p99 %.4f s, arrival order %.4f s", rf, flood)
	}
}
