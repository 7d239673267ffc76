package admission

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// With aging, the head is the best-ranked of all waiters (highest effective
// band, then the oldest), though bands compares only the front of each
// band; ranked and outranks count as that ranking does; and a waiter's
// effective band reaches the top after (top - band) x Aging.
func TestPropertyBandsRankWithAging(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 4).Draw(rt, "bands")
		s := Settings{Bands: make([]Band, n), Aging: time.Duration(rapid.IntRange(0, 3).Draw(rt, "aging")) * time.Second}
		r := &orderRig{now: time.Unix(1000, 0)}
		b := &bands{s: &s, now: func() time.Time { return r.now }}
		r.o = b
		for range rapid.IntRange(1, 150).Draw(rt, "ops") {
			r.now = r.now.Add(time.Duration(rapid.IntRange(0, 1500).Draw(rt, "ms")) * time.Millisecond)
			r.step(rt, 1, n)
			var best *waiter
			for _, w := range r.waiting {
				eb := b.effBand(w, r.now)
				if want := min(w.band+aged(s.Aging, r.now.Sub(w.enq)), n-1); eb != want {
					rt.Fatalf("effective band %d, want %d", eb, want)
				}
				if best == nil || eb > b.effBand(best, r.now) || eb == b.effBand(best, r.now) && w.seq < best.seq {
					best = w
				}
			}
			if h := b.head(); h != best {
				rt.Fatalf("head %s, want %s", desc(h), desc(best))
			}
			for band := range n {
				want, out := 0, best != nil && band > b.effBand(best, r.now)
				for _, w := range r.waiting {
					if b.effBand(w, r.now) >= band {
						want++
					}
				}
				if got := b.ranked(band); got != want {
					rt.Fatalf("ranked(%d) = %d, want %d", band, got, want)
				}
				if got := b.outranks(band); got != (out && n > 1) {
					rt.Fatalf("outranks(%d) = %v, want %v", band, got, out && n > 1)
				}
			}
		}
	})
}

// aged is the bands a wait of d lifts a waiter by.
func aged(aging, d time.Duration) int {
	if aging <= 0 {
		return 0
	}
	return int(d / aging)
}

func desc(w *waiter) string {
	if w == nil {
		return "none"
	}
	return fmt.Sprintf("#%d (band %d)", w.seq, w.band)
}
