package backend

import (
	"math"
	"net/http"
	"time"
)

// IsRetryableStatus reports whether an upstream status is worth another attempt on a (possibly
// different) worker: 408, 429, 500, 502, 503, 504. The gateway's own admission 429s never reach this
// question: they are answered to the client directly.
func IsRetryableStatus(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// BackoffConfig shapes retry delays. Zero fields take DefaultBackoff()'s values (Jitter 0 included: use
// a tiny positive value for "almost none").
type BackoffConfig struct {
	Initial    time.Duration
	Multiplier float64
	Max        time.Duration
	// Jitter is the relative spread: the delay is scaled by a uniform factor in [1-Jitter, 1+Jitter].
	Jitter float64
}

// DefaultBackoff is the Rust gateway's retry backoff: 50ms x 1.5^attempt, at most 30s, ±20%.
func DefaultBackoff() BackoffConfig {
	return BackoffConfig{Initial: 50 * time.Millisecond, Multiplier: 1.5, Max: 30 * time.Second, Jitter: 0.2}
}

func (c BackoffConfig) withDefaults() BackoffConfig {
	d := DefaultBackoff()
	if c.Initial <= 0 {
		c.Initial = d.Initial
	}
	if c.Multiplier < 1 {
		c.Multiplier = d.Multiplier
	}
	if c.Max <= 0 {
		c.Max = d.Max
	}
	if c.Jitter <= 0 {
		c.Jitter = d.Jitter
	}
	c.Jitter = min(c.Jitter, 1)
	c.Max = max(c.Max, c.Initial)
	return c
}

// Backoff returns the delay before retry number attempt (0 for the first retry):
// min(Initial x Multiplier^attempt, Max), scaled by a factor in [1-Jitter, 1+Jitter] drawn from rnd
// (uniform in [0,1), e.g. (*math/rand/v2.Rand).Float64; nil means no jitter).
func Backoff(attempt int, cfg BackoffConfig, rnd func() float64) time.Duration {
	c := cfg.withDefaults()
	attempt = max(attempt, 0)
	d := float64(c.Initial) * math.Pow(c.Multiplier, float64(attempt))
	d = min(d, float64(c.Max))
	if rnd != nil {
		d *= 1 + c.Jitter*(2*rnd()-1)
	}
	return time.Duration(d)
}
