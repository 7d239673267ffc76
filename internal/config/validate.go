package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrInvalid is wrapped by every error Validate reports.
var ErrInvalid = errors.New("invalid configuration")

// Validate reports every problem of c, one per line (errors.Join of errors
// wrapping ErrInvalid), each naming the flag (= YAML key) at fault. It
// returns nil when c is usable.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, a...)...))
	}
	port := func(name string, v, lowest int) {
		if v < lowest || v > 65535 {
			bad("--%s must be between %d and 65535, got %d", name, lowest, v)
		}
	}
	nonNegDur := func(name string, d time.Duration) {
		if d < 0 {
			bad("--%s must not be negative, got %v", name, d)
		}
	}
	posDur := func(name string, d time.Duration) {
		if d <= 0 {
			bad("--%s must be positive, got %v", name, d)
		}
	}
	atLeast := func(name string, v, lowest int) {
		if v < lowest {
			bad("--%s must be at least %d, got %d", name, lowest, v)
		}
	}

	// Server.
	port("port", c.Server.Port, 0) // 0 picks a free port (tests, embedding)
	port("admin-port", c.Server.AdminPort, 0)
	if c.Server.AdminPort != 0 && c.Server.AdminPort == c.Server.Port {
		bad("--admin-port %d equals --port; use --admin-port 0 to serve the admin API on the main port", c.Server.AdminPort)
	}
	nonNegDur("shutdown-grace-period-secs", c.Server.ShutdownGracePeriod)
	nonNegDur("request-timeout-secs", c.Server.RequestTimeout)
	if c.Server.MaxPayloadSize <= 0 {
		bad("--max-payload-size must be positive, got %d", c.Server.MaxPayloadSize)
	}

	errs = append(errs, c.validateSecurity()...)
	errs = append(errs, c.validateSMG()...)
	errs = append(errs, c.validateTenants()...)

	// Telemetry.
	if _, ok := logLevelName(c.Telemetry.LogLevel); !ok {
		bad("--log-level must be one of debug, info, warn, error, got %v", c.Telemetry.LogLevel)
	}
	if e := c.Telemetry.OTLPTracesEndpoint; e != "" {
		if err := checkOTLPEndpoint(e); err != nil {
			bad("--otlp-traces-endpoint %q: %v", e, err)
		}
	}
	if r := c.Telemetry.TraceSampleRatio; !(r >= 0 && r <= 1) {
		bad("--trace-sample-ratio must be between 0 and 1, got %v", r)
	}

	// Workers and mode.
	if c.Workers.DPSize < 0 || c.Workers.DPSize > 1024 {
		bad("--dp-size: want 0..1024, got %d", c.Workers.DPSize)
	}
	if kc := c.Workers.KVConnector; kc != "nixl" && kc != "mooncake" {
		bad("--kv-connector: want nixl or mooncake, got %q", kc)
	}
	if rt := c.Workers.Runtime; rt != ProtocolSGLang && rt != ProtocolVLLM {
		bad("--runtime must be sglang or vllm, got %q", rt)
	}
	errs = append(errs, c.validateWorkers()...)
	errs = append(errs, c.validateDiscovery()...)
	errs = append(errs, c.validateCluster()...)

	// Placement.
	for _, p := range []struct{ name, value string }{
		{"policy", c.Placement.Policy},
		{"prefill-policy", c.Placement.PrefillPolicy},
		{"decode-policy", c.Placement.DecodePolicy},
	} {
		// An empty PD policy means "same as --policy" (hand-built configs);
		// one equal to --policy was inherited and is reported once, there.
		if p.name != "policy" && (p.value == "" || p.value == c.Placement.Policy) {
			continue
		}
		if msg := smgPolicyError(p.name, p.value); msg != "" {
			bad("%s", msg)
		} else if !slices.Contains(PolicyNames(), p.value) {
			bad("--%s %q is not a policy; valid: %s", p.name, p.value, strings.Join(PolicyNames(), ", "))
		}
	}
	if t := c.Placement.CacheThreshold; !(t >= 0 && t <= 1) {
		bad("--cache-threshold must be between 0 and 1, got %v", t)
	}
	atLeast("balance-abs-threshold", c.Placement.BalanceAbsThreshold, 0)
	if t := c.Placement.BalanceRelThreshold; !(t >= 0) {
		bad("--balance-rel-threshold must not be negative, got %v", t)
	}
	atLeast("max-tree-size", c.Placement.MaxTreeSize, 1)
	posDur("eviction-interval-secs", c.Placement.EvictionInterval)
	atLeast("virtual-nodes", c.Placement.VirtualNodes, 1)

	// Admission.
	d := Default().Admission
	a := c.Admission
	if a.Enabled() {
		if c.Mode() != ModePD && a.PrefillBounded() {
			bad("%s needs --pd-disaggregation: admission bounds prefill workers, which exist only in PD mode", a.enabledBy())
		}
	} else {
		if c.explicit["prefill-queue-size"] || a.QueueSize != d.QueueSize {
			bad("--prefill-queue-size is set but admission is off; it needs a positive --prefill-max-inflight-requests-per-worker")
		}
		if c.explicit["prefill-queue-timeout-secs"] || a.QueueTimeout != d.QueueTimeout {
			bad("--prefill-queue-timeout-secs is set but admission is off; it needs a positive --prefill-max-inflight-requests-per-worker")
		}
		if len(a.PriorityBands) > 0 {
			bad("--prefill-priority-bands is set but admission is off; it needs a positive --prefill-max-inflight-requests-per-worker or --prefill-max-inflight-tokens-per-worker")
		}
		if c.explicit["prefill-priority-aging-secs"] || a.PriorityAging != d.PriorityAging {
			bad("--prefill-priority-aging-secs is set but admission is off")
		}
		if a.EarlyRejection {
			bad("--prefill-early-rejection is set but admission is off")
		}
		if c.Load.OverloadWaitingRequests >= 0 {
			bad("--worker-overload-waiting-requests is set but admission is off: an overloaded engine counts as at capacity for admission")
		}
	}
	if a.MaxInflightTokensPerWorker <= 0 && (c.explicit["prefill-token-estimate-chars-per-token"] || a.CharsPerToken != d.CharsPerToken) {
		bad("--prefill-token-estimate-chars-per-token is set but there is no token budget; it needs --prefill-max-inflight-tokens-per-worker")
	}
	if f := a.CharsPerToken; !(f > 0 && f <= 64) {
		bad("--prefill-token-estimate-chars-per-token must be in (0, 64], got %v", f)
	}
	if len(a.PriorityBands) > 8 {
		bad("--prefill-priority-bands: at most 8 bands, got %d", len(a.PriorityBands))
	}
	seenBand := map[string]bool{}
	for i, b := range a.PriorityBands {
		if !validBandName(b.Name) {
			bad("--prefill-priority-bands: band name %q must be 1-32 characters of a-z, 0-9, _ or -", b.Name)
		}
		if seenBand[b.Name] {
			bad("--prefill-priority-bands: band %q given twice", b.Name)
		}
		seenBand[b.Name] = true
		if i > 0 && b.MinPriority <= a.PriorityBands[i-1].MinPriority {
			bad("--prefill-priority-bands: band %q starts at %d, not above the previous band's %d (list bands lowest first)",
				b.Name, b.MinPriority, a.PriorityBands[i-1].MinPriority)
		}
	}
	if a.PriorityAging <= 0 {
		bad("--prefill-priority-aging-secs must be positive, got %v (aging keeps low bands from starving)", a.PriorityAging)
	}
	if (a.AdaptiveMin != 0 || a.AdaptiveMax != 0) && (a.AdaptiveMin < 1 || a.AdaptiveMax < a.AdaptiveMin) {
		bad("--prefill-adaptive-limit %d:%d must have 1 <= MIN <= MAX", a.AdaptiveMin, a.AdaptiveMax)
	}

	// Decode seats.
	if a.SeatsOn() && c.Mode() != ModePD {
		bad("--decode-max-inflight-requests-per-worker needs --pd-disaggregation: decode seats bound decode workers, which exist only in PD mode")
	}
	if !a.SeatsOn() {
		if c.Load.DecodeOverloadWaitingRequests >= 0 {
			bad("--decode-overload-waiting-requests is set but decode seats are off; it needs --decode-max-inflight-requests-per-worker N or auto")
		}
		if c.Load.DecodeMaxKVUsage != 0 {
			bad("--decode-max-kv-usage is set but decode seats are off; it needs --decode-max-inflight-requests-per-worker N or auto")
		}
	}
	if a.DecodeWindow != 0 && !a.DecodeAuto {
		bad("--decode-window is used only by --decode-max-inflight-requests-per-worker auto")
	}
	if a.DecodeWindow < 0 || a.DecodeWindow > 1<<20 {
		bad("--decode-window: want 0..%d, got %d", 1<<20, a.DecodeWindow)
	}
	if t := a.LocalPrefillMaxTokens; t < 0 || t > 1<<24 {
		bad("--pd-local-prefill-max-tokens: want 0..%d, got %d", 1<<24, t)
	}
	if a.LocalPrefillMaxTokens > 0 && c.Mode() != ModePD {
		bad("--pd-local-prefill-max-tokens needs --pd-disaggregation: it skips the prefill leg of PD requests")
	}
	if r := c.Workers.DecodeKVRole; r != "" && r != "kv_both" {
		bad("--decode-kv-role: want kv_both or empty, got %q", r)
	}
	if f := c.Load.DecodeMaxKVUsage; !(f >= 0 && f <= 1) {
		bad("--decode-max-kv-usage must be a fraction in [0, 1] (0 = off), got %v", f)
	}
	atLeast("decode-overload-waiting-requests", c.Load.DecodeOverloadWaitingRequests, -1)

	// Engine load.
	if c.Load.Interval < 0 {
		bad("--engine-load-interval-secs must be >= 0, got %v", c.Load.Interval.Seconds())
	} else if c.Load.Interval == 0 && c.loadIntervalGiven() && c.loadsDecide() {
		bad("--engine-load-interval-secs 0 turns engine load polling off, but least_load or --worker-overload-waiting-requests reads the loads")
	}
	atLeast("worker-overload-waiting-requests", c.Load.OverloadWaitingRequests, -1)
	atLeast("prefill-queue-size", c.Admission.QueueSize, 0)
	if c.Admission.QueueTimeout <= 0 {
		bad("--prefill-queue-timeout-secs must be positive, got %v (use --prefill-queue-size 0 to never wait)", c.Admission.QueueTimeout)
	}

	// Health.
	posDur("health-check-interval-secs", c.Health.Interval)
	posDur("health-check-timeout-secs", c.Health.Timeout)
	atLeast("health-success-threshold", c.Health.SuccessThreshold, 1)
	atLeast("health-failure-threshold", c.Health.FailureThreshold, 1)
	if ep := c.Health.Endpoint; !strings.HasPrefix(ep, "/") || strings.ContainsAny(ep, " ?#") {
		bad("--health-check-endpoint must be a path starting with \"/\", got %q", ep)
	}

	// Circuit breaker.
	atLeast("cb-failure-threshold", c.Breaker.FailureThreshold, 1)
	atLeast("cb-success-threshold", c.Breaker.SuccessThreshold, 1)
	posDur("cb-timeout-duration-secs", c.Breaker.Timeout)

	// Retries.
	atLeast("retry-max-retries", c.Retry.MaxRetries, 1)
	nonNegDur("retry-initial-backoff-ms", c.Retry.InitialBackoff)
	nonNegDur("retry-max-backoff-ms", c.Retry.MaxBackoff)
	nonNegDur("slo-ttft", c.Capacity.SLOTTFT)
	nonNegDur("slo-itl", c.Capacity.SLOITL)
	if c.Retry.MaxBackoff < c.Retry.InitialBackoff {
		bad("--retry-max-backoff-ms (%v) must not be below --retry-initial-backoff-ms (%v)", c.Retry.MaxBackoff, c.Retry.InitialBackoff)
	}
	if m := c.Retry.BackoffMultiplier; !(m >= 1) {
		bad("--retry-backoff-multiplier must be at least 1, got %v", m)
	}
	if j := c.Retry.JitterFactor; !(j >= 0 && j <= 1) {
		bad("--retry-jitter-factor must be between 0 and 1, got %v", j)
	}
	c.validateKVEvents(bad) // kvevents.go

	return errors.Join(errs...)
}

