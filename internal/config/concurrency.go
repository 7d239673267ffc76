package config

import "time"

// ConcurrencyConfig is the gateway-wide concurrency limit (SMG's --max-concurrent-requests): a
// bucket of MaxConcurrent tokens, one taken by each inference request for its whole life (streaming
// included) and given back when it ends, optionally also refilled at TokensPerSecond. Requests that
// find no token wait in a FIFO queue; a full queue answers 429, a wait past QueueTimeout 408.
type ConcurrencyConfig struct {
	// MaxConcurrent is the bucket's capacity (--max-concurrent-requests, default -1; <= 0 = off).
	MaxConcurrent int
	// QueueSize bounds the waiting requests (--queue-size, default 100; 0 = reject at once).
	QueueSize int
	// QueueTimeout bounds one request's wait (--queue-timeout-secs, default 60s).
	QueueTimeout time.Duration
	// TokensPerSecond refills the bucket besides the tokens requests give back
	// (--rate-limit-tokens-per-second, default 0 = no refill: a pure concurrency bound).
	TokensPerSecond int
}

// Enabled reports whether the limit is on.
func (c ConcurrencyConfig) Enabled() bool { return c.MaxConcurrent > 0 }

func (s *flagSet) registerConcurrency() {
	c := &s.cfg.Concurrency
	s.section("Gateway concurrency limit (all inference routes, regular and PD mode)")
	s.int(&c.MaxConcurrent, "max-concurrent-requests", "N", -1, "Requests in flight at once through the whole gateway, streaming included; <= 0 = off. Composes with prefill admission: a request holds its gateway slot for its whole life and a prefill slot only during its prefill.")
	s.int(&c.QueueSize, "queue-size", "N", 100, "Requests that may wait for a gateway slot; 0 = reject at once (429). Ignored while the limit is off, as in SMG.")
	s.dur(&c.QueueTimeout, time.Second, "queue-timeout-secs", "SECS", 60*time.Second, "Longest wait for a gateway slot; then 408. Ignored while the limit is off.")
	s.int(&c.TokensPerSecond, "rate-limit-tokens-per-second", "N", 0, "Also refill the gateway's bucket at N tokens/s (SMG's token bucket); 0 = no refill, a pure concurrency bound.")
}

// validateConcurrency checks the gateway limit. Unlike prefill admission's queue flags, its queue
// flags are accepted without a limit and then ignored, as SMG does: its Helm chart always passes them
// (with --max-concurrent-requests -1).
func (c *Config) validateConcurrency(p *problems) {
	cc := c.Concurrency
	if cc.QueueSize < 0 {
		p.add("--queue-size must be at least 0, got %d", cc.QueueSize)
	}
	if cc.QueueTimeout <= 0 {
		p.add("--queue-timeout-secs must be positive, got %v (use --queue-size 0 to never wait)", cc.QueueTimeout)
	}
	if cc.TokensPerSecond < 0 {
		p.add("--rate-limit-tokens-per-second must be at least 0, got %d", cc.TokensPerSecond)
	}
}
