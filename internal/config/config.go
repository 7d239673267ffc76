package config

import (
	"log/slog"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/placement"
)

// Mode is the routing mode; its value doubles as a log/metric label.
type Mode string

const (
	// ModeRegular routes each request to one regular worker.
	ModeRegular Mode = "regular"
	// ModePD routes each request to a (prefill, decode) pair.
	ModePD Mode = "pd"
)

// Worker roles, as stored in [WorkerFlag.Role].
const (
	RoleRegular = "regular"
	RolePrefill = "prefill"
	RoleDecode  = "decode"
)

// Worker protocols, as stored in [WorkerFlag.Protocol].
const (
	ProtocolSGLang = "sglang"
	ProtocolVLLM   = "vllm"
	ProtocolGRPC   = "grpc"
	// ProtocolTRTLLM is TensorRT-LLM's gRPC service: a --runtime for grpc:// workers only.
	ProtocolTRTLLM = "trtllm"
)

// Routing policy names accepted by --policy, --prefill-policy and --decode-policy: internal/placement's.
const (
	PolicyRandom            = placement.PolicyRandom
	PolicyRoundRobin        = placement.PolicyRoundRobin
	PolicyPowerOfTwo        = placement.PolicyPowerOfTwo
	PolicyCacheAware        = placement.PolicyCacheAware
	PolicyConsistentHashing = placement.PolicyConsistentHashing
	PolicyLeastLoad         = placement.PolicyLeastLoad
	PolicyManual            = placement.PolicyManual
	// PolicyKVAware routes by the engines' KV-cache events (--kv-events-endpoint) and the prompt's
	// exact tokens (--tokenizer-path); a model without either falls back to cache_aware.
	PolicyKVAware = placement.PolicyKVAware
	// PolicyPredictedLatency routes to the worker with the lowest predicted time to first token, by a
	// per-worker model learned online from measured TTFTs (internal/placement/predict).
	PolicyPredictedLatency = placement.PolicyPredictedLatency
)

// PolicyNames returns the valid policy names, in a fresh slice.
func PolicyNames() []string { return placement.PolicyNames() }

// Config is the gateway's whole startup configuration. Build it with [Parse]
// or [Default]; check hand-made changes with [Config.Validate].
type Config struct {
	Server    ServerConfig
	Workers   WorkersConfig
	Placement PlacementConfig
	Admission AdmissionConfig
	Load      LoadConfig
	Health    HealthConfig
	Breaker   BreakerConfig
	Retry     RetryConfig
	Telemetry TelemetryConfig
	Discovery DiscoveryConfig
	Cluster   ClusterConfig
	// TLS, Auth and Limits are the security settings (security.go).
	TLS    TLSConfig
	Auth   AuthConfig
	Limits LimitsConfig
	// Concurrency is the gateway-wide limit on requests in flight, with its queue (concurrency.go).
	Concurrency ConcurrencyConfig
	// Tokenizer names the models the gateway tokenizes itself (tokenizer.go).
	Tokenizer TokenizerConfig
	// Parsers names each model's reasoning and tool-call parsers (parsers.go).
	Parsers ParsersConfig
	// KVEvents names the engines' KV-cache event endpoints (kvevents.go).
	KVEvents KVEventsConfig
	// Capacity holds the SLOs of the capacity recommendation (capacity.go).
	Capacity CapacityConfig
	// Tenants names the tenant sources and admission's tenancy (tenants.go).
	Tenants TenantsConfig
	// Aliases maps client model names to served models (--model-alias).
	Aliases AliasesConfig
	// Pairing matches PD pairs by topology and revision (--pd-topology-*, --worker-topology).
	Pairing PairingConfig
	// InertSMGFlags lists the Rust gateway (SMG) flags given that sluice accepts without anything to
	// do, sorted, for one startup log line (smgtable.go's smgInert says why each needs nothing).
	InertSMGFlags []string

	// explicit holds the names of flags set by any source other than the
	// default (command line, environment, file). Validate uses it to reject
	// queue flags given without an admission limit even when they were set
	// to their default value.
	explicit map[string]bool
}

