package config

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Sources of the command lines below, all in smg-project/smg:
//
//	main   model_gateway/src/main.rs, the long help of `smg` (commit f8daa8835, the snapshot read)
//	readme README.md at the same commit
//	docs   docs/<path> at ab8cde2e9, the last commit before "chore: remove mkdocs, docs live in
//	       smg-docs now (#2012)" moved them out of the repository
//	chart  deploy/helm/smg/templates/_helpers.tpl (smg.routerArgs) rendered with the chart's
//	       values.yaml defaults and router.workerUrls = [http://w1:8000]
//
// Each line is given exactly as written there, after the program name (`smg` or `smg launch`).

// smgLine is one real SMG command line and what sluice makes of it.
type smgLine struct {
	source string
	line   string
	check  func(t *testing.T, c *Config)
	// wantErr lists substrings the error must contain (one per refused flag), when sluice refuses it.
	wantErr []string
}

func workerURLs(c *Config, role string) []string {
	var out []string
	for _, w := range c.Workers.Initial {
		if w.Role == role {
			out = append(out, w.URL)
		}
	}
	return out
}

func eq[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", what, diff)
	}
}

// pdPair checks the prefill workers (URL and bootstrap port) and decode URLs.
func pdPair(t *testing.T, c *Config, prefill []WorkerFlag, decode []string) {
	t.Helper()
	if c.Mode() != ModePD {
		t.Errorf("mode = %s, want pd", c.Mode())
	}
	var gotP []WorkerFlag
	for _, w := range c.Workers.Initial {
		if w.Role == RolePrefill {
			gotP = append(gotP, WorkerFlag{URL: w.URL, BootstrapPort: w.BootstrapPort})
		}
	}
	eq(t, "prefill workers", gotP, prefill)
	eq(t, "decode workers", workerURLs(c, RoleDecode), decode)
}

