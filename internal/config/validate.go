package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluicegw/sluice/internal/fielderr"
	"github.com/sluicegw/sluice/internal/placement"
)

// ErrInvalid is wrapped by every error Validate reports.
var ErrInvalid = errors.New("invalid configuration")

// problems collects every validation problem, each an error wrapping ErrInvalid that names the
// flag (= YAML key) at fault; Validate joins them, one per line.
type problems []error

func (p *problems) add(format string, a ...any) {
	*p = append(*p, fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, a...)...))
}

func (p *problems) port(name string, v, lowest int) {
	if v < lowest || v > 65535 {
		p.add("--%s must be between %d and 65535, got %d", name, lowest, v)
	}
}

func (p *problems) nonNegDur(name string, d time.Duration) {
	if d < 0 {
		p.add("--%s must not be negative, got %v", name, d)
	}
}

func (p *problems) posDur(name string, d time.Duration) {
	if d <= 0 {
		p.add("--%s must be positive, got %v", name, d)
	}
}

// together reports two flags of which only one is given.
func (p *problems) together(a, b, av, bv string) {
	if (av == "") != (bv == "") {
		p.add("--%s and --%s go together", a, b)
	}
}

func (p *problems) atLeast(name string, v, lowest int) {
	if v < lowest {
		p.add("--%s must be at least %d, got %d", name, lowest, v)
	}
}

// Validate reports every problem of c, one per line (errors.Join of errors
// wrapping ErrInvalid), each naming the flag (= YAML key) at fault. It
// returns nil when c is usable.
func (c *Config) Validate() error {
	var p problems
	c.validateServer(&p)
	c.validateSecurity(&p)    // security.go
	c.validateConcurrency(&p) // concurrency.go
	c.validateTenants(&p)     // tenants.go
	c.validateTelemetry(&p)
	c.validateWorkers(&p)
	c.validateDiscovery(&p) // discovery.go
	c.validateAliases(&p)   // aliases.go
	c.validatePairing(&p)   // topology.go
	c.validateCluster(&p)   // cluster.go
	c.validatePlacement(&p)
	c.validateAdmission(&p)
	c.validateDecodeSeats(&p)
	c.validateLoad(&p)
	c.validateHealth(&p)
	c.validateRetry(&p)
	c.validateKVEvents(&p) // kvevents.go
	return errors.Join(p...)
}

func (c *Config) validateServer(p *problems) {
	sv := c.Server
	p.port("port", sv.Port, 0) // 0 picks a free port (tests, embedding)
	p.port("admin-port", sv.AdminPort, 0)
	if sv.AdminPort != 0 && sv.AdminPort == sv.Port {
		p.add("--admin-port %d equals --port; use --admin-port 0 to serve the admin API on the main port", sv.AdminPort)
	}
	p.nonNegDur("shutdown-grace-period-secs", sv.ShutdownGracePeriod)
	p.nonNegDur("request-timeout-secs", sv.RequestTimeout)
	if sv.MaxPayloadSize <= 0 {
		p.add("--max-payload-size must be positive, got %d", sv.MaxPayloadSize)
	}
	if sv.HealthCheckPort < 0 || sv.HealthCheckPort > 65535 {
		p.add("--health-check-port must be between 1 and 65535 (0 = off), got %d", sv.HealthCheckPort)
	}
	if sv.HealthCheckPort > 0 && (sv.HealthCheckPort == sv.Port || sv.HealthCheckPort == sv.AdminPort || sv.HealthCheckPort == c.Telemetry.MetricsPort) {
		p.add("--health-check-port %d is already taken by another listener", sv.HealthCheckPort)
	}
	if len(sv.RequestIDHeaders) == 0 {
		p.add("--request-id-headers needs at least one header name")
	}
	if sv.RuntimeWorkerThreads < 0 {
		p.add("--runtime-worker-threads must not be negative, got %d", sv.RuntimeWorkerThreads)
	}
}

func (c *Config) validateTelemetry(p *problems) {
	t := c.Telemetry
	if _, ok := logLevelName(t.LogLevel); !ok {
		p.add("--log-level must be one of debug, info, warn, error, got %v", t.LogLevel)
	}
	if e := t.OTLPTracesEndpoint; e != "" {
		if err := checkOTLPEndpoint(e); err != nil {
			p.add("--otlp-traces-endpoint %q: %v", e, err)
		}
	}
	if r := t.TraceSampleRatio; !(r >= 0 && r <= 1) {
		p.add("--trace-sample-ratio must be between 0 and 1, got %v", r)
	}
	if t.MetricsPort < -1 || t.MetricsPort > 65535 {
		p.add("--prometheus-port must be between 0 and 65535 (or -1 for none), got %d", t.MetricsPort)
	}
	if t.MetricsPort > 0 && (t.MetricsPort == c.Server.Port || t.MetricsPort == c.Server.AdminPort) {
		p.add("--prometheus-port %d is already taken by --port or --admin-port; /metrics is served on --port anyway", t.MetricsPort)
	}
	for i, b := range t.DurationBuckets {
		if !(b > 0) || math.IsInf(b, 0) {
			p.add("--prometheus-duration-buckets: %v is not a positive number of seconds", b)
		} else if i > 0 && b <= t.DurationBuckets[i-1] {
			p.add("--prometheus-duration-buckets must increase, got %v after %v", b, t.DurationBuckets[i-1])
		}
	}
}