// ServerConfig holds the listeners, limits and authentication.
type ServerConfig struct {
	// Host is the listen address (--host, default "0.0.0.0").
	Host string
	// Port serves every API (--port, default 30000).
	Port int
	// AdminPort, when non-zero, moves the admin API to its own port
	// (--admin-port, default 0 = admin on Port).
	AdminPort int
	// ConfigFile is the YAML file the configuration was read from (--config,
	// default "" = none).
	ConfigFile string
	// ShutdownGracePeriod is how long in-flight requests may run after a stop
	// signal (--shutdown-grace-period-secs, default 180s).
	ShutdownGracePeriod time.Duration
	// RequestTimeout bounds one client request end to end, streaming
	// included (--request-timeout-secs, default 1800s; 0 = no limit).
	RequestTimeout time.Duration
	// MaxPayloadSize is the largest accepted request body in bytes, on every
	// inference surface (--max-payload-size, default 33554432 = 32MiB; see
	// defaultMaxPayloadSize for why).
	MaxPayloadSize int64
	// APIKey, when set, is required as a bearer token on the inference APIs
	// (--api-key or env SLUICE_API_KEY, default none).
	APIKey Secret
	// AdminAPIKey, when set, is required as a bearer token on the admin API
	// (--admin-api-key or env SLUICE_ADMIN_API_KEY, default none).
	AdminAPIKey Secret
	// HealthCheckPort, when non-zero, serves /liveness, /readiness and /health on a listener of its
	// own, so probes answer even when the main port is saturated (--health-check-port, default 0 = off).
	HealthCheckPort int
	// RequestIDHeaders are the request headers read, in order, for a request's id
	// (--request-id-headers, repeatable; default x-request-id, x-correlation-id, x-trace-id,
	// request-id, as SMG).
	RequestIDHeaders []string
	// RuntimeWorkerThreads sets GOMAXPROCS (--runtime-worker-threads, default 0 = Go's default, which
	// follows the container's CPU quota).
	RuntimeWorkerThreads int
}

// WorkersConfig holds the routing mode and the workers known at startup.
type WorkersConfig struct {
	// PDDisaggregation selects [ModePD] (--pd-disaggregation, default false).
	PDDisaggregation bool
	// Runtime is the protocol assumed for http(s) workers whose engine does
	// not say what it is: "sglang" or "vllm" (--runtime, default "sglang"). Given explicitly it names
	// the engine gRPC of grpc:// workers, where "trtllm" (TensorRT-LLM's) is accepted too.
	Runtime string
	// DPSize is the data-parallel size of flag workers whose engine does not
	// report one (--dp-size, default 0 = one rank).
	DPSize int
	// KVConnector is the KV connector of vLLM workers that do not show
	// theirs: "nixl" or "mooncake" (--kv-connector, default "nixl").
	KVConnector string
	// DecodeKVRole is the declared KV connector role of flag-given vLLM decode workers:
	// "kv_both" or empty (--decode-kv-role); the admin API declares it per worker.
	DecodeKVRole string
	// ModelID is the model name to assume for flag-given workers when the
	// engine does not report one (--model-id, default "" = ask the engine).
	ModelID string
	// Initial lists the workers from --worker-urls, --prefill and --decode, in
	// that order (default none; more can be added through the admin API).
	Initial []WorkerFlag
	// DrainSettle is how long a worker removed through SMG's DELETE /workers/{id} keeps draining
	// (in-flight requests finish, no new ones) before it is removed (--drain-settle-secs, default 5s;
	// 0 = at once).
	DrainSettle time.Duration
	// UpstreamIdleTimeout closes pooled connections to engines idle this long
	// (--upstream-pool-idle-timeout-secs, default 90s; 0 = never).
	UpstreamIdleTimeout time.Duration
}