var smgLines = []smgLine{
	{
		source: "main: long help, Regular mode",
		line:   "launch --worker-urls http://worker1:8000 http://worker2:8000",
		check: func(t *testing.T, c *Config) {
			eq(t, "workers", workerURLs(c, RoleRegular), []string{"http://worker1:8000", "http://worker2:8000"})
			eq(t, "policy", c.Placement.Policy, "cache_aware")
		},
	},
	{
		source: "main: long help, PD disaggregated mode",
		line: "launch --pd-disaggregation --prefill http://127.0.0.1:30001 9001 --prefill http://127.0.0.2:30002 9002 " +
			"--decode http://127.0.0.3:30003 --decode http://127.0.0.4:30004 --policy cache_aware",
		check: func(t *testing.T, c *Config) {
			pdPair(t, c, []WorkerFlag{{URL: "http://127.0.0.1:30001", BootstrapPort: 9001}, {URL: "http://127.0.0.2:30002", BootstrapPort: 9002}},
				[]string{"http://127.0.0.3:30003", "http://127.0.0.4:30004"})
			eq(t, "policies", []string{c.Placement.PrefillPolicy, c.Placement.DecodePolicy}, []string{"cache_aware", "cache_aware"})
		},
	},
	{
		source: "main: long help, With different policies",
		line: "launch --pd-disaggregation --prefill http://127.0.0.1:30001 9001 --prefill http://127.0.0.2:30002 " +
			"--decode http://127.0.0.3:30003 --decode http://127.0.0.4:30004 --prefill-policy cache_aware --decode-policy power_of_two",
		check: func(t *testing.T, c *Config) {
			pdPair(t, c, []WorkerFlag{{URL: "http://127.0.0.1:30001", BootstrapPort: 9001}, {URL: "http://127.0.0.2:30002"}},
				[]string{"http://127.0.0.3:30003", "http://127.0.0.4:30004"})
			eq(t, "policies", []string{c.Placement.PrefillPolicy, c.Placement.DecodePolicy}, []string{"cache_aware", "power_of_two"})
		},
	},
	{
		source: "readme: Single worker",
		line:   "launch --worker-urls http://localhost:8000",
		check: func(t *testing.T, c *Config) {
			eq(t, "workers", workerURLs(c, RoleRegular), []string{"http://localhost:8000"})
		},
	},
	{
		source: "readme: Multiple workers with cache-aware routing",
		line:   "launch --worker-urls http://gpu1:8000 http://gpu2:8000 --policy cache_aware",
		check: func(t *testing.T, c *Config) {
			eq(t, "workers", workerURLs(c, RoleRegular), []string{"http://gpu1:8000", "http://gpu2:8000"})
		},
	},
	{
		source:  "readme: With high availability mesh",
		line:    "launch --worker-urls http://gpu1:8000 --enable-mesh --mesh-advertise-host 10.0.0.1 --mesh-peer-urls 10.0.0.2:39527",
		wantErr: []string{"--enable-mesh is not supported: sluice replicas share no state by gossip", "--mesh-advertise-host is not supported", "--mesh-peer-urls is not supported"},
	},
	{
		source: "docs: getting-started/pd-disaggregation.md, Start SMG",
		line:   "--pd-disaggregation --prefill http://prefill:8000 9001 --decode http://decode:8001 --host 0.0.0.0 --port 30000",
		check: func(t *testing.T, c *Config) {
			pdPair(t, c, []WorkerFlag{{URL: "http://prefill:8000", BootstrapPort: 9001}}, []string{"http://decode:8001"})
			eq(t, "listen", []any{c.Server.Host, c.Server.Port}, []any{"0.0.0.0", 30000})
		},
	},
	{
		source: "docs: concepts/routing/pd-disaggregation.md, SGLang PD (static workers)",
		line: "--pd-disaggregation --prefill http://prefill1:8000 9001 --prefill http://prefill2:8000 9002 " +
			"--decode http://decode1:8000 --decode http://decode2:8000",
		check: func(t *testing.T, c *Config) {
			pdPair(t, c, []WorkerFlag{{URL: "http://prefill1:8000", BootstrapPort: 9001}, {URL: "http://prefill2:8000", BootstrapPort: 9002}},
				[]string{"http://decode1:8000", "http://decode2:8000"})
		},
	},
	{
		source: "docs: concepts/routing/pd-disaggregation.md, Kubernetes (PD with policies and reliability)",
		line: "--service-discovery --pd-disaggregation --prefill-selector app=sglang role=prefill --decode-selector app=sglang role=decode " +
			"--prefill-policy cache_aware --decode-policy power_of_two --cb-failure-threshold 3 --health-check-interval-secs 10 --host 0.0.0.0 --port 8000",
		check: func(t *testing.T, c *Config) {
			eq(t, "prefill selector", c.Discovery.PrefillSelector, map[string]string{"app": "sglang", "role": "prefill"})
			eq(t, "decode selector", c.Discovery.DecodeSelector, map[string]string{"app": "sglang", "role": "decode"})
			eq(t, "breaker", c.Breaker.FailureThreshold, 3)
			eq(t, "health interval", c.Health.Interval, 10*time.Second)
			eq(t, "port", c.Server.Port, 8000)
		},
	},
	{
		source: "docs: getting-started/index.md, Kubernetes service discovery",
		line:   "--service-discovery --selector app=sglang-worker --service-discovery-namespace inference --service-discovery-port 8000 --policy cache_aware",
		check: func(t *testing.T, c *Config) {
			eq(t, "selector", c.Discovery.Selector, map[string]string{"app": "sglang-worker"})
			eq(t, "namespace", c.Discovery.Namespace, "inference")
			eq(t, "port", c.Discovery.Port, 8000)
		},
	},
	{
		source: "docs: getting-started/reliability-controls.md, rate limiting with a token refill",
		line: "--worker-urls http://w1:8000 http://w2:8000 --max-concurrent-requests 100 --rate-limit-tokens-per-second 100 " +
			"--queue-size 200 --queue-timeout-secs 30",
		check: func(t *testing.T, c *Config) {
			eq(t, "concurrency", c.Concurrency, ConcurrencyConfig{MaxConcurrent: 100, QueueSize: 200, QueueTimeout: 30 * time.Second, TokensPerSecond: 100})
		},
	},
	{
		source: "docs: getting-started/reliability-controls.md, everything together",
		line: "--worker-urls http://w1:8000 http://w2:8000 http://w3:8000 --max-concurrent-requests 150 --queue-size 300 --queue-timeout-secs 30 " +
			"--retry-max-retries 3 --retry-initial-backoff-ms 50 --retry-max-backoff-ms 5000 --retry-backoff-multiplier 2.0 --retry-jitter-factor 0.2 " +
			"--cb-failure-threshold 10 --cb-success-threshold 3 --cb-timeout-duration-secs 60 --cb-window-duration-secs 120",
		check: func(t *testing.T, c *Config) {
			eq(t, "workers", len(workerURLs(c, RoleRegular)), 3)
			eq(t, "concurrency", c.Concurrency, ConcurrencyConfig{MaxConcurrent: 150, QueueSize: 300, QueueTimeout: 30 * time.Second})
			eq(t, "retry", c.Retry, RetryConfig{MaxRetries: 3, InitialBackoff: 50 * time.Millisecond, MaxBackoff: 5 * time.Second, BackoffMultiplier: 2, JitterFactor: 0.2, MaxMigrations: 2})
			eq(t, "cb window", c.Breaker.Window, 120*time.Second)
		},
	},
	{
		source: "docs: concepts/reliability/circuit-breakers.md, Configuration",
		line: "--worker-urls http://w1:8000 http://w2:8000 --cb-failure-threshold 5 --cb-success-threshold 2 --cb-timeout-duration-secs 30 " +
			"--cb-window-duration-secs 60",
		check: func(t *testing.T, c *Config) {
			eq(t, "breaker", c.Breaker, BreakerConfig{FailureThreshold: 5, SuccessThreshold: 2, Timeout: 30 * time.Second, Window: 60 * time.Second})
			eq(t, "cb window", c.Breaker.Window, 60*time.Second)
		},
	},
	{
		source: "docs: getting-started/load-balancing.md, Manual",
		line:   "--policy manual --worker-urls http://w1:8000 http://w2:8000 --assignment-mode min_load --max-idle-secs 14400 --eviction-interval 120",
		check: func(t *testing.T, c *Config) {
			eq(t, "policy", c.Placement.Policy, "manual")
			eq(t, "assignment", c.Placement.AssignmentMode, "min_load")
			eq(t, "idle", c.Placement.StickyIdle, 4*time.Hour)
			eq(t, "eviction (alias of --eviction-interval-secs)", c.Placement.EvictionInterval, 120*time.Second)
		},
	},
	{
		source:  "docs: getting-started/load-balancing.md, Prefix hash",
		line:    "--policy prefix_hash --worker-urls http://w1:8000 http://w2:8000 --prefix-token-count 256 --prefix-hash-load-factor 1.25",
		wantErr: []string{"--prefix-token-count is not supported: prefix_hash is not a sluice policy", "--prefix-hash-load-factor is not supported"},
	},
	{
		source:  "docs: concepts/routing/load-balancing.md, Bucket",
		line:    "--policy bucket --worker-urls http://w1:8000 http://w2:8000 http://w3:8000",
		wantErr: []string{"--policy bucket is not supported: sluice has no length buckets; use cache_aware or power_of_two"},
	},
	{
		source: "docs: getting-started/monitoring.md, Prometheus",
		line:   "--worker-urls http://worker:8000 --prometheus-port 29000 --prometheus-host 0.0.0.0",
		check: func(t *testing.T, c *Config) {
			eq(t, "metrics listener", []any{c.Telemetry.MetricsHost, c.Telemetry.MetricsPort}, []any{"0.0.0.0", 29000})
		},
	},
	{
		source: "docs: getting-started/logging.md, File logging",
		line:   "--worker-urls http://worker:8000 --log-dir /var/log/smg --log-level info",
		check: func(t *testing.T, c *Config) {
			eq(t, "log dir", c.Telemetry.LogDir, "/var/log/smg")
		},
	},
	{
		source: "docs: getting-started/logging.md, Enable OTEL with logging",
		line:   "--worker-urls http://worker:8000 --enable-trace --otlp-traces-endpoint localhost:4317 --log-level info",
		check: func(t *testing.T, c *Config) {
			eq(t, "trace", []any{c.Telemetry.EnableTrace, c.Telemetry.OTLPTracesEndpoint}, []any{true, "localhost:4317"})
		},
	},
	{
		source: "docs: reference/configuration.md, --request-id-headers example",
		line:   "--request-id-headers x-request-id x-trace-id x-correlation-id",
		check: func(t *testing.T, c *Config) {
			eq(t, "request id headers", c.Server.RequestIDHeaders, []string{"x-request-id", "x-trace-id", "x-correlation-id"})
		},
	},
	{
		source: "docs: reference/metrics.md, custom buckets",
		line:   "--prometheus-duration-buckets 0.01 0.1 0.5 1 5 10",
		check: func(t *testing.T, c *Config) {
			eq(t, "buckets", c.Telemetry.DurationBuckets, []float64{0.01, 0.1, 0.5, 1, 5, 10})
		},
	},
	{
		source: "docs: concepts/reliability/graceful-shutdown.md, dedicated probe port (container args)",
		line:   "--health-check-port 30001",
		check: func(t *testing.T, c *Config) {
			eq(t, "health check port", c.Server.HealthCheckPort, 30001)
		},
	},
	{
		source: "docs: getting-started/multiple-workers.md, IGW mode",
		line:   "--enable-igw --host 0.0.0.0 --port 30000",
		check: func(t *testing.T, c *Config) {
			eq(t, "inert", c.InertSMGFlags, []string{"enable-igw"})
		},
	},
	{
		source: "docs: getting-started/index.md, gateway only with gRPC workers",
		line:   "launch --worker-urls grpc://localhost:50051 --model-path meta-llama/Llama-3.1-8B-Instruct --policy round_robin --host 0.0.0.0 --port 30000",
		check: func(t *testing.T, c *Config) {
			eq(t, "workers", c.Workers.Initial, []WorkerFlag{{URL: "grpc://localhost:50051", Role: RoleRegular, Protocol: ProtocolGRPC}})
			eq(t, "inert", c.InertSMGFlags, []string{"model-path"})
		},
	},
	{
		source:  "docs: getting-started/multiple-workers.md, OpenAI backend",
		line:    "--backend openai --worker-urls https://api.openai.com --host 0.0.0.0 --port 30000",
		wantErr: []string{"sluice does not route to cloud providers (openai)"},
	},
	{
		source: "docs: reference/configuration.md, Low-Latency Configuration",
		line: "--worker-urls http://w1:8000 http://w2:8000 --policy power_of_two --max-concurrent-requests 50 --queue-size 25 --queue-timeout-secs 5 " +
			"--health-check-interval-secs 5 --request-timeout-secs 30",
		check: func(t *testing.T, c *Config) {
			eq(t, "concurrency", c.Concurrency, ConcurrencyConfig{MaxConcurrent: 50, QueueSize: 25, QueueTimeout: 5 * time.Second})
			eq(t, "request timeout", c.Server.RequestTimeout, 30*time.Second)
		},
	},
	{
		source: "chart: smg.routerArgs with the default values",
		line: "--host 0.0.0.0 --port 30000 --policy cache_aware --worker-urls http://w1:8000 --cache-threshold 0.3 --balance-abs-threshold 64 " +
			"--balance-rel-threshold 1.5 --eviction-interval 120 --max-tree-size 67108864 --block-size 16 --max-payload-size 536870912 " +
			"--request-timeout-secs 1800 --max-concurrent-requests -1 --queue-size 100 --queue-timeout-secs 60 --retry-max-retries 5 " +
			"--retry-initial-backoff-ms 50 --retry-max-backoff-ms 30000 --retry-backoff-multiplier 1.5 --retry-jitter-factor 0.2 " +
			"--cb-failure-threshold 10 --cb-success-threshold 3 --cb-timeout-duration-secs 60 --cb-window-duration-secs 120 " +
			"--health-failure-threshold 3 --health-success-threshold 2 --health-check-timeout-secs 5 --health-check-interval-secs 60 " +
			"--health-check-endpoint /health --prometheus-port 29000 --log-level info",
		check: func(t *testing.T, c *Config) {
			eq(t, "concurrency off", c.Concurrency.Enabled(), false)
			eq(t, "payload", c.Server.MaxPayloadSize, int64(536870912))
			eq(t, "metrics port", c.Telemetry.MetricsPort, 29000)
			eq(t, "inert", c.InertSMGFlags, []string{"block-size"})
		},
	},
}