func (c *Config) validatePlacement(p *problems) {
	pl := c.Placement
	// SMG's policies sluice refuses get SMG's reason; an empty or inherited PD policy is reported
	// once, at --policy.
	st := pl.Settings
	for _, f := range []struct {
		name  string
		value *string
	}{{"policy", &st.Policy}, {"prefill-policy", &st.PrefillPolicy}, {"decode-policy", &st.DecodePolicy}} {
		if f.name != "policy" && *f.value == pl.Policy {
			*f.value = ""
		}
		if msg := smgPolicyError(f.name, *f.value); msg != "" {
			p.add("%s", msg)
			*f.value = placement.PolicyCacheAware // reported; keep Validate from reporting it again
		}
	}
	p.settings(st.Validate(), placementFlags) // placement.Settings.Validate
	if len(pl.RoutingKeyHeaders) == 0 {
		p.add("--routing-key-headers needs at least one header name")
	}
}

// placementFlags name placement.Settings' fields as the flags that set them.
var placementFlags = map[string]string{
	"Policy": "policy", "PrefillPolicy": "prefill-policy", "DecodePolicy": "decode-policy",
	"CacheThreshold": "cache-threshold", "BalanceAbsThreshold": "balance-abs-threshold",
	"BalanceRelThreshold": "balance-rel-threshold", "MaxTreeSize": "max-tree-size",
	"EvictionInterval": "eviction-interval-secs", "VirtualNodes": "virtual-nodes",
	"StickyIdle": "max-idle-secs", "AssignmentMode": "assignment-mode", "ITLSLO": "predicted-itl-slo-secs",
}

func (c *Config) validateAdmission(p *problems) {
	d := Default().Admission
	a := c.Admission
	if a.Enabled() {
		if c.Mode() != ModePD && a.PrefillBounded() {
			p.add("%s needs --pd-disaggregation: admission bounds prefill workers, which exist only in PD mode", a.enabledBy())
		}
	} else {
		if c.explicit["prefill-queue-size"] || a.QueueSize != d.QueueSize {
			p.add("--prefill-queue-size is set but admission is off; it needs a positive --prefill-max-inflight-requests-per-worker")
		}
		if c.explicit["prefill-queue-timeout-secs"] || a.QueueTimeout != d.QueueTimeout {
			p.add("--prefill-queue-timeout-secs is set but admission is off; it needs a positive --prefill-max-inflight-requests-per-worker")
		}
		if len(a.Bands) > 0 {
			p.add("--prefill-priority-bands is set but admission is off; it needs a positive --prefill-max-inflight-requests-per-worker or --prefill-max-inflight-tokens-per-worker")
		}
		if c.explicit["prefill-priority-aging-secs"] || a.Aging != d.Aging {
			p.add("--prefill-priority-aging-secs is set but admission is off")
		}
		if a.EarlyRejection {
			p.add("--prefill-early-rejection is set but admission is off")
		}
		if c.Load.OverloadWaitingRequests >= 0 {
			p.add("--worker-overload-waiting-requests is set but admission is off: an overloaded engine counts as at capacity for admission")
		}
	}
	if a.MaxInflightTokensPerWorker <= 0 && (c.explicit["prefill-token-estimate-chars-per-token"] || a.CharsPerToken != d.CharsPerToken) {
		p.add("--prefill-token-estimate-chars-per-token is set but there is no token budget; it needs --prefill-max-inflight-tokens-per-worker")
	}
	if f := a.CharsPerToken; !(f > 0 && f <= 64) {
		p.add("--prefill-token-estimate-chars-per-token must be in (0, 64], got %v", f)
	}
	p.settings(a.Validate(), admissionFlags) // admission.Settings.Validate
}

// admissionFlags name admission.Settings' fields as the flags that set them.
var admissionFlags = map[string]string{
	"QueueSize":    "prefill-queue-size",
	"QueueTimeout": "prefill-queue-timeout-secs",
	"Bands":        "prefill-priority-bands",
	"Aging":        "prefill-priority-aging-secs",
	"Adaptive":     "prefill-adaptive-limit",
}

