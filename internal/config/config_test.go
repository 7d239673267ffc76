package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/placement"
)

// noEnv is an environment with nothing set, so tests do not depend on the
// developer's shell.
func noEnv(string) (string, bool) { return "", false }

func parseNoEnv(args ...string) (*Config, error) {
	return parse(args, &bytes.Buffer{}, noEnv)
}

// writeFile writes a config file into a fresh temp dir and returns its path.
func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

var ignoreExplicit = cmpopts.IgnoreUnexported(Config{})

func TestDefault(t *testing.T) {
	want := &Config{
		Server: ServerConfig{
			Host: "0.0.0.0", Port: 30000, AdminPort: 0,
			ShutdownGracePeriod: 180 * time.Second, RequestTimeout: 1800 * time.Second,
			MaxPayloadSize:   32 << 20,
			RequestIDHeaders: []string{"x-request-id", "x-correlation-id", "x-trace-id", "request-id"},
		},
		Workers: WorkersConfig{Runtime: "sglang", KVConnector: "nixl", DrainSettle: 5 * time.Second, UpstreamIdleTimeout: 90 * time.Second},
		Placement: PlacementConfig{
			Settings: placement.Settings{
				Policy: "cache_aware", PrefillPolicy: "cache_aware", DecodePolicy: "cache_aware",
				CacheThreshold: 0.3, BalanceAbsThreshold: 64, BalanceRelThreshold: 1.5,
				MaxTreeSize: 67108864, EvictionInterval: 120 * time.Second, VirtualNodes: 150,
				StickyIdle: 4 * time.Hour, AssignmentMode: "random",
			},
			DPAware:           true,
			RoutingKeyHeaders: []string{"x-sluice-routing-key", "x-smg-routing-key"},
		},
		Admission: AdmissionConfig{Settings: admission.Settings{MaxInflightPerWorker: 0, QueueSize: 100, QueueTimeout: 60 * time.Second,
			MaxInflightTokensPerWorker: 0, Aging: 10 * time.Second}, CharsPerToken: 4},
		Load: LoadConfig{Interval: 15 * time.Second, OverloadWaitingRequests: -1, DecodeOverloadWaitingRequests: -1},
		Health: HealthConfig{
			Interval: 60 * time.Second, Timeout: 5 * time.Second,
			SuccessThreshold: 2, FailureThreshold: 3, Endpoint: "/health",
		},
		Breaker: BreakerConfig{FailureThreshold: 10, SuccessThreshold: 3, Timeout: 60 * time.Second, Window: 120 * time.Second},
		Retry: RetryConfig{
			MaxRetries: 5, InitialBackoff: 50 * time.Millisecond, MaxBackoff: 30 * time.Second,
			BackoffMultiplier: 1.5, JitterFactor: 0.2, MaxMigrations: 2,
		},
		Telemetry: TelemetryConfig{LogLevel: slog.LevelInfo, TraceSampleRatio: 1.0, MetricsHost: "0.0.0.0", MetricsPort: -1},
		Discovery: DiscoveryConfig{Port: 80, Protocol: "http"},
		Cluster:   ClusterConfig{Mode: CoordinationOff, ExchangePeriod: 250 * time.Millisecond, Lease: 2 * time.Second, LeaseName: "sluice-admission"},
		Auth:      AuthConfig{JWTRoleClaim: "roles", JWTAdminRole: "admin"},
		Limits: LimitsConfig{
			ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second,
			BodyReadTimeout: 60 * time.Second, WriteTimeout: 60 * time.Second,
			MaxHeaderBytes: 64 << 10, MaxConnections: 10000,
		},
		Concurrency: ConcurrencyConfig{MaxConcurrent: -1, QueueSize: 100, QueueTimeout: 60 * time.Second},
		Tenants:     TenantsConfig{Fairness: "share", Burst: 1, MetricsMaxTenants: 20},
		Pairing: PairingConfig{Rules: placement.DefaultPairing(),
			ZoneLabel: "topology.kubernetes.io/zone"},
	}
	def := Default()
	if diff := cmp.Diff(want, def, ignoreExplicit); diff != "" {
		t.Errorf("Default() mismatch (-want +got):\n%s", diff)
	}
	if err := def.Validate(); err != nil {
		t.Errorf("Default().Validate() = %v", err)
	}
	if got := def.Mode(); got != ModeRegular {
		t.Errorf("Default().Mode() = %q, want %q", got, ModeRegular)
	}
	parsed, err := parseNoEnv()
	if err != nil {
		t.Fatalf("parse(no args): %v", err)
	}
	if diff := cmp.Diff(want, parsed, ignoreExplicit); diff != "" {
		t.Errorf("parse(no args) mismatch (-want +got):\n%s", diff)
	}
}