// splitLine splits a command line on spaces and drops the subcommand, as cli.Main does.
func splitLine(line string) []string {
	args := strings.Fields(line)
	if len(args) > 0 && (args[0] == "launch" || args[0] == "start") {
		args = args[1:]
	}
	return args
}

func TestSMGCommandLines(t *testing.T) {
	for _, tt := range smgLines {
		t.Run(tt.source, func(t *testing.T) {
			c, err := parseNoEnv(splitLine(tt.line)...)
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("parse(%q) succeeded, want errors %q", tt.line, tt.wantErr)
				}
				for _, want := range tt.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q lacks %q", err, want)
					}
				}
				if n := strings.Count(err.Error(), "\n") + 1; n != len(tt.wantErr) {
					t.Errorf("error has %d lines, want one per refused flag (%d):\n%v", n, len(tt.wantErr), err)
				}
				return
			}
			if err != nil {
				t.Fatalf("parse(%q): %v", tt.line, err)
			}
			tt.check(t, c)
		})
	}
}

// TestSMGIssueFlags covers the flags issue 18 lists that no SMG document shows on a command line,
// with values of their types as main.rs declares them.
func TestSMGIssueFlags(t *testing.T) {
	args := []string{
		"--worker-urls", "http://w1:8000",
		"--routing-key-headers", "X-Tenant-Session", "x-smg-routing-key",
		"--remove-unhealthy-workers",
		"--drain-settle-secs", "0",
		"--upstream-pool-idle-timeout-secs", "4",
		"--eviction-interval", "30",
		"--sticky-key-idle-secs", "60",
		"--worker-auto-recovery",
		"--runtime-worker-threads", "3",
	}
	c, err := parseNoEnv(args...)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "routing key headers", c.Placement.RoutingKeyHeaders, []string{"x-tenant-session", "x-smg-routing-key"})
	eq(t, "remove unhealthy", c.Health.RemoveUnhealthyWorkers, true)
	eq(t, "drain settle", c.Workers.DrainSettle, time.Duration(0))
	eq(t, "idle timeout", c.Workers.UpstreamIdleTimeout, 4*time.Second)
	eq(t, "eviction", c.Placement.EvictionInterval, 30*time.Second)
	eq(t, "sticky idle", c.Placement.StickyIdle, time.Minute)
	eq(t, "threads", c.Server.RuntimeWorkerThreads, 3)
}