// settings adds the problems a core package's Settings.Validate reported (errors.Join of
// fielderr.Errors), each named by its flag: the rules and their wording are the core package's,
// config only names the fields.
func (p *problems) settings(err error, flags map[string]string) {
	fields, other := fielderr.All(err)
	for _, f := range fields {
		if name := flags[f.Field]; name != "" {
			p.add("%s", f.Named("--"+name))
		} else {
			p.add("%v", f)
		}
	}
	for _, e := range other {
		p.add("%v", e)
	}
}

func (c *Config) validateDecodeSeats(p *problems) {
	a := c.Admission
	if a.SeatsOn() && c.Mode() != ModePD {
		p.add("--decode-max-inflight-requests-per-worker needs --pd-disaggregation: decode seats bound decode workers, which exist only in PD mode")
	}
	if !a.SeatsOn() {
		if c.Load.DecodeOverloadWaitingRequests >= 0 {
			p.add("--decode-overload-waiting-requests is set but decode seats are off; it needs --decode-max-inflight-requests-per-worker N or auto")
		}
		if c.Load.DecodeMaxKVUsage != 0 {
			p.add("--decode-max-kv-usage is set but decode seats are off; it needs --decode-max-inflight-requests-per-worker N or auto")
		}
	}
	if a.DecodeWindow != 0 && !a.DecodeAuto {
		p.add("--decode-window is used only by --decode-max-inflight-requests-per-worker auto")
	}
	if a.DecodeWindow < 0 || a.DecodeWindow > 1<<20 {
		p.add("--decode-window: want 0..%d, got %d", 1<<20, a.DecodeWindow)
	}
	if t := a.LocalPrefillMaxTokens; t < 0 || t > 1<<24 {
		p.add("--pd-local-prefill-max-tokens: want 0..%d, got %d", 1<<24, t)
	}
	if a.LocalPrefillMaxTokens > 0 && c.Mode() != ModePD {
		p.add("--pd-local-prefill-max-tokens needs --pd-disaggregation: it skips the prefill leg of PD requests")
	}
	if r := c.Workers.DecodeKVRole; r != "" && r != "kv_both" {
		p.add("--decode-kv-role: want kv_both or empty, got %q", r)
	}
	if f := c.Load.DecodeMaxKVUsage; !(f >= 0 && f <= 1) {
		p.add("--decode-max-kv-usage must be a fraction in [0, 1] (0 = off), got %v", f)
	}
	p.atLeast("decode-overload-waiting-requests", c.Load.DecodeOverloadWaitingRequests, -1)
}

func (c *Config) validateLoad(p *problems) {
	if c.Load.Interval < 0 {
		p.add("--engine-load-interval-secs must be >= 0, got %v", c.Load.Interval.Seconds())
	} else if c.Load.Interval == 0 && c.loadIntervalGiven() && c.loadsDecide() {
		p.add("--engine-load-interval-secs 0 turns engine load polling off, but least_load or --worker-overload-waiting-requests reads the loads")
	}
	p.atLeast("worker-overload-waiting-requests", c.Load.OverloadWaitingRequests, -1)
}

// validateHealth checks health checking and the circuit breaker, which health probes also feed.
func (c *Config) validateHealth(p *problems) {
	h := c.Health
	p.posDur("health-check-interval-secs", h.Interval)
	p.posDur("health-check-timeout-secs", h.Timeout)
	p.atLeast("health-success-threshold", h.SuccessThreshold, 1)
	p.atLeast("health-failure-threshold", h.FailureThreshold, 1)
	if ep := h.Endpoint; !strings.HasPrefix(ep, "/") || strings.ContainsAny(ep, " ?#") {
		p.add("--health-check-endpoint must be a path starting with \"/\", got %q", ep)
	}
	p.atLeast("cb-failure-threshold", c.Breaker.FailureThreshold, 1)
	p.atLeast("cb-success-threshold", c.Breaker.SuccessThreshold, 1)
	p.posDur("cb-timeout-duration-secs", c.Breaker.Timeout)
	if c.Breaker.Window <= 0 {
		p.add("--cb-window-duration-secs must be positive, got %v", c.Breaker.Window)
	}
}

