package backend

import (
	"testing"
	"time"
)

func TestStatusClasses(t *testing.T) {
	t.Parallel()
	for code := 100; code < 600; code++ {
		retry := code == 408 || code == 429 || code == 500 || code == 502 || code == 503 || code == 504
		if got := IsRetryableStatus(code); got != retry {
			t.Errorf("IsRetryableStatus(%d) = %v", code, got)
		}
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	cfg := DefaultBackoff()
	tests := []struct {
		name    string
		attempt int
		cfg     BackoffConfig
		rnd     func() float64
		want    time.Duration
	}{
		{"first, no jitter", 0, cfg, nil, 50 * time.Millisecond},
		{"third, no jitter", 2, cfg, nil, 112500 * time.Microsecond},
		{"capped", 100, cfg, nil, 30 * time.Second},
		{"huge attempt stays capped", 1 << 30, cfg, nil, 30 * time.Second},
		{"negative attempt is the first", -3, cfg, nil, 50 * time.Millisecond},
		{"lowest jitter", 0, cfg, func() float64 { return 0 }, 40 * time.Millisecond},
		{"middle jitter", 1, cfg, func() float64 { return 0.5 }, 75 * time.Millisecond},
		{"zero config takes defaults", 0, BackoffConfig{}, nil, 50 * time.Millisecond},
		{"custom", 3, BackoffConfig{Initial: time.Second, Multiplier: 2, Max: 5 * time.Second, Jitter: 0.1}, nil, 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Backoff(tt.attempt, tt.cfg, tt.rnd); got != tt.want {
				t.Errorf("Backoff() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestBackoffBounds(t *testing.T) {
	t.Parallel()
	cfg := DefaultBackoff()
	for attempt := range 30 {
		base := Backoff(attempt, cfg, nil)
		if base > cfg.Max {
			t.Fatalf("attempt %d: base %v above max", attempt, base)
		}
		if attempt > 0 && base < Backoff(attempt-1, cfg, nil) {
			t.Fatalf("attempt %d: base decreased", attempt)
		}
		for _, r := range []float64{0, 0.25, 0.5, 0.999999} {
			d := Backoff(attempt, cfg, func() float64 { return r })
			lo := time.Duration(float64(base) * (1 - cfg.Jitter))
			hi := time.Duration(float64(base) * (1 + cfg.Jitter))
			if d < lo-1 || d > hi+1 {
				t.Errorf("attempt %d r=%v: %v outside [%v, %v]", attempt, r, d, lo, hi)
			}
		}
	}
}