// WorkerFlag is one worker given at startup.
type WorkerFlag struct {
	// URL is the worker's base URL (http, https or grpc scheme), stored
	// without a trailing slash.
	URL string
	// Role is RoleRegular, RolePrefill or RoleDecode.
	Role string
	// BootstrapPort is a prefill worker's KV bootstrap port (0 = none).
	BootstrapPort int
	// Protocol is ProtocolGRPC for a grpc:// URL, else empty: detected from the engine, with
	// [WorkersConfig.Runtime] as the fallback.
	Protocol string
}

// PlacementConfig holds the routing policies and their tuning. The flags map straight into the
// embedded placement.Settings, which internal/placement owns with its meaning, defaults and
// Validate; the fields here are the few that are not placement's.
type PlacementConfig struct {
	// Settings: --policy (default cache_aware), --prefill-policy and --decode-policy (default
	// --policy), --cache-threshold, --balance-abs-threshold, --balance-rel-threshold,
	// --max-tree-size, --eviction-interval-secs, --virtual-nodes, --max-idle-secs (alias
	// --sticky-key-idle-secs; StickyIdle) and --assignment-mode (random, min_load, min_group or
	// delegate, = min_load as SMG's manual policy does).
	placement.Settings

	// DPAware places requests on the data-parallel ranks of engines that
	// have several, with rank hints on the legs (--dp-aware, default true).
	DPAware bool
	// RoutingKeyHeaders are the request headers read, in order, for the routing key of
	// consistent_hashing and manual (--routing-key-headers, repeatable; default
	// x-sluice-routing-key, x-smg-routing-key).
	RoutingKeyHeaders []string
}

// AdmissionConfig holds per-worker prefill admission and decode seats (PD mode only). The flags map
// straight into the embedded admission.Settings, which internal/admission owns with its meaning,
// defaults and Validate; the fields here are the few that are not admission's.
type AdmissionConfig struct {
	// Settings: --prefill-max-inflight-requests-per-worker (MaxInflightPerWorker; a negative value is
	// taken as 0), --prefill-queue-size, --prefill-queue-timeout-secs,
	// --prefill-max-inflight-tokens-per-worker, --prefill-priority-bands (Bands),
	// --prefill-priority-aging-secs (Aging), --prefill-early-rejection, --prefill-adaptive-limit
	// (Adaptive) and --decode-max-inflight-requests-per-worker N|auto (DecodeMaxInflightPerWorker,
	// DecodeAuto). Tenants is set from TenantsConfig by internal/app.
	admission.Settings

	// CharsPerToken turns prompt text into estimated tokens
	// (--prefill-token-estimate-chars-per-token, default 4).
	CharsPerToken float64
	// DecodeWindow is the declared decode window per rank of decode workers
	// given by flags whose engine does not report one (--decode-window,
	// default 0 = unknown); the admin API and the discovery annotation
	// declare it per worker.
	DecodeWindow int
	// LocalPrefillMaxTokens sends a PD request whose estimated uncached prompt is below it to a vLLM
	// decode worker of KV role kv_both alone, without a prefill leg (--pd-local-prefill-max-tokens,
	// default 0 = off).
	LocalPrefillMaxTokens int64
}

// enabledBy names the flag that turned admission on, for errors about it.
func (a AdmissionConfig) enabledBy() string {
	switch {
	case a.MaxInflightPerWorker > 0:
		return "--prefill-max-inflight-requests-per-worker"
	case a.MaxInflightTokensPerWorker > 0:
		return "--prefill-max-inflight-tokens-per-worker"
	default:
		return "--prefill-adaptive-limit"
	}
}

