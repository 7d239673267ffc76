package admission

import (
	"testing"
	"time"
)

func TestLimiterDecide(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name    string
		limit   int
		peak    int
		samples []sample
		want    int
	}{
		// A busy worker at limit 2 whose prefills wait for one another:
		// hold 2x service, queue = 2 x (1 - 1/2) = 1: in [alpha, beta].
		{name: "steady", limit: 2, peak: 2, samples: rep(4, sample{hold: 20 * ms, service: 10 * ms, tokens: 100}), want: 2},
		// No queueing (hold = service) and the limit was reached: grow.
		{name: "grow", limit: 2, peak: 2, samples: rep(4, sample{hold: 10 * ms, service: 10 * ms, tokens: 100}), want: 3},
		// The same, but the worker never filled its limit: learn nothing.
		{name: "app limited", limit: 4, peak: 2, samples: rep(4, sample{hold: 10 * ms, service: 10 * ms, tokens: 100}), want: 4},
		// queue = 4 x (1 - 1/2) = 2 > beta: shrink by one.
		{name: "shrink", limit: 4, peak: 4, samples: rep(4, sample{hold: 20 * ms, service: 10 * ms, tokens: 100}), want: 3},
		// queue = 16 x (1 - 1/8) = 14 > 2 beta: shrink by a quarter.
		{name: "shrink fast", limit: 16, peak: 16, samples: rep(16, sample{hold: 80 * ms, service: 10 * ms, tokens: 100}), want: 12},
		// Per token: a long prompt's hold does not count as queueing.
		{name: "per token", limit: 2, peak: 2, samples: []sample{
			{hold: 1000 * ms, service: 1000 * ms, tokens: 10000}, {hold: 10 * ms, service: 10 * ms, tokens: 100},
			{hold: 10 * ms, service: 10 * ms, tokens: 100}, {hold: 10 * ms, service: 10 * ms, tokens: 100}}, want: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := &limiter{limit: tt.limit}
			l.noteGrant(tt.peak)
			changed := false
			for i, s := range tt.samples {
				c := l.observe(s, 1, 64)
				if c && i != len(tt.samples)-1 {
					t.Fatalf("changed after %d samples, before the round ended", i+1)
				}
				changed = changed || c
			}
			if l.limit != tt.want || changed != (tt.want != tt.limit) {
				t.Errorf("limit %d (changed %v), want %d", l.limit, changed, tt.want)
			}
		})
	}
}

func TestLimiterClampsToRange(t *testing.T) {
	l := &limiter{limit: 4}
	l.noteGrant(4)
	for range 4 {
		l.observe(sample{hold: time.Millisecond, service: time.Millisecond, tokens: 1}, 1, 4)
	}
	if l.limit != 4 {
		t.Errorf("grew to %d beyond max 4", l.limit)
	}
	l = &limiter{limit: 2}
	l.noteGrant(2)
	for range 4 {
		l.observe(sample{hold: time.Second, service: time.Millisecond, tokens: 1}, 2, 8)
	}
	if l.limit != 2 {
		t.Errorf("shrank to %d below min 2", l.limit)
	}
}

func rep(n int, s sample) []sample {
	out := make([]sample, n)
	for i := range out {
		out[i] = s
	}
	return out
}