// validateRetry checks retries and the capacity SLOs.
func (c *Config) validateRetry(p *problems) {
	r := c.Retry
	p.atLeast("retry-max-retries", r.MaxRetries, 1)
	p.atLeast("max-migrations", r.MaxMigrations, 0)
	p.nonNegDur("retry-initial-backoff-ms", r.InitialBackoff)
	p.nonNegDur("retry-max-backoff-ms", r.MaxBackoff)
	p.nonNegDur("slo-ttft", c.Capacity.SLOTTFT)
	p.nonNegDur("slo-itl", c.Capacity.SLOITL)
	if r.MaxBackoff < r.InitialBackoff {
		p.add("--retry-max-backoff-ms (%v) must not be below --retry-initial-backoff-ms (%v)", r.MaxBackoff, r.InitialBackoff)
	}
	if m := r.BackoffMultiplier; !(m >= 1) {
		p.add("--retry-backoff-multiplier must be at least 1, got %v", m)
	}
	if j := r.JitterFactor; !(j >= 0 && j <= 1) {
		p.add("--retry-jitter-factor must be between 0 and 1, got %v", j)
	}
}

// validateWorkers checks the worker flags, and the initial workers against each other and the mode.
func (c *Config) validateWorkers(p *problems) {
	wc := c.Workers
	if wc.DPSize < 0 || wc.DPSize > 1024 {
		p.add("--dp-size: want 0..1024, got %d", wc.DPSize)
	}
	if kc := wc.KVConnector; kc != "nixl" && kc != "mooncake" {
		p.add("--kv-connector: want nixl or mooncake, got %q", kc)
	}
	if rt := wc.Runtime; rt != ProtocolSGLang && rt != ProtocolVLLM && rt != ProtocolTRTLLM {
		p.add("--runtime must be sglang, vllm or trtllm, got %q", rt)
	}
	if wc.DrainSettle < 0 {
		p.add("--drain-settle-secs must not be negative, got %v", wc.DrainSettle)
	}
	if wc.UpstreamIdleTimeout < 0 {
		p.add("--upstream-pool-idle-timeout-secs must not be negative, got %v", wc.UpstreamIdleTimeout)
	}
	var regular, pd bool
	seen := map[string]bool{}
	for _, w := range wc.Initial {
		flagName := map[string]string{RoleRegular: "worker-urls", RolePrefill: "prefill", RoleDecode: "decode"}[w.Role]
		if flagName == "" {
			p.add("worker %q: role must be regular, prefill or decode, got %q", redactURL(w.URL), w.Role)
			continue
		}
		if w.Role == RoleRegular {
			regular = true
		} else {
			pd = true
		}
		if err := checkWorkerURL(w.URL); err != nil {
			p.add("--%s %q: %v", flagName, redactURL(w.URL), err)
			continue
		}
		if seen[w.URL] {
			p.add("--%s %q: worker given more than once", flagName, redactURL(w.URL))
		}
		seen[w.URL] = true
		isGRPC := strings.HasPrefix(strings.ToLower(w.URL), "grpc://") || strings.HasPrefix(strings.ToLower(w.URL), "grpcs://")
		switch {
		case w.Protocol != "" && w.Protocol != ProtocolSGLang && w.Protocol != ProtocolVLLM && w.Protocol != ProtocolGRPC && w.Protocol != ProtocolTRTLLM:
			p.add("--%s %q: protocol must be sglang, vllm, trtllm or grpc, got %q", flagName, redactURL(w.URL), w.Protocol)
		case w.Protocol == ProtocolTRTLLM && w.Role != RoleRegular:
			p.add("--%s %q: TensorRT-LLM workers serve regular requests only (--worker-urls): its gRPC service returns no context-phase state for a decode worker", flagName, redactURL(w.URL))
		case wc.Runtime == ProtocolTRTLLM && !isGRPC:
			p.add("--%s %q: --runtime trtllm is TensorRT-LLM's gRPC service: give its workers as grpc:// URLs", flagName, redactURL(w.URL))
		case w.Protocol == ProtocolGRPC && !isGRPC, isGRPC && w.Protocol == "":
			// sglang or vllm at grpc:// is that engine's own gRPC (backend/enginerpc).
			p.add("--%s %q: protocol grpc goes with grpc:// and grpcs:// URLs only, got protocol %q", flagName, redactURL(w.URL), w.Protocol)
		}
		if w.BootstrapPort != 0 {
			if w.Role != RolePrefill {
				p.add("--%s %q: only prefill workers have a bootstrap port", flagName, redactURL(w.URL))
			} else if w.BootstrapPort < 0 || w.BootstrapPort > 65535 {
				p.add("--prefill %q: bootstrap port must be between 1 and 65535, got %d", redactURL(w.URL), w.BootstrapPort)
			}
		}
	}
	switch {
	case regular && pd:
		p.add("--worker-urls cannot be combined with --prefill/--decode")
	case regular && c.Mode() == ModePD:
		p.add("--worker-urls cannot be used with --pd-disaggregation; give workers with --prefill and --decode")
	}
	if pd && c.Mode() != ModePD {
		p.add("--prefill/--decode need --pd-disaggregation")
	}
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