// LoadConfig holds the polling of engines' own load reports.
type LoadConfig struct {
	// Interval is how often each worker's engine is asked for its load
	// (--engine-load-interval-secs, default 15 s, 1 s when least_load, predicted_latency or the
	// overload threshold needs fresh loads; 0 = never). The readings feed the
	// sluice_worker_engine_* metrics, least_load and the overload check. See
	// [Config.LoadMonitorInterval].
	Interval time.Duration
	// OverloadWaitingRequests treats a prefill worker whose engine reports
	// more than this many waiting requests as at capacity for admission
	// (--worker-overload-waiting-requests, default -1 = off).
	OverloadWaitingRequests int
	// DecodeOverloadWaitingRequests vetoes, with decode seats on, a decode
	// worker whose engine reports more than this many waiting requests
	// (--decode-overload-waiting-requests, default -1 = off). A flag of its
	// own: a decode engine's waiting queue (SGLang's pre-allocation and
	// transfer queues, vLLM's waiting list) is not the prefill backlog
	// --worker-overload-waiting-requests bounds, and needs its own scale.
	DecodeOverloadWaitingRequests int
	// DecodeMaxKVUsage vetoes, with decode seats on, a decode worker whose
	// engine reports a KV cache usage above this fraction
	// (--decode-max-kv-usage, default 0 = off).
	DecodeMaxKVUsage float64
}

// Default engine-load intervals: for metrics alone, and when a decision
// (least_load, the overload check) reads the loads and none was given.
const (
	DefaultEngineLoadInterval = 15 * time.Second
	DecisionLoadInterval      = time.Second
)

// LoadMonitorInterval is the effective interval of the engine-load poller;
// 0 means it does not run.
func (c *Config) LoadMonitorInterval() time.Duration {
	// predicted_latency reads the loads as a feature, but not refusing an interval of 0 as least_load
	// does: without reports its load feature is the gateway's own in-flight count.
	if !c.loadIntervalGiven() && (c.loadsDecide() || c.usesPolicy(PolicyPredictedLatency)) {
		return DecisionLoadInterval
	}
	return c.Load.Interval
}

// loadIntervalGiven reports whether the interval was set, under either name.
func (c *Config) loadIntervalGiven() bool {
	return c.explicit["engine-load-interval-secs"] || c.explicit["load-monitor-interval-secs"]
}

// loadsDecide reports whether placement or admission reads engine loads.
func (c *Config) loadsDecide() bool {
	return c.Load.OverloadWaitingRequests >= 0 || c.Load.DecodeOverloadWaitingRequests >= 0 || c.Load.DecodeMaxKVUsage > 0 ||
		c.usesPolicy(PolicyLeastLoad)
}

func (c *Config) usesPolicy(name string) bool {
	p := c.Placement
	return p.Policy == name || p.PrefillPolicy == name || p.DecodePolicy == name
}

// HealthConfig holds active worker health checking.
type HealthConfig struct {
	// Interval between probes of one worker (--health-check-interval-secs,
	// default 60s).
	Interval time.Duration
	// Timeout of one probe (--health-check-timeout-secs, default 5s).
	Timeout time.Duration
	// SuccessThreshold consecutive successes make a worker Ready
	// (--health-success-threshold, default 2).
	SuccessThreshold int
	// FailureThreshold consecutive failures make a worker NotReady
	// (--health-failure-threshold, default 3).
	FailureThreshold int
	// Endpoint is the probed path (--health-check-endpoint, default "/health").
	Endpoint string
	// Disabled turns probing off; workers count as healthy
	// (--disable-health-check, default false).
	Disabled bool
	// RemoveUnhealthyWorkers is SMG's --remove-unhealthy-workers (alias --worker-auto-recovery): let a
	// long-failed worker recover. sluice never parks a worker in a terminal state, so it recovers
	// either way; see docs/migrating-from-smg.md.
	RemoveUnhealthyWorkers bool
}

// BreakerConfig holds the per-worker circuit breaker.
type BreakerConfig struct {
	// FailureThreshold consecutive failures open the breaker
	// (--cb-failure-threshold, default 10).
	FailureThreshold int
	// SuccessThreshold half-open successes close it (--cb-success-threshold,
	// default 3).
	SuccessThreshold int
	// Timeout is how long it stays open before turning half-open
	// (--cb-timeout-duration-secs, default 60s).
	Timeout time.Duration
	// Disabled turns the breaker off (--disable-circuit-breaker, default false).
	Disabled bool
	// HealthRecoveryDisabled keeps an open breaker open until Timeout even
	// when active health probes succeed; by default a successful probe turns
	// it half-open at once (--disable-cb-health-recovery, default false).
	HealthRecoveryDisabled bool
	// Window is SMG's circuit-breaker failure window (--cb-window-duration-secs, default 120s). SMG
	// validates it and never reads it (its breaker counts consecutive failures, as sluice's does); so
	// does sluice.
	Window time.Duration
}