func TestParseRejects(t *testing.T) {
	const p1, p2, d1 = "http://10.0.0.1:30001", "http://10.0.0.2:30001", "http://10.0.0.3:30002"
	pd := []string{"--pd-disaggregation", "--prefill", p1, "--decode", d1}
	with := func(extra ...string) []string { return append(append([]string{}, pd...), extra...) }
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		// Admission.
		{"queue size without limit", with("--prefill-queue-size", "10"), "--prefill-queue-size is set but admission is off"},
		{"queue size at its default without limit", with("--prefill-queue-size", "100"), "--prefill-queue-size is set but admission is off"},
		{"queue timeout without limit", with("--prefill-queue-timeout-secs", "5"), "--prefill-queue-timeout-secs is set but admission is off"},
		{"queue flags with limit zero", with("--prefill-max-inflight-requests-per-worker", "0", "--prefill-queue-size", "1"), "admission is off"},
		{"admission in regular mode", []string{"--worker-urls", p1, "--prefill-max-inflight-requests-per-worker", "4"}, "needs --pd-disaggregation"},
		{"admission in regular mode without workers", []string{"--prefill-max-inflight-requests-per-worker", "1"}, "needs --pd-disaggregation"},
		{"negative queue size", with("--prefill-max-inflight-requests-per-worker", "4", "--prefill-queue-size", "-1"), "--prefill-queue-size must be at least 0"},
		{"zero queue timeout", with("--prefill-max-inflight-requests-per-worker", "4", "--prefill-queue-timeout-secs", "0"), "--prefill-queue-timeout-secs must be positive"},
		{"negative queue timeout", with("--prefill-max-inflight-requests-per-worker", "4", "--prefill-queue-timeout-secs", "-0.5"), "--prefill-queue-timeout-secs must be positive"},
		// Policies.
		{"unknown policy", []string{"--policy", "fastest"}, `--policy "fastest" is not a policy; valid: random, round_robin, power_of_two, cache_aware, consistent_hashing, least_load, manual`},
		{"unknown prefill policy", with("--prefill-policy", "fastest"), `--prefill-policy "fastest" is not a policy`},
		{"unknown decode policy", with("--decode-policy", "Random"), `--decode-policy "Random" is not a policy`},
		{"unknown pd policy when --policy is also bad", with("--policy", "x", "--prefill-policy", "y"), `--prefill-policy "y" is not a policy`},
		// Ranges.
		{"port too big", []string{"--port", "65536"}, "--port must be between 0 and 65535"},
		{"admin port negative", []string{"--admin-port", "-1"}, "--admin-port must be between 0 and 65535"},
		{"admin port equals port", []string{"--port", "8080", "--admin-port", "8080"}, "--admin-port 8080 equals --port"},
		{"negative grace period", []string{"--shutdown-grace-period-secs", "-1"}, "--shutdown-grace-period-secs must not be negative"},
		{"negative request timeout", []string{"--request-timeout-secs", "-5"}, "--request-timeout-secs must not be negative"},
		{"duration not a number", []string{"--request-timeout-secs", "10s"}, `invalid value "10s" for flag -request-timeout-secs: not a number`},
		{"duration overflow", []string{"--request-timeout-secs", "1e20"}, "out of range"},
		{"zero payload size", []string{"--max-payload-size", "0"}, "--max-payload-size must be positive"},
		{"unparsable payload size", []string{"--max-payload-size", "lots"}, `invalid size "lots"`},
		{"unknown payload unit", []string{"--max-payload-size", "5XB"}, `unknown unit "XB"`},
		{"negative payload size", []string{"--max-payload-size", "-1"}, `invalid size "-1"`},
		{"payload size overflow", []string{"--max-payload-size", "9999999999TiB"}, "too large"},
		{"negative cache threshold", []string{"--cache-threshold", "-0.1"}, "--cache-threshold must be between 0 and 1"},
		{"cache threshold above one", []string{"--cache-threshold", "1.5"}, "--cache-threshold must be between 0 and 1"},
		{"negative balance abs", []string{"--balance-abs-threshold", "-1"}, "--balance-abs-threshold must be at least 0"},
		{"negative balance rel", []string{"--balance-rel-threshold", "-1"}, "--balance-rel-threshold must not be negative"},
		{"NaN balance rel", []string{"--balance-rel-threshold", "NaN"}, "--balance-rel-threshold must not be negative"},
		{"zero tree size", []string{"--max-tree-size", "0"}, "--max-tree-size must be at least 1"},
		{"zero eviction interval", []string{"--eviction-interval-secs", "0"}, "--eviction-interval-secs must be positive"},
		{"zero virtual nodes", []string{"--virtual-nodes", "0"}, "--virtual-nodes must be at least 1"},
		{"trace ratio above one", []string{"--trace-sample-ratio", "2"}, "--trace-sample-ratio must be between 0 and 1"},
		{"negative engine load interval", []string{"--engine-load-interval-secs", "-1"}, "--engine-load-interval-secs must be >= 0"},
		{"otlp bad endpoint", []string{"--otlp-traces-endpoint", "collector"}, `--otlp-traces-endpoint "collector": want host:port or a URL`},
		{"otlp bad scheme", []string{"--otlp-traces-endpoint", "ftp://c:4317"}, `scheme "ftp" not supported`},
		{"otlp bad port", []string{"--otlp-traces-endpoint", "c:99999"}, `port "99999" out of range`},
		// Health, breaker, retries.
		{"health success threshold zero", []string{"--health-success-threshold", "0"}, "--health-success-threshold must be at least 1"},
		{"health failure threshold zero", []string{"--health-failure-threshold", "0"}, "--health-failure-threshold must be at least 1"},
		{"health interval zero", []string{"--health-check-interval-secs", "0"}, "--health-check-interval-secs must be positive"},
		{"health timeout negative", []string{"--health-check-timeout-secs", "-1"}, "--health-check-timeout-secs must be positive"},
		{"health endpoint not a path", []string{"--health-check-endpoint", "health"}, `--health-check-endpoint must be a path starting with "/"`},
		{"cb failure threshold zero", []string{"--cb-failure-threshold", "0"}, "--cb-failure-threshold must be at least 1"},
		{"cb success threshold zero", []string{"--cb-success-threshold", "0"}, "--cb-success-threshold must be at least 1"},
		{"cb timeout zero", []string{"--cb-timeout-duration-secs", "0"}, "--cb-timeout-duration-secs must be positive"},
		{"retries zero", []string{"--retry-max-retries", "0"}, "--retry-max-retries must be at least 1"},
		{"jitter negative", []string{"--retry-jitter-factor", "-0.1"}, "--retry-jitter-factor must be between 0 and 1"},
		{"jitter above one", []string{"--retry-jitter-factor", "1.01"}, "--retry-jitter-factor must be between 0 and 1"},
		{"multiplier below one", []string{"--retry-backoff-multiplier", "0.9"}, "--retry-backoff-multiplier must be at least 1"},
		{"negative initial backoff", []string{"--retry-initial-backoff-ms", "-1"}, "--retry-initial-backoff-ms must not be negative"},
		{"max backoff below initial", []string{"--retry-initial-backoff-ms", "100", "--retry-max-backoff-ms", "10"}, "--retry-max-backoff-ms (10ms) must not be below --retry-initial-backoff-ms (100ms)"},
		// Telemetry.
		{"bad log level", []string{"--log-level", "verbose"}, `invalid value "verbose" for flag -log-level: must be one of debug, info, warn, error`},
		// Workers and modes.
		{"prefill without pd flag", []string{"--prefill", p1}, "--prefill/--decode need --pd-disaggregation"},
		{"decode without pd flag", []string{"--decode", d1}, "--prefill/--decode need --pd-disaggregation"},
		{"worker-urls with pd flag", []string{"--pd-disaggregation", "--worker-urls", p1}, "--worker-urls cannot be used with --pd-disaggregation"},
		{"worker-urls with prefill", []string{"--pd-disaggregation", "--worker-urls", p2, "--prefill", p1}, "--worker-urls cannot be combined with --prefill/--decode"},
		{"bad runtime", []string{"--runtime", "tgi"}, `--runtime must be sglang, vllm or trtllm, got "tgi"`},
		{"trtllm runtime at an http worker", []string{"--runtime", "trtllm", "--worker-urls", "http://h:8000"}, "--runtime trtllm is TensorRT-LLM's gRPC service"},
		{"trtllm prefill", []string{"--runtime", "trtllm", "--pd-disaggregation", "--prefill", "grpc://p:1", "--decode", "grpc://d:1"},
			"TensorRT-LLM workers serve regular requests only"},
		{"worker url without scheme", []string{"--worker-urls", "10.0.0.1:30000"}, "--worker-urls"},
		{"worker url bare host", []string{"--worker-urls", "worker-1"}, `--worker-urls "worker-1": missing scheme`},
		{"worker url bad scheme", []string{"--worker-urls", "ftp://h:1"}, `scheme "ftp" not supported`},
		{"worker url no host", []string{"--worker-urls", "http://:8000"}, "missing host"},
		{"worker url port range", []string{"--worker-urls", "http://h:70000"}, `port "70000" out of range`},
		{"worker url query", []string{"--worker-urls", "http://h:1/?x=1"}, "no query or fragment"},
		{"grpc url with path", []string{"--worker-urls", "grpc://h:1/v1"}, "a grpc:// or grpcs:// URL has no path"},
		{"prefill url bad", with("--prefill", "h:1"), `--prefill "h:1"`},
		{"decode url bad", with("--decode", "http://"), `--decode "http://": missing host`},
		{"duplicate worker", []string{"--worker-urls", "http://h:1,http://h:1/"}, `--worker-urls "http://h:1": worker given more than once`},
		{"bootstrap port out of range", []string{"--pd-disaggregation", "--prefill", p1, "70000"}, `bootstrap port "70000": want a port number 1-65535`},
		{"bootstrap port zero", []string{"--pd-disaggregation", "--prefill", p1, "0"}, `bootstrap port "0"`},
		{"decode with a port", with("--decode", d1+"1", "8998"), `unexpected argument "8998": only --prefill takes a second value`},
		{"prefill with three values", []string{"--pd-disaggregation", "--prefill=" + p1 + " 1 2"}, "want URL [BOOTSTRAP_PORT]"},
		{"prefill missing value", []string{"--prefill"}, "flag needs an argument: -prefill"},
		// Command line shape.
		{"bool flag with separate value", []string{"--pd-disaggregation", "true"}, `unexpected argument "true": boolean flags take their value as --name=true`},
		{"positional argument", []string{"extra"}, `unexpected argument "extra"`},
		{"unknown flag", []string{"--polcy", "random"}, "unknown flag --polcy: neither a sluice flag nor a Rust gateway (SMG) flag"},
		{"mistyped flag suggests the closest", []string{"--polcy", "random"}, "did you mean --policy?"},
		{"mistyped prefill suggests --prefill", []string{"--pd-disaggregation", "--prefil", "http://p:1"}, "unknown flag --prefil: neither a sluice flag nor a Rust gateway (SMG) flag; did you mean --prefill?"},
		{"missing config file", []string{"--config", "/nonexistent/sluice.yaml"}, "config file: open /nonexistent/sluice.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseNoEnv(tt.args...)
			if err == nil {
				t.Fatalf("parse(%q) = nil error, want one containing %q", tt.args, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parse(%q) error = %q, want it to contain %q", tt.args, err, tt.wantErr)
			}
			if cfg != nil {
				t.Errorf("parse(%q) returned a config with an error", tt.args)
			}
		})
	}
}