// TestSMGLoadMonitorInterval: SMG's --load-monitor-interval is the engine-load poll interval, and
// counts as given (least_load alone polls every second).
func TestSMGLoadMonitorInterval(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want time.Duration
	}{
		{[]string{"--policy", "least_load", "--load-monitor-interval", "10"}, 10 * time.Second},
		{[]string{"--policy", "least_load"}, DecisionLoadInterval},
		{[]string{"--load-monitor-interval", "2"}, 2 * time.Second},
	} {
		c, err := parseNoEnv(append([]string{"--worker-urls", "http://w1:8000"}, tt.args...)...)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.LoadMonitorInterval(); got != tt.want {
			t.Errorf("%v: poll interval %v, want %v", tt.args, got, tt.want)
		}
	}
}

func TestSMGRejects(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"refused bool does not eat the next flag", []string{"--enable-wasm", "--worker-urls", "http://a:1"}, "--enable-wasm is not supported: sluice runs no WebAssembly plugins"},
		{"refused multi eats its values", []string{"--storage-context-headers", "a=b", "c=d", "--nope"}, "--storage-context-headers is not supported"},
		{"refused URL PORT", []string{"--epd-disaggregation", "--encode", "http://e:1", "8998"}, "--encode is not supported: sluice has no encode stage"},
		{"unknown flag", []string{"--worker-urlz", "http://a:1"}, "unknown flag --worker-urlz: neither a sluice flag nor a Rust gateway (SMG) flag"},
		{"backend tokenspeed", []string{"--backend", "tokenspeed"}, "tokenspeed engines are not supported"},
		{"backend trtllm names TensorRT-LLM's gRPC", []string{"--backend", "trtllm", "--worker-urls", "http://a:1"}, "--runtime trtllm is TensorRT-LLM's gRPC service"},
		{"assignment mode", []string{"--assignment-mode", "sticky"}, "--assignment-mode must be random, min_load, min_group or delegate"},
		{"health port zero is off, negative is wrong", []string{"--health-check-port", "-1"}, "--health-check-port must be between 1 and 65535"},
		{"health port taken", []string{"--health-check-port", "30000"}, "--health-check-port 30000 is already taken"},
		{"metrics port taken", []string{"--prometheus-port", "30000"}, "--prometheus-port 30000 is already taken"},
		{"buckets must increase", []string{"--prometheus-duration-buckets", "1", "0.5"}, "--prometheus-duration-buckets must increase"},
		{"bucket not a number", []string{"--prometheus-duration-buckets", "fast"}, `"fast" is not a number`},
		{"negative tokens per second", []string{"--max-concurrent-requests", "4", "--rate-limit-tokens-per-second", "-1"}, "--rate-limit-tokens-per-second must be at least 0"},
		{"zero queue timeout", []string{"--max-concurrent-requests", "4", "--queue-timeout-secs", "0"}, "--queue-timeout-secs must be positive"},
		{"cb window zero", []string{"--cb-window-duration-secs", "0"}, "--cb-window-duration-secs must be positive"},
		{"bad header name", []string{"--request-id-headers", "x id"}, `"x id" is not a header name`},
		{"inert value checked", []string{"--job-queue-capacity", "0"}, "want an integer >= 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseNoEnv(tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

// TestSMGRefusedEveryLine: each refused flag is one line naming it, whatever the flags around it.
func TestSMGRefusedEveryLine(t *testing.T) {
	var args []string
	for name, r := range smgRefused {
		args = append(args, "--"+name)
		switch r.kind {
		case argOne:
			args = append(args, "v")
		case argMulti:
			args = append(args, "a", "b")
		case argURLPort:
			args = append(args, "http://x:1", "8998")
		}
	}
	_, err := parseNoEnv(args...)
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(smgRefused) {
		t.Fatalf("%d lines for %d refused flags:\n%v", len(lines), len(smgRefused), err)
	}
	for _, l := range lines {
		name, rest, ok := strings.Cut(strings.TrimPrefix(l, "--"), " is not supported: ")
		if !ok || rest == "" {
			t.Errorf("line %q does not say which flag and why", l)
			continue
		}
		if _, known := smgRefused[name]; !known {
			t.Errorf("line %q names no refused flag", l)
		}
	}
}

func TestSMGFile(t *testing.T) {
	path := writeFile(t, "worker-urls: [http://w1:8000]\nmax-concurrent-requests: 8\nrequest-id-headers: [x-a, x-b]\n"+
		"prometheus-duration-buckets: [0.1, 1]\neviction-interval: 60\nenable-igw: true\n")
	c, err := parseNoEnv("--config", path)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "limit", c.Concurrency.MaxConcurrent, 8)
	eq(t, "headers", c.Server.RequestIDHeaders, []string{"x-a", "x-b"})
	eq(t, "buckets", c.Telemetry.DurationBuckets, []float64{0.1, 1})
	eq(t, "eviction", c.Placement.EvictionInterval, time.Minute)
	eq(t, "inert", c.InertSMGFlags, []string{"enable-igw"})

	_, err = parseNoEnv("--config", writeFile(t, "enable-mesh: true\n"))
	if err == nil || !strings.Contains(err.Error(), "--enable-mesh is not supported") {
		t.Fatalf("refused key in file: %v", err)
	}
}