// validateWorkers checks the initial workers against each other and the mode.
func (c *Config) validateWorkers() []error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, a...)...))
	}
	var regular, pd bool
	seen := map[string]bool{}
	for _, w := range c.Workers.Initial {
		flagName := map[string]string{RoleRegular: "worker-urls", RolePrefill: "prefill", RoleDecode: "decode"}[w.Role]
		if flagName == "" {
			bad("worker %q: role must be regular, prefill or decode, got %q", redactURL(w.URL), w.Role)
			continue
		}
		if w.Role == RoleRegular {
			regular = true
		} else {
			pd = true
		}
		if err := checkWorkerURL(w.URL); err != nil {
			bad("--%s %q: %v", flagName, redactURL(w.URL), err)
			continue
		}
		if seen[w.URL] {
			bad("--%s %q: worker given more than once", flagName, redactURL(w.URL))
		}
		seen[w.URL] = true
		isGRPC := strings.HasPrefix(strings.ToLower(w.URL), "grpc://") || strings.HasPrefix(strings.ToLower(w.URL), "grpcs://")
		switch {
		case w.Protocol != "" && w.Protocol != ProtocolSGLang && w.Protocol != ProtocolVLLM && w.Protocol != ProtocolGRPC:
			bad("--%s %q: protocol must be sglang, vllm or grpc, got %q", flagName, redactURL(w.URL), w.Protocol)
		case isGRPC != (w.Protocol == ProtocolGRPC):
			bad("--%s %q: protocol grpc goes with grpc:// and grpcs:// URLs only, got protocol %q", flagName, redactURL(w.URL), w.Protocol)
		}
		if w.BootstrapPort != 0 {
			if w.Role != RolePrefill {
				bad("--%s %q: only prefill workers have a bootstrap port", flagName, redactURL(w.URL))
			} else if w.BootstrapPort < 0 || w.BootstrapPort > 65535 {
				bad("--prefill %q: bootstrap port must be between 1 and 65535, got %d", redactURL(w.URL), w.BootstrapPort)
			}
		}
	}
	switch {
	case regular && pd:
		bad("--worker-urls cannot be combined with --prefill/--decode")
	case regular && c.Mode() == ModePD:
		bad("--worker-urls cannot be used with --pd-disaggregation; give workers with --prefill and --decode")
	}
	if pd && c.Mode() != ModePD {
		bad("--prefill/--decode need --pd-disaggregation")
	}
	return errs
}