func TestValidateReportsEveryProblemOnItsOwnLine(t *testing.T) {
	_, err := parseNoEnv("--port", "-1", "--retry-jitter-factor", "2", "--policy", "nope")
	if err == nil {
		t.Fatal("want an error")
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("error %v does not wrap ErrInvalid", err)
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 3 {
		t.Fatalf("got %d lines, want 3:\n%s", len(lines), err)
	}
	for _, want := range []string{"--port", "--retry-jitter-factor", "--policy"} {
		found := false
		for _, l := range lines {
			found = found || strings.Contains(l, want)
		}
		if !found {
			t.Errorf("no line names %s:\n%s", want, err)
		}
	}
}

func TestValidateHandBuilt(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(c *Config)
		wantErr string
	}{
		{"valid PD config", func(c *Config) {
			c.Workers.PDDisaggregation = true
			c.Workers.Initial = []WorkerFlag{
				{URL: "http://p:1", Role: RolePrefill, BootstrapPort: 8998, Protocol: ProtocolSGLang},
				{URL: "grpc://d:2", Role: RoleDecode, Protocol: ProtocolGRPC},
			}
			c.Admission.MaxInflightPerWorker = 2
			c.Admission.QueueSize = 0
		}, ""},
		{"empty PD policies mean --policy", func(c *Config) { c.Placement.PrefillPolicy, c.Placement.DecodePolicy = "", "" }, ""},
		{"queue size changed without limit", func(c *Config) { c.Admission.QueueSize = 5 }, "--prefill-queue-size is set but admission is off"},
		{"queue timeout changed without limit", func(c *Config) { c.Admission.QueueTimeout = time.Second }, "--prefill-queue-timeout-secs is set but admission is off"},
		{"unknown role", func(c *Config) {
			c.Workers.Initial = []WorkerFlag{{URL: "http://h:1", Role: "both", Protocol: ProtocolSGLang}}
		}, `role must be regular, prefill or decode, got "both"`},
		{"protocol left to detection", func(c *Config) { c.Workers.Initial = []WorkerFlag{{URL: "http://h:1", Role: RoleRegular}} }, ""},
		{"unknown protocol", func(c *Config) {
			c.Workers.Initial = []WorkerFlag{{URL: "http://h:1", Role: RoleRegular, Protocol: "tgi"}}
		}, `protocol must be sglang, vllm, trtllm or grpc, got "tgi"`},
		{"grpc protocol on http url", func(c *Config) {
			c.Workers.Initial = []WorkerFlag{{URL: "http://h:1", Role: RoleRegular, Protocol: ProtocolGRPC}}
		}, "protocol grpc goes with grpc:// and grpcs:// URLs only"},
		{"engine protocol on grpc url is the engine's own gRPC", func(c *Config) {
			c.Workers.Initial = []WorkerFlag{{URL: "grpc://h:1", Role: RoleRegular, Protocol: ProtocolVLLM}}
		}, ""},
		{"grpc url without protocol", func(c *Config) {
			c.Workers.Initial = []WorkerFlag{{URL: "grpc://h:1", Role: RoleRegular}}
		}, `protocol grpc goes with grpc:// and grpcs:// URLs only, got protocol ""`},
		{"bootstrap port on decode", func(c *Config) {
			c.Workers.PDDisaggregation = true
			c.Workers.Initial = []WorkerFlag{{URL: "http://h:1", Role: RoleDecode, BootstrapPort: 9, Protocol: ProtocolSGLang}}
		}, "only prefill workers have a bootstrap port"},
		{"bootstrap port out of range", func(c *Config) {
			c.Workers.PDDisaggregation = true
			c.Workers.Initial = []WorkerFlag{{URL: "http://h:1", Role: RolePrefill, BootstrapPort: 65536, Protocol: ProtocolSGLang}}
		}, "bootstrap port must be between 1 and 65535, got 65536"},
		{"odd log level", func(c *Config) { c.Telemetry.LogLevel = slog.LevelInfo + 2 }, "--log-level must be one of debug, info, warn, error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.edit(c)
			err := c.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestParseValues(t *testing.T) {
	tests := []struct {
		name string
		args []string
		get  func(c *Config) any
		want any
	}{
		{"single dash flags", []string{"-port", "8080"}, func(c *Config) any { return c.Server.Port }, 8080},
		{"equals form", []string{"--port=8081"}, func(c *Config) any { return c.Server.Port }, 8081},
		{"payload MiB", []string{"--max-payload-size", "512MiB"}, func(c *Config) any { return c.Server.MaxPayloadSize }, int64(512 << 20)},
		{"payload GB", []string{"--max-payload-size", "1GB"}, func(c *Config) any { return c.Server.MaxPayloadSize }, int64(1e9)},
		{"payload KB", []string{"--max-payload-size=10KB"}, func(c *Config) any { return c.Server.MaxPayloadSize }, int64(10000)},
		{"payload lower-case fraction", []string{"--max-payload-size", "1.5kib"}, func(c *Config) any { return c.Server.MaxPayloadSize }, int64(1536)},
		{"fractional queue timeout", []string{"--pd-disaggregation", "--prefill-max-inflight-requests-per-worker", "1", "--prefill-queue-timeout-secs", "0.25"}, func(c *Config) any { return c.Admission.QueueTimeout }, 250 * time.Millisecond},
		{"ms flags", []string{"--retry-initial-backoff-ms", "7", "--retry-max-backoff-ms", "1500"}, func(c *Config) any { return []time.Duration{c.Retry.InitialBackoff, c.Retry.MaxBackoff} }, []time.Duration{7 * time.Millisecond, 1500 * time.Millisecond}},
		{"secs flag", []string{"--health-check-interval-secs", "2"}, func(c *Config) any { return c.Health.Interval }, 2 * time.Second},
		{"zero request timeout means none", []string{"--request-timeout-secs", "0"}, func(c *Config) any { return c.Server.RequestTimeout }, time.Duration(0)},
		{"log level", []string{"--log-level", "DEBUG"}, func(c *Config) any { return c.Telemetry.LogLevel }, slog.LevelDebug},
		{"pd policies follow --policy", []string{"--policy", "round_robin"}, func(c *Config) any {
			return []string{c.Placement.Policy, c.Placement.PrefillPolicy, c.Placement.DecodePolicy}
		}, []string{"round_robin", "round_robin", "round_robin"}},
		{"pd policies override", []string{"--policy", "random", "--prefill-policy", "cache_aware", "--decode-policy", "power_of_two"}, func(c *Config) any {
			return []string{c.Placement.Policy, c.Placement.PrefillPolicy, c.Placement.DecodePolicy}
		}, []string{"random", "cache_aware", "power_of_two"}},
		{"pd mode", []string{"--pd-disaggregation"}, func(c *Config) any { return c.Mode() }, ModePD},
		{"pd mode without workers is fine", []string{"--pd-disaggregation", "--prefill-max-inflight-requests-per-worker", "3", "--prefill-queue-size", "0"}, func(c *Config) any {
			return []any{c.Admission.Enabled(), c.Admission.QueueSize, len(c.Workers.Initial)}
		}, []any{true, 0, 0}},
		{"no queue needs no queue timeout", []string{"--pd-disaggregation", "--prefill-max-inflight-requests-per-worker", "3", "--prefill-queue-size", "0", "--prefill-queue-timeout-secs", "0"}, func(c *Config) any {
			return c.Admission.QueueTimeout
		}, time.Duration(0)},
		{"otlp url", []string{"--otlp-traces-endpoint", "http://collector:4317"}, func(c *Config) any { return c.Telemetry.OTLPTracesEndpoint }, "http://collector:4317"},
		{"otlp host port", []string{"--otlp-traces-endpoint", "collector:4317"}, func(c *Config) any { return c.Telemetry.OTLPTracesEndpoint }, "collector:4317"},
		{"value that looks like --prefill is not rewritten", []string{"--model-id", "--prefill", "--api-key", "8998"}, func(c *Config) any {
			return []string{c.Workers.ModelID, c.Server.APIKey.Value()}
		}, []string{"--prefill", "8998"}},
		{"bool with equals", []string{"--disable-retries=true", "--log-json=false"}, func(c *Config) any { return []bool{c.Retry.Disabled, c.Telemetry.LogJSON} }, []bool{true, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseNoEnv(tt.args...)
			if err != nil {
				t.Fatalf("parse(%q): %v", tt.args, err)
			}
			if diff := cmp.Diff(tt.want, tt.get(c)); diff != "" {
				t.Errorf("parse(%q) (-want +got):\n%s", tt.args, diff)
			}
		})
	}
}

func TestParseWorkers(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want []WorkerFlag
	}{
		{
			name: "prefill with and without port",
			args: []string{"--pd-disaggregation", "--prefill", "http://h:30001", "8998", "--prefill", "http://h:30002", "--decode", "http://h:30003"},
			want: []WorkerFlag{
				{URL: "http://h:30001", Role: RolePrefill, BootstrapPort: 8998},
				{URL: "http://h:30002", Role: RolePrefill},
				{URL: "http://h:30003", Role: RoleDecode},
			},
		},
		{
			name: "prefill last with port",
			args: []string{"--pd-disaggregation", "--decode", "http://d:1", "--prefill", "http://p:1", "9000"},
			want: []WorkerFlag{
				{URL: "http://p:1", Role: RolePrefill, BootstrapPort: 9000},
				{URL: "http://d:1", Role: RoleDecode},
			},
		},
		{
			name: "equals forms, none port, single dash",
			args: []string{"-pd-disaggregation", "--prefill=http://p:1", "--prefill=http://p:2", "8998", "-prefill", "http://p:3", "none", "--decode=http://d:1"},
			want: []WorkerFlag{
				{URL: "http://p:1", Role: RolePrefill},
				{URL: "http://p:2", Role: RolePrefill, BootstrapPort: 8998},
				{URL: "http://p:3", Role: RolePrefill},
				{URL: "http://d:1", Role: RoleDecode},
			},
		},
		{
			name: "quoted URL and port in one argument",
			args: []string{"--pd-disaggregation", "--prefill", "http://p:1 8998"},
			want: []WorkerFlag{{URL: "http://p:1", Role: RolePrefill, BootstrapPort: 8998}},
		},
		{
			name: "--runtime trtllm names TensorRT-LLM's gRPC for grpc workers",
			args: []string{"--worker-urls", "grpc://t:50051", "--runtime", "trtllm"},
			want: []WorkerFlag{{URL: "grpc://t:50051", Role: RoleRegular, Protocol: ProtocolTRTLLM}},
		},
		{
			name: "SMG's --backend trtllm does the same",
			args: []string{"--backend", "trtllm", "--worker-urls", "grpc://t:50051"},
			want: []WorkerFlag{{URL: "grpc://t:50051", Role: RoleRegular, Protocol: ProtocolTRTLLM}},
		},
		{
			name: "http workers' protocol is left to detection whatever --runtime says; an explicit --runtime names a grpc URL's engine gRPC",
			args: []string{"--pd-disaggregation", "--prefill", "http://p:1", "--decode", "grpc://d:1", "--runtime", "vllm"},
			want: []WorkerFlag{
				{URL: "http://p:1", Role: RolePrefill},
				{URL: "grpc://d:1", Role: RoleDecode, Protocol: ProtocolVLLM},
			},
		},
		{
			name: "without --runtime a grpc URL is grpc, to be detected",
			args: []string{"--pd-disaggregation", "--prefill", "grpc://p:1", "--decode", "grpc://d:1"},
			want: []WorkerFlag{
				{URL: "grpc://p:1", Role: RolePrefill, Protocol: ProtocolGRPC},
				{URL: "grpc://d:1", Role: RoleDecode, Protocol: ProtocolGRPC},
			},
		},
		{
			name: "worker-urls repeated, comma and space separated, trailing slash dropped",
			args: []string{"--worker-urls", "http://a:1,http://b:1/", "--worker-urls=http://c:1 https://d:1/v1", "--worker-urls", "grpc://e:1"},
			want: []WorkerFlag{
				{URL: "http://a:1", Role: RoleRegular},
				{URL: "http://b:1", Role: RoleRegular},
				{URL: "http://c:1", Role: RoleRegular},
				{URL: "https://d:1/v1", Role: RoleRegular},
				{URL: "grpc://e:1", Role: RoleRegular, Protocol: ProtocolGRPC},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseNoEnv(tt.args...)
			if err != nil {
				t.Fatalf("parse(%q): %v", tt.args, err)
			}
			if diff := cmp.Diff(tt.want, c.Workers.Initial); diff != "" {
				t.Errorf("workers (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr string
	}{
		{in: "536870912", want: 536870912},
		{in: "512MiB", want: 512 << 20},
		{in: "512 MiB", want: 512 << 20},
		{in: "1GB", want: 1_000_000_000},
		{in: "10KB", want: 10_000},
		{in: "10kb", want: 10_000},
		{in: "2TiB", want: 2 << 40},
		{in: "100B", want: 100},
		{in: "0.5GiB", want: 1 << 29},
		{in: "", wantErr: "invalid size"},
		{in: "MiB", wantErr: "invalid size"},
		{in: "1.2.3", wantErr: "invalid size"},
		{in: "5K", wantErr: `unknown unit "K"`},
		{in: "9223372036854775808", wantErr: "too large"},
		{in: "8589934592GiB", wantErr: "too large"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSize(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseSize(%q) = %d, %v; want error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestAPIKeysFromEnvironment(t *testing.T) {
	env := map[string]string{"SLUICE_API_KEY": "env-key", "SLUICE_ADMIN_API_KEY": "env-admin"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	tests := []struct {
		name      string
		args      []string
		file      string
		wantKey   string
		wantAdmin string
	}{
		{name: "env when flags unset", wantKey: "env-key", wantAdmin: "env-admin"},
		{name: "flag wins over env", args: []string{"--api-key", "flag-key"}, wantKey: "flag-key", wantAdmin: "env-admin"},
		{name: "both flags win", args: []string{"--api-key=a", "--admin-api-key=b"}, wantKey: "a", wantAdmin: "b"},
		{name: "env wins over file", file: "api-key: file-key\nadmin-api-key: file-admin\n", wantKey: "env-key", wantAdmin: "env-admin"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if tt.file != "" {
				args = append(args, "--config", writeFile(t, tt.file))
			}
			c, err := parse(args, &bytes.Buffer{}, lookup)
			if err != nil {
				t.Fatal(err)
			}
			if got := []string{c.Server.APIKey.Value(), c.Server.AdminAPIKey.Value()}; !cmp.Equal(got, []string{tt.wantKey, tt.wantAdmin}) {
				t.Errorf("keys = %q, want [%q %q]", got, tt.wantKey, tt.wantAdmin)
			}
		})
	}
}

func TestAPIKeysFileWithoutEnv(t *testing.T) {
	c, err := parseNoEnv("--config", writeFile(t, "api-key: file-key\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Server.APIKey.Value(); got != "file-key" {
		t.Errorf("APIKey = %q, want file-key", got)
	}
}

// TestParseReadsProcessEnvironment covers the exported entry point's use of
// the real environment (the other tests inject one).
func TestParseReadsProcessEnvironment(t *testing.T) {
	t.Setenv("SLUICE_API_KEY", "from-env")
	t.Setenv("SLUICE_ADMIN_API_KEY", "")
	c, err := Parse([]string{"--admin-api-key", "from-flag"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{c.Server.APIKey.Value(), c.Server.AdminAPIKey.Value()}; !cmp.Equal(got, []string{"from-env", "from-flag"}) {
		t.Errorf("keys = %q, want [from-env from-flag]", got)
	}
	c, err = Parse([]string{"--api-key", "flag-wins"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Server.APIKey.Value(); got != "flag-wins" {
		t.Errorf("APIKey = %q, want flag-wins", got)
	}
}

func TestHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help", "-help"} {
		t.Run(arg, func(t *testing.T) {
			var out bytes.Buffer
			c, err := parse([]string{"--port", "1", arg}, &out, noEnv)
			if !errors.Is(err, flag.ErrHelp) || c != nil {
				t.Fatalf("parse(%s) = %v, %v; want nil, flag.ErrHelp", arg, c, err)
			}
			help := out.String()
			// Every flag appears once as "--name", and the text after it up to
			// the next flag carries its default.
			s := newFlagSet()
			n := 0
			s.fs.VisitAll(func(f *flag.Flag) {
				n++
				head := "\n  --" + f.Name
				i := strings.Index(help, head+" ")
				if j := strings.Index(help, head+"\n"); i < 0 || (j >= 0 && j < i) {
					i = j
				}
				if i < 0 {
					t.Errorf("help lacks flag --%s", f.Name)
					return
				}
				block := help[i+len(head):]
				if k := strings.Index(block, "\n  --"); k >= 0 {
					block = block[:k]
				}
				def := f.DefValue
				if def == "" {
					def = `""`
				}
				if !strings.Contains(block, "(default "+def+")") {
					t.Errorf("help for --%s lacks (default %s):%s", f.Name, def, block)
				}
			})
			if n < 45 {
				t.Errorf("only %d flags registered", n)
			}
		})
	}
}

func TestHelpNotPrintedOnError(t *testing.T) {
	var out bytes.Buffer
	if _, err := parse([]string{"--nope"}, &out, noEnv); err == nil {
		t.Fatal("want an error")
	}
	if out.Len() != 0 {
		t.Errorf("parse error wrote to stderr: %q", out.String())
	}
}

func TestSecretsNeverPrinted(t *testing.T) {
	c, err := parseNoEnv(
		"--api-key", "sk-live-123", "--admin-api-key", "adm-456",
		"--worker-urls", "http://user:pw-789@h:1",
		"--otlp-traces-endpoint", "https://u:otlp-000@collector:4318",
	)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("starting", "config", c)
	slog.New(slog.NewTextHandler(&logs, nil)).Info("starting", "config", c)
	// API keys stay hidden even from fmt; URL passwords are masked in the
	// log line (fmt shows URLs as stored).
	printed := logs.String() + fmt.Sprintf("%v %+v %#v %s %q", c, *c, *c, c.Server.APIKey, c.Server.AdminAPIKey)
	for _, secret := range []string{"sk-live-123", "adm-456"} {
		if strings.Contains(printed, secret) {
			t.Errorf("output contains secret %q:\n%s", secret, printed)
		}
	}
	for _, secret := range []string{"pw-789", "otlp-000"} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("log contains URL password %q:\n%s", secret, logs.String())
		}
	}
	for _, want := range []string{`"api_key":"[redacted]"`, `"port":30000`, `"policy":"cache_aware"`, "http://user:xxxxx@h:1"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logs.String())
		}
	}
	if got := Secret("").String(); got != "" {
		t.Errorf(`Secret("").String() = %q, want ""`, got)
	}
}