// TestSMGHelp: --help lists the SMG sections, and FlagNames leaves aliases and refusals out.
func TestSMGHelp(t *testing.T) {
	var out bytes.Buffer
	_, err := parse([]string{"--help"}, &out, noEnv)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err = %v", err)
	}
	for _, want := range []string{"--max-concurrent-requests N", "--eviction-interval SECS", "Alias of --eviction-interval-secs", "--enable-mesh\n        Refused: "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %q", want)
		}
	}
	names := FlagNames()
	for _, no := range []string{"eviction-interval", "enable-mesh", "enable-igw", "backend"} {
		if slices.Contains(names, no) {
			t.Errorf("FlagNames has %q", no)
		}
	}
	for _, yes := range []string{"max-concurrent-requests", "prometheus-port", "health-check-port", "log-dir"} {
		if !slices.Contains(names, yes) {
			t.Errorf("FlagNames lacks %q", yes)
		}
	}
}

// smgMainRsFlags are the flags of SMG's CliArgs (model_gateway/src/main.rs at f8daa8835: every
// #[arg(long)] field, the hand-parsed --prefill and --encode, and the visible aliases).
var smgMainRsFlags = strings.Fields(`host port health-check-port worker-urls policy cache-threshold balance-abs-threshold
balance-rel-threshold balance-token-usage-threshold overload-token-usage-threshold worker-overload-protection
worker-overload-waiting-requests worker-overload-token-usage overlap-decay selection-temperature eviction-interval
max-tree-size block-size cache-boundaries cache-index cache-ttl-secs max-idle-secs assignment-mode prefix-token-count
prefix-hash-load-factor prefix-hash-balance-abs-threshold least-load-kv-pressure-weight least-load-default-throughput
least-load-mean-prefill-tokens least-load-max-waiting-requests dp-aware routing-key-override routing-key-headers
enable-igw dp-minimum-tokens-scheduler pd-disaggregation epd-disaggregation decode prefill-policy decode-policy
encode-policy worker-startup-timeout-secs worker-startup-delay worker-startup-check-interval job-queue-capacity
job-queue-concurrency zmq-engine-count upstream-http2 load-monitor-interval disable-load-monitoring engine-metrics
kv-indexer-ttl-secs kv-indexer-max-entries multimodal-tensor-transport multimodal-shm-min-bytes service-discovery
selector service-discovery-port service-discovery-namespace encode-selector prefill-selector decode-selector
router-selector model-id-from model-alias log-dir log-level log-json prometheus-port prometheus-host
prometheus-duration-buckets request-id-headers storage-context-headers trust-tenant-header tenant-header-name
request-timeout-secs upstream-pool-idle-timeout-secs shutdown-grace-period-secs max-payload-size
stream-request-bodies-over stream-body-stall-timeout-secs cors-allowed-origins max-concurrent-requests queue-size
queue-timeout-secs priority-scheduler-enabled priority-scheduler-default-max-class priority-scheduler-config
priority-scheduler-tenant-metric-top-n tenant-rate-limit-enabled tenant-rate-limit-config rate-limit-tokens-per-second
retry-max-retries retry-initial-backoff-ms retry-max-backoff-ms retry-backoff-multiplier retry-jitter-factor
disable-retries cb-failure-threshold cb-success-threshold cb-timeout-duration-secs cb-window-duration-secs
disable-circuit-breaker health-failure-threshold health-success-threshold health-check-timeout-secs
health-check-interval-secs health-check-endpoint disable-health-check remove-unhealthy-workers drain-settle-secs
model-path tokenizer-path chat-template disable-tokenizer-autoload tokenizer-cache-enable-l0
tokenizer-cache-l0-max-entries tokenizer-cache-enable-l1 tokenizer-cache-l1-max-memory reasoning-parser
tool-call-parser mcp-config-path backend history-backend enable-wasm storage-hook-wasm-path schema-config
oracle-wallet-path oracle-tns-alias oracle-dsn oracle-user oracle-password oracle-external-auth oracle-pool-min
oracle-pool-max oracle-pool-timeout-secs postgres-db-url postgres-pool-max-size redis-url redis-pool-max-size
redis-retention-days tls-cert-path tls-key-path enable-trace otlp-traces-endpoint api-key tenant-api-key jwt-issuer
jwt-audience jwt-jwks-uri jwt-role-claim jwt-role-mapping control-plane-api-keys disable-audit-logging enable-mesh
mesh-server-name mesh-host mesh-advertise-host mesh-port mesh-peer-urls webrtc-bind-addr webrtc-stun-server
runtime-worker-threads prefill encode
cache-match-threshold spill-abs-threshold spill-rel-threshold sticky-key-idle-secs sticky-sessions worker-auto-recovery
model runtime`)