// validBandName: band names are metric labels and span attributes.
func validBandName(n string) bool {
	if n == "" || len(n) > 32 {
		return false
	}
	for _, r := range n {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '_' && r != '-' {
			return false
		}
	}
	return true
}

// checkWorkerURL accepts http, https and grpc URLs with a host, an optional
// port, and (http(s) only) a path prefix.
func checkWorkerURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return errors.New("not a URL")
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
	case "grpc", "grpcs":
		if u.Path != "" {
			return errors.New("a grpc:// or grpcs:// URL has no path")
		}
	case "":
		return errors.New("missing scheme (want http://, https://, grpc:// or grpcs://)")
	default:
		return fmt.Errorf("scheme %q not supported (want http, https, grpc or grpcs)", u.Scheme)
	}
	if u.Hostname() == "" {
		return errors.New("missing host")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %q out of range", p)
		}
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return errors.New("a worker URL has no query or fragment")
	}
	return nil
}

// checkOTLPEndpoint accepts host:port or an http(s) URL with a host.
func checkOTLPEndpoint(s string) error {
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		if err != nil {
			return errors.New("not a URL")
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return fmt.Errorf("scheme %q not supported (want http or https)", u.Scheme)
		}
		if u.Hostname() == "" {
			return errors.New("missing host")
		}
		return nil
	}
	host, p, err := net.SplitHostPort(s)
	if err != nil {
		return errors.New("want host:port or a URL")
	}
	if host == "" {
		return errors.New("missing host")
	}
	if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q out of range", p)
	}
	return nil
}
