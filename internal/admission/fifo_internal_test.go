package admission

import (
	"testing"

	"pgregory.net/rapid"
)

// fifo's head is always the oldest waiter left, and a newcomer is served
// after every waiter.
func TestPropertyFIFOServesInArrivalOrder(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		f := &fifo{}
		r := &orderRig{o: f}
		for range rapid.IntRange(1, 200).Draw(rt, "ops") {
			r.step(rt, 3, 1)
			if f.len() != len(r.waiting) {
				rt.Fatalf("len %d, want %d", f.len(), len(r.waiting))
			}
			if len(r.waiting) == 0 {
				if f.head() != nil {
					rt.Fatal("an empty fifo has a head")
				}
				continue
			}
			if h := f.head(); h != r.waiting[0] {
				rt.Fatalf("head %d, want the oldest %d", h.seq, r.waiting[0].seq)
			}
			if got := f.ahead(newcomer{tenant: "t0"}); got != len(r.waiting) {
				rt.Fatalf("ahead %d, want %d", got, len(r.waiting))
			}
		}
	})
}