// TestEverySMGFlagKnown: no SMG flag falls through to "unknown flag", and the migration guide names
// each one.
func TestEverySMGFlagKnown(t *testing.T) {
	s := newFlagSet()
	doc, err := os.ReadFile("../../docs/migrating-from-smg.md")
	if err != nil {
		t.Fatal(err)
	}
	prefixGroups := []string{"--oracle-", "--least-load-", "--priority-scheduler-", "--tokenizer-cache-"}
	for _, name := range smgMainRsFlags {
		if _, refused := smgRefused[name]; !refused && s.fs.Lookup(name) == nil {
			t.Errorf("SMG flag --%s is neither a sluice flag nor refused", name)
		}
		mentioned := strings.Contains(string(doc), "`--"+name+"`") || strings.Contains(string(doc), "(`--"+name+"`)")
		for _, g := range prefixGroups {
			mentioned = mentioned || (strings.HasPrefix("--"+name, g) && strings.Contains(string(doc), "`"+g+"*`"))
		}
		if !mentioned {
			t.Errorf("docs/migrating-from-smg.md does not name --%s", name)
		}
	}
	if len(smgMainRsFlags) != 173 {
		t.Errorf("%d SMG flags listed, want 173 (165 long flags + 8 aliases)", len(smgMainRsFlags))
	}
}

// The help of SMG's tokenizer flags matches what sluice does: it loads tokenizers, from --tokenizer-path
// only; none of them says it loads no tokenizer.
func TestSMGTokenizerFlagsHelp(t *testing.T) {
	t.Parallel()
	var help bytes.Buffer
	if _, err := parse([]string{"--help"}, &help, func(string) (string, bool) { return "", false }); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	if strings.Contains(help.String(), "loads no tokenizer") {
		t.Errorf("sluice serve --help still says sluice loads no tokenizer")
	}
	s := newFlagSet()
	for _, name := range []string{"model-path", "model", "disable-tokenizer-autoload", "tokenizer-cache-enable-l0",
		"tokenizer-cache-l0-max-entries", "tokenizer-cache-enable-l1", "tokenizer-cache-l1-max-memory"} {
		f := s.fs.Lookup(name)
		if f == nil {
			t.Fatalf("--%s is not a flag", name)
		}
		if !strings.Contains(f.Usage, "--tokenizer-path") || strings.Contains(f.Usage, "loads no tokenizer") {
			t.Errorf("--%s help %q: want it to say tokenizers come from --tokenizer-path", name, f.Usage)
		}
	}
}