// RetryConfig holds retries of failed upstream attempts.
type RetryConfig struct {
	// MaxRetries is the number of attempts in total, the first included
	// (--retry-max-retries, default 5).
	MaxRetries int
	// InitialBackoff is the wait before the second attempt
	// (--retry-initial-backoff-ms, default 50ms).
	InitialBackoff time.Duration
	// MaxBackoff caps every wait (--retry-max-backoff-ms, default 30s).
	MaxBackoff time.Duration
	// BackoffMultiplier grows the wait per attempt
	// (--retry-backoff-multiplier, default 1.5).
	BackoffMultiplier float64
	// JitterFactor randomises each wait by up to this fraction
	// (--retry-jitter-factor, default 0.2).
	JitterFactor float64
	// Disabled makes every request a single attempt (--disable-retries,
	// default false).
	Disabled bool
	// MaxMigrations bounds how many times one streamed PD request whose
	// decode engine broke off mid-stream is continued on another pair, in
	// engine-gRPC mode (--max-migrations, default 2; 0 = never).
	MaxMigrations int
}

// TelemetryConfig holds logging, metrics listeners and tracing.
type TelemetryConfig struct {
	// LogLevel is one of debug, info, warn, error (--log-level, default info).
	LogLevel slog.Level
	// LogJSON selects JSON log lines instead of text (--log-json, default false).
	LogJSON bool
	// Pprof serves net/http/pprof under /debug/pprof/ on the admin listener, behind the admin API key
	// (--enable-pprof, default false).
	Pprof bool
	// OTLPTracesEndpoint is the OTLP/gRPC collector, host:port or URL
	// (--otlp-traces-endpoint, default "" = tracing export off).
	OTLPTracesEndpoint string
	// TraceSampleRatio is the fraction of root traces sampled
	// (--trace-sample-ratio, default 1.0).
	TraceSampleRatio float64
	// EnableTrace turns trace export on, to OTLPTracesEndpoint or SMG's default localhost:4317
	// (--enable-trace).
	EnableTrace bool
	// LogDir, when set, also writes the log lines to a file in this directory, a new one per day
	// (--log-dir, default "" = stderr only).
	LogDir string
	// MetricsHost and MetricsPort bind a separate listener serving only /metrics
	// (--prometheus-host, default --host; --prometheus-port, default -1 = no separate listener,
	// 0 = a free port). /metrics stays on the main port too.
	MetricsHost string
	MetricsPort int
	// DurationBuckets replaces the buckets of the request duration and time-to-first-token histograms
	// (--prometheus-duration-buckets, repeatable; default none = sluice's buckets).
	DurationBuckets []float64
}

// Mode returns the routing mode.
func (c *Config) Mode() Mode {
	if c.Workers.PDDisaggregation {
		return ModePD
	}
	return ModeRegular
}

// Default returns the configuration of `sluice serve` with no flags.
func Default() *Config {
	fs := newFlagSet()
	fs.finish()
	return fs.cfg
}

// Secret is a credential. It prints as "[redacted]" (or "" when empty)
// through fmt, slog and encoding, so it never reaches a log line by accident;
// read it with [Secret.Value].
type Secret string

const redacted = "[redacted]"

// Value returns the secret itself.
func (s Secret) Value() string { return string(s) }

// String returns "[redacted]", or "" when the secret is empty.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString keeps %#v redacted too.
func (s Secret) GoString() string { return `"` + s.String() + `"` }

// LogValue implements [slog.LogValuer].
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalText keeps JSON, YAML and similar encoders redacted.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }
