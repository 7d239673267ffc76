package config

import "time"

// CapacityConfig holds the service levels the capacity recommendation
// (internal/capacity) staffs for.
type CapacityConfig struct {
	// SLOTTFT is the time to first token prefill is sized for (--slo-ttft,
	// seconds, default 0 = keep the mean queue wait within one prefill).
	SLOTTFT time.Duration
	// SLOITL is the inter-token latency decode is sized for (--slo-itl,
	// seconds, default 0 = size decode by its seat limit, if any).
	SLOITL time.Duration
}

func (s *flagSet) registerCapacity() {
	const sec = time.Second
	s.section("Capacity recommendation")
	s.dur(&s.cfg.Capacity.SLOTTFT, sec, "slo-ttft", "SECS", 0, "Time to first token the prefill recommendation (sluice_capacity_recommended_workers) is sized for, fractions allowed; 0 = a mean queue wait of at most one prefill.")
	s.dur(&s.cfg.Capacity.SLOITL, sec, "slo-itl", "SECS", 0, "Inter-token latency the decode recommendation is sized for, e.g. 0.05; 0 = size decode by --decode-max-inflight-requests-per-worker, or not at all.")
}
