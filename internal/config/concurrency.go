package config

import (
	"time"

	"github.com/sluicegw/sluice/internal/concurrency"
)

// ConcurrencyConfig is the gateway-wide concurrency limit (SMG's --max-concurrent-requests): its
// meaning and validation are internal/concurrency's; config binds the flags to its fields.
type ConcurrencyConfig = concurrency.Settings

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
	p.settings(c.Concurrency.Validate(), concurrencyFlags)
}

// concurrencyFlags name concurrency.Settings' fields as the flags that set them.
var concurrencyFlags = map[string]string{
	"QueueSize": "queue-size", "QueueTimeout": "queue-timeout-secs", "TokensPerSecond": "rate-limit-tokens-per-second",
}
