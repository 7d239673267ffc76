package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
)

// flagSet is the flag.FlagSet of `sluice serve`, bound to a Config, plus what
// the help text needs (sections in registration order, placeholders).
type flagSet struct {
	fs       *flag.FlagSet
	cfg      *Config
	sections []flagSection
	metavar  map[string]string

	// Worker flags are kept raw until parsing ends, because the protocol of
	// each depends on --runtime, which may come later on the command line.
	workerURLs []string
	prefill    []prefillEntry
	decode     []string

	// aliases are second names of a setting (same flag.Value); unbound are flags whose values are
	// kept raw here and turned into settings by finish. The summary skips both.
	aliases, unbound map[string]bool
}

type flagSection struct {
	title string
	names []string
}

// isRepeatable reports whether a flag accumulates values (and so accepts a
// YAML sequence in the config file).
func isRepeatable(name string) bool {
	return name == "worker-urls" || name == "prefill" || name == "decode" || isSelectorFlag(name) ||
		name == "ca-cert-paths" || name == "cors-allowed-origins" ||
		name == "routing-key-headers" || name == "request-id-headers" || name == "prometheus-duration-buckets" ||
		name == "admission-peers" || name == "tokenizer-path" ||
		name == "reasoning-parser" || name == "tool-call-parser" || name == "worker-topology"
}

// isSelectorFlag reports whether a flag is a label selector (which also
// accepts a YAML mapping of labels in the config file).
func isSelectorFlag(name string) bool {
	return name == "selector" || name == "prefill-selector" || name == "decode-selector"
}

// envFallback lists the flags read from the environment when the command line
// does not give them.
func envFallback() [2]struct{ flag, env string } {
	return [2]struct{ flag, env string }{
		{"api-key", "SLUICE_API_KEY"},
		{"admin-api-key", "SLUICE_ADMIN_API_KEY"},
	}
}

func newFlagSet() *flagSet {
	c := &Config{}
	s := &flagSet{
		fs:      flag.NewFlagSet("sluice serve", flag.ContinueOnError),
		cfg:     c,
		metavar: map[string]string{},
		aliases: map[string]bool{},
		unbound: map[string]bool{},
	}
	// Parse returns errors and prints help itself, so the flag package's own
	// output (error line plus full usage on every mistake) is silenced.
	s.fs.SetOutput(io.Discard)
	s.fs.Usage = func() {}

	// One register method per section of the help, in its order. Every default is given where its
	// flag is declared (the dur, size and list helpers set it); finish derives only the settings
	// whose default depends on another setting.
	s.registerServer()
	s.registerSecurity()
	s.registerTelemetry()
	s.registerWorkers()
	s.registerDiscovery()
	s.registerTokenizer() // tokenizer.go
	s.registerParsers()   // parsers.go
	s.registerKVEvents()  // kvevents.go
	s.registerAliases()   // aliases.go
	s.registerPairing()   // topology.go
	s.registerCapacity()  // capacity.go
	s.registerPlacement()
	s.registerPrefillAdmission()
	s.registerTenants() // tenants.go
	s.registerDecodeSeats()
	s.registerEngineLoad()
	s.registerClusterAdmission()
	s.registerHealthChecks()
	s.registerBreaker()
	s.registerRetries()
	s.registerConcurrency() // concurrency.go
	s.registerSMGCompat()   // smgtable.go
	return s
}

func (s *flagSet) registerServer() {
	c := s.cfg
	const sec = time.Second

	s.section("Server")
	s.str(&c.Server.Host, "host", "ADDR", "0.0.0.0", "Address to listen on.")
	s.int(&c.Server.Port, "port", "PORT", 30000, "Port serving the OpenAI REST, Connect, gRPC and gRPC-Web APIs, /health and /metrics.")
	s.int(&c.Server.AdminPort, "admin-port", "PORT", 0, "Separate port for the admin API; 0 serves it on --port.")
	s.str(&c.Server.ConfigFile, "config", "FILE", "", "YAML file of settings keyed by flag name; the command line overrides it.")
	s.dur(&c.Server.ShutdownGracePeriod, sec, "shutdown-grace-period-secs", "SECS", 180*sec, "Time in-flight requests get to finish after SIGTERM.")
	s.dur(&c.Server.RequestTimeout, sec, "request-timeout-secs", "SECS", 1800*sec, "Limit on one request end to end, streaming included; 0 = none.")
	s.size(&c.Server.MaxPayloadSize, "max-payload-size", "SIZE", defaultMaxPayloadSize, "Largest request body on every inference surface (REST, Connect, gRPC, gRPC-Web): bytes, or with a unit (KB, MB, GB, KiB, MiB, GiB).")
	s.add(secretValue{&c.Server.APIKey}, "api-key", "KEY", "Bearer token required on the inference APIs (env SLUICE_API_KEY; prefer env or file: flags show in ps).")
	s.add(secretValue{&c.Server.AdminAPIKey}, "admin-api-key", "KEY", "Bearer token required on the admin API (env SLUICE_ADMIN_API_KEY).")
	s.int(&c.Server.HealthCheckPort, "health-check-port", "PORT", 0, "Also serve /liveness, /readiness and /health on this port, on a listener of their own; 0 = off.")
	// SMG's request id headers (model_gateway/src/server.rs).
	s.add(newHeaderList(&c.Server.RequestIDHeaders, "x-request-id", "x-correlation-id", "x-trace-id", "request-id"), "request-id-headers", "HEADER", "Request headers holding the request id, first present wins; repeatable; a given list replaces the default.")
	s.int(&c.Server.RuntimeWorkerThreads, "runtime-worker-threads", "N", 0, "GOMAXPROCS; 0 = Go's default (the container's CPU quota).")
}

func (s *flagSet) registerTelemetry() {
	c := s.cfg

	s.section("Telemetry")
	s.add(newLogLevel(&c.Telemetry.LogLevel, slog.LevelInfo), "log-level", "LEVEL", "Log level: debug, info, warn or error.")
	s.bool(&c.Telemetry.LogJSON, "log-json", "Write logs as JSON lines.")
	s.bool(&c.Telemetry.Pprof, "enable-pprof", "Serve Go profiling endpoints under /debug/pprof/ on the admin listener (guarded by the admin API key).")
	s.str(&c.Telemetry.OTLPTracesEndpoint, "otlp-traces-endpoint", "ENDPOINT", "", "OTLP/gRPC trace collector as host:port or URL; empty = no export.")
	s.float(&c.Telemetry.TraceSampleRatio, "trace-sample-ratio", "RATIO", 1.0, "Fraction of root traces sampled, 0 to 1.")
	s.bool(&c.Telemetry.EnableTrace, "enable-trace", "Export traces to --otlp-traces-endpoint, or localhost:4317 when it is empty (SMG's default).")
	s.str(&c.Telemetry.LogDir, "log-dir", "DIR", "", "Also write logs to DIR/sluice.YYYY-MM-DD (a new file each UTC day); empty = stderr only.")
	s.str(&c.Telemetry.MetricsHost, "prometheus-host", "ADDR", "", "Address of the separate metrics listener (default: --host).")
	s.int(&c.Telemetry.MetricsPort, "prometheus-port", "PORT", -1, "Serve /metrics also on this port (0 = a free port); -1 = only on --port.")
	s.add(floatListValue{&c.Telemetry.DurationBuckets}, "prometheus-duration-buckets", "SECS", "Buckets of the request duration and time-to-first-token histograms, in seconds; repeatable, or several after one flag.")
}

func (s *flagSet) registerWorkers() {
	c := s.cfg
	const sec = time.Second

	s.section("Workers")
	s.addUnbound(urlListValue{&s.workerURLs}, "worker-urls", "URLS", "Regular-mode workers; repeatable, and one value may list several URLs separated by commas or spaces.")
	s.bool(&c.Workers.PDDisaggregation, "pd-disaggregation", "Prefill/decode disaggregated mode: route each request to a prefill and a decode worker.")
	s.addUnbound(prefillListValue{&s.prefill}, "prefill", "URL [PORT]", "Prefill worker, optionally followed by its bootstrap port (or \"none\"); repeatable; needs --pd-disaggregation.")
	s.addUnbound(stringListValue{&s.decode}, "decode", "URL", "Decode worker; repeatable; needs --pd-disaggregation.")
	s.int(&c.Workers.DPSize, "dp-size", "N", 0, "Data-parallel ranks of workers given by flags whose engine does not report dp_size in its server info (SGLang does); 0 = one rank.")
	s.str(&c.Workers.KVConnector, "kv-connector", "NAME", "nixl", "KV connector of vLLM workers that do not show theirs: nixl or mooncake. A vLLM prefill engine whose Mooncake bootstrap server answers /query is detected as mooncake.")
	s.str(&c.Workers.Runtime, "runtime", "NAME", ProtocolSGLang, "Engine protocol of http(s) workers whose engine cannot be identified: sglang or vllm. The protocol is detected from each engine (GET /v1/models owned_by, /version, /get_server_info); given explicitly, it also names the engine gRPC of grpc:// workers, where trtllm (TensorRT-LLM's, regular workers only) is accepted too; without it a grpc:// worker is asked which engine's own gRPC it speaks (GetModelInfo; served with --tokenizer-path's tokenizer) and otherwise speaks the sluice.worker.v1 protocol.")
	s.str(&c.Workers.ModelID, "model-id", "NAME", "", "Model name assumed for flag workers whose engine does not report one.")
	s.dur(&c.Workers.DrainSettle, sec, "drain-settle-secs", "SECS", 5*sec, "DELETE /workers/{id} drains the worker this long (in-flight requests finish) before removing it; 0 = at once.")
	s.dur(&c.Workers.UpstreamIdleTimeout, sec, "upstream-pool-idle-timeout-secs", "SECS", 90*sec, "Close pooled engine connections idle this long; 0 = never.")
}

func (s *flagSet) registerDiscovery() {
	c := s.cfg

	s.section("Service discovery (Kubernetes)")
	s.bool(&c.Discovery.Enabled, "service-discovery", "Discover workers from Kubernetes pods (in-cluster credentials, or $KUBECONFIG).")
	s.add(selectorValue{&c.Discovery.Selector}, "selector", "K=V", "Label selector of regular-mode worker pods; repeatable, or comma-separated pairs; all must match.")
	s.add(selectorValue{&c.Discovery.PrefillSelector}, "prefill-selector", "K=V", "Label selector of prefill pods (PD mode); repeatable. Bootstrap port from the pod annotation sglang.ai/bootstrap-port.")
	s.add(selectorValue{&c.Discovery.DecodeSelector}, "decode-selector", "K=V", "Label selector of decode pods (PD mode); repeatable.")
	s.str(&c.Discovery.Namespace, "service-discovery-namespace", "NS", "", "Only watch this namespace; empty = every namespace the RBAC allows.")
	s.int(&c.Discovery.Port, "service-discovery-port", "PORT", 80, "Engine port on each discovered pod.")
	s.str(&c.Discovery.Protocol, "service-discovery-protocol", "PROTO", "http", "How discovered engines are spoken to: http, or grpc (their own gRPC: SGLang --grpc-mode, vLLM's gRPC server; the gateway tokenizes, and streams can migrate off a decode engine that dies).")
	s.str(&c.Discovery.InferencePool, "inference-pool", "NAME", "", "Discover the pods of this InferencePool (inference.networking.k8s.io/v1) in --service-discovery-namespace: its spec.selector picks them (ANDed with --selector, or with --prefill-selector/--decode-selector for the roles) and its spec.targetPorts is the engine port; the pool may be created, edited or deleted while the gateway runs.")
	s.add(modelIDSourceValue{&c.Discovery.ModelIDFrom}, "model-id-from", "SOURCE", "Model id of discovered pods: namespace, label:KEY or annotation:KEY; when absent on a pod, or empty, the engine is asked. A pod whose model is unknown is not routed to.")
}

func (s *flagSet) registerPlacement() {
	c := s.cfg
	const sec = time.Second

	s.section("Placement")
	policies := strings.Join(PolicyNames(), ", ")
	s.str(&c.Placement.Policy, "policy", "NAME", PolicyCacheAware, "Routing policy: "+policies+".")
	s.str(&c.Placement.PrefillPolicy, "prefill-policy", "NAME", "", "PD prefill policy; empty = --policy.")
	s.str(&c.Placement.DecodePolicy, "decode-policy", "NAME", "", "PD decode policy; empty = --policy.")
	s.float(&c.Placement.CacheThreshold, "cache-threshold", "RATIO", 0.3, "cache_aware: prefix-match ratio above which the request follows the cache.")
	s.int64(&c.Placement.BalanceAbsThreshold, "balance-abs-threshold", "N", 64, "cache_aware: imbalanced when max load - min load exceeds this (and the relative threshold).")
	s.float(&c.Placement.BalanceRelThreshold, "balance-rel-threshold", "RATIO", 1.5, "cache_aware: imbalanced when max load exceeds this times min load (and the absolute threshold).")
	s.int(&c.Placement.MaxTreeSize, "max-tree-size", "N", 1<<26, "cache_aware: size bound of each radix tree, in characters per worker (a PD gateway's prefill and decode workers share a tree per model, each with its own bound; a pick that takes a worker past it trims the worker back at once, least recently sent text first; --eviction-interval-secs trims every tree as well).")
	s.dur(&c.Placement.EvictionInterval, sec, "eviction-interval-secs", "SECS", 120*sec, "cache_aware: how often trees are trimmed to --max-tree-size.")
	s.int(&c.Placement.VirtualNodes, "virtual-nodes", "N", 150, "consistent_hashing: hash-ring points per worker.")
	s.boolOn(&c.Placement.DPAware, "dp-aware", "Place requests on the data-parallel ranks of engines that have several (SGLang dp_size > 1, read from server info) and send the rank hints; --dp-aware=false lets each engine pick the rank (by bootstrap room).")
	s.add(newHeaderList(&c.Placement.RoutingKeyHeaders, "x-sluice-routing-key", "x-smg-routing-key"), "routing-key-headers", "HEADER", "Request headers holding the routing key (consistent_hashing, manual), first present wins; repeatable; a given list replaces the default.")
	s.dur(&c.Placement.StickyIdle, sec, "max-idle-secs", "SECS", 14400*sec, "manual: forget a routing key unused this long.")
	s.dur(&c.Placement.ITLSLO, sec, "predicted-itl-slo-secs", "SECS", 0, "predicted_latency: prefer the workers whose predicted inter-token latency is within this (fractions allowed); when none is, the lowest predicted TTFT wins anyway; 0 = no bound.")
	s.str(&c.Placement.AssignmentMode, "assignment-mode", "MODE", AssignRandom, "manual: how a new routing key gets its worker: random (default), min_load, min_group (fewest keys) or delegate (= min_load).")
}

func (s *flagSet) registerPrefillAdmission() {
	c := s.cfg
	const sec = time.Second

	s.section("Prefill admission (PD mode)")
	s.int(&c.Admission.MaxInflightPerWorker, "prefill-max-inflight-requests-per-worker", "N", admission.DefaultMaxInflightPerWorker, "In-flight client requests allowed per prefill worker; 0 = admission off (a negative N counts as 0).")
	s.int(&c.Admission.QueueSize, "prefill-queue-size", "N", admission.DefaultQueueSize, "Requests that may wait for a prefill slot; 0 = reject at once. Needs a positive limit.")
	s.dur(&c.Admission.QueueTimeout, sec, "prefill-queue-timeout-secs", "SECS", admission.DefaultQueueTimeout, "Longest wait for a prefill slot (fractions allowed). Needs a positive limit.")
	s.int64(&c.Admission.MaxInflightTokensPerWorker, "prefill-max-inflight-tokens-per-worker", "N", 0, "Estimated prompt tokens in prefill allowed per prefill worker, alone or with the request limit; a larger request runs alone on an idle worker; 0 = off (a negative N counts as 0).")
	s.float(&c.Admission.CharsPerToken, "prefill-token-estimate-chars-per-token", "F", 4, "Token estimate: characters of prompt text per token (token-id prompts count exactly). Needs a token budget.")
	s.add(bandsValue{&c.Admission.Bands}, "prefill-priority-bands", "NAME:MIN,...", "Priority bands, lowest first, each with the lowest priority it takes (X-Sluice-Priority header or the body's priority; none = 0), e.g. low:-10,default:0,high:10; empty = no priorities. Needs admission.")
	s.dur(&c.Admission.Aging, sec, "prefill-priority-aging-secs", "SECS", admission.DefaultAging, "A waiting request rises one band per this much wait, so low bands are never starved. Used with priority bands.")
	s.bool(&c.Admission.EarlyRejection, "prefill-early-rejection", "Reject at once (429 pd_prefill_queue_timeout) a request whose predicted wait exceeds the queue timeout or its X-Sluice-Deadline-Ms. Needs admission.")
	s.add(rangeValue{&c.Admission.Adaptive.Min, &c.Admission.Adaptive.Max}, "prefill-adaptive-limit", "MIN:MAX", "Adapt each prefill worker's request limit inside MIN:MAX from the measured prefill time per token; the request limit, if given, is the starting point; empty = fixed.")
}

func (s *flagSet) registerDecodeSeats() {
	c := s.cfg

	s.section("Decode seats (PD mode): the gate also bounds each decode worker")
	s.add(decodeLimitValue{&c.Admission.DecodeMaxInflightPerWorker, &c.Admission.DecodeAuto}, "decode-max-inflight-requests-per-worker", "N|auto",
		"PD requests allowed per decode worker (per data-parallel rank), from admission until the decode leg ends; a request needs a free prefill slot and a free decode seat, else it waits in the one queue (429 pd_decode_queue_full / pd_decode_queue_timeout when decode held it back). auto = each engine's own window (SGLang server info max_running_requests per rank, else the declared --decode-window); 0 = off (a negative N counts as 0).")
	s.int(&c.Admission.DecodeWindow, "decode-window", "N", 0, "Declared running window per rank of decode workers given by flags whose engine does not report one (vLLM: its --max-num-seqs), used by --decode-max-inflight-requests-per-worker auto; 0 = unknown.")
	s.int64(&c.Admission.LocalPrefillMaxTokens, "pd-local-prefill-max-tokens", "T", 0, "A PD request whose estimated uncached prompt is below T tokens goes to its decode worker alone when that worker is a vLLM engine of KV role kv_both (--decode-kv-role), which prefills it itself; 0 = off. With decode seats the local request holds a seat there, and one that would wait for a prefill slot while such a worker has a seat goes there alone too.")
	s.str(&c.Workers.DecodeKVRole, "decode-kv-role", "ROLE", "", "Declared KV connector role of flag-given vLLM decode workers: kv_both (the engine can also prefill alone, for --pd-local-prefill-max-tokens) or empty. Refused for SGLang decode workers, which cannot prefill on their own.")
	s.int(&c.Load.DecodeOverloadWaitingRequests, "decode-overload-waiting-requests", "N", -1, "A decode worker whose engine reports more than N waiting requests gets no new seat; -1 = off. Needs decode seats.")
	s.float(&c.Load.DecodeMaxKVUsage, "decode-max-kv-usage", "F", 0, "A decode worker whose engine reports a KV cache usage above F (0..1, e.g. 0.9) gets no new seat; 0 = off. Needs decode seats.")
}

func (s *flagSet) registerEngineLoad() {
	c := s.cfg
	const sec = time.Second

	s.section("Engine load")
	s.dur(&c.Load.Interval, sec, "engine-load-interval-secs", "SECS", DefaultEngineLoadInterval, "How often each engine is asked for its own load (sluice_worker_engine_* metrics, least_load, the overload check); default 15, or 1 when least_load, predicted_latency or --worker-overload-waiting-requests reads the loads; 0 = never.")
	s.alias("load-monitor-interval-secs", "engine-load-interval-secs", "Another name of --engine-load-interval-secs.")
	s.int(&c.Load.OverloadWaitingRequests, "worker-overload-waiting-requests", "N", -1, "A prefill worker whose engine reports more than N waiting requests counts as at capacity for admission; -1 = off. Needs admission.")
}

func (s *flagSet) registerClusterAdmission() {
	c := s.cfg
	const sec, ms = time.Second, time.Millisecond

	s.section("Cluster admission (one limit for all gateway replicas)")
	s.str(&c.Cluster.Mode, "admission-coordination", "MODE", "", "off, static (--admission-peers) or kubernetes (headless Service + Lease): the per-worker limit becomes the fleet's, each replica enforcing a leased, demand-weighted share. Empty = static when --admission-peers is given, else off.")
	s.add(urlListValue{&c.Cluster.Peers}, "admission-peers", "URLS", "Base URL of every replica's admin listener (http://host:port), this one included; repeatable or comma-separated. A replica finds itself by its own listen address; the lowest live one coordinates.")
	s.dur(&c.Cluster.ExchangePeriod, sec, "admission-exchange-period-secs", "SECS", 250*ms, "How often each replica reports its demand and receives its shares.")
	s.dur(&c.Cluster.Lease, sec, "admission-lease-secs", "SECS", 2*sec, "How long a share holds without a new exchange (then: an even split, never above the last share); at least twice the exchange period. Kubernetes: also the Lease duration (whole seconds).")
	s.str(&c.Cluster.Service, "admission-service", "NAME", "", "Kubernetes mode: the gateway's headless Service, whose endpoints are the replicas.")
	s.str(&c.Cluster.Namespace, "admission-namespace", "NS", "", "Kubernetes mode: namespace of the Service and the Lease; empty = the pod's own ($POD_NAMESPACE or the service account's).")
	s.str(&c.Cluster.LeaseName, "admission-lease-name", "NAME", "sluice-admission", "Kubernetes mode: the coordination.k8s.io Lease whose holder coordinates.")
}

func (s *flagSet) registerHealthChecks() {
	c := s.cfg
	const sec = time.Second

	s.section("Health checks")
	s.dur(&c.Health.Interval, sec, "health-check-interval-secs", "SECS", 60*sec, "Time between probes of one worker.")
	s.dur(&c.Health.Timeout, sec, "health-check-timeout-secs", "SECS", 5*sec, "Timeout of one probe.")
	s.int(&c.Health.SuccessThreshold, "health-success-threshold", "N", 2, "Consecutive successful probes that make a worker ready.")
	s.int(&c.Health.FailureThreshold, "health-failure-threshold", "N", 3, "Consecutive failed probes that make a worker not ready.")
	s.str(&c.Health.Endpoint, "health-check-endpoint", "PATH", "/health", "Path probed on each worker.")
	s.bool(&c.Health.Disabled, "disable-health-check", "Do not probe workers; treat them as healthy.")
	s.bool(&c.Health.RemoveUnhealthyWorkers, "remove-unhealthy-workers", "Let long-failed workers recover (SMG); sluice always keeps probing them, so they come back when healthy.")
}

func (s *flagSet) registerBreaker() {
	c := s.cfg
	const sec = time.Second

	s.section("Circuit breaker")
	s.int(&c.Breaker.FailureThreshold, "cb-failure-threshold", "N", 10, "Consecutive failures that open a worker's breaker.")
	s.int(&c.Breaker.SuccessThreshold, "cb-success-threshold", "N", 3, "Successes in half-open state that close it.")
	s.dur(&c.Breaker.Timeout, sec, "cb-timeout-duration-secs", "SECS", 60*sec, "Time an open breaker waits before turning half-open.")
	s.bool(&c.Breaker.Disabled, "disable-circuit-breaker", "Turn circuit breakers off.")
	s.bool(&c.Breaker.HealthRecoveryDisabled, "disable-cb-health-recovery", "Keep an open breaker open until --cb-timeout-duration-secs even when active health probes pass (by default a passing probe turns it half-open at once).")
	s.dur(&c.Breaker.Window, sec, "cb-window-duration-secs", "SECS", 120*sec, "SMG's breaker window; validated, unused (breakers count consecutive failures, as SMG's do).")
}

func (s *flagSet) registerRetries() {
	c := s.cfg
	const sec, ms = time.Second, time.Millisecond

	s.section("Retries")
	s.int(&c.Retry.MaxRetries, "retry-max-retries", "N", 5, "Attempts in total, the first included.")
	s.dur(&c.Retry.InitialBackoff, ms, "retry-initial-backoff-ms", "MS", 50*ms, "Backoff before the second attempt.")
	s.dur(&c.Retry.MaxBackoff, ms, "retry-max-backoff-ms", "MS", 30*sec, "Cap on every backoff.")
	s.float(&c.Retry.BackoffMultiplier, "retry-backoff-multiplier", "X", 1.5, "Backoff growth per attempt, >= 1.")
	s.float(&c.Retry.JitterFactor, "retry-jitter-factor", "F", 0.2, "Random spread of each backoff as a fraction, 0 to 1.")
	s.bool(&c.Retry.Disabled, "disable-retries", "Make every request a single attempt.")
	s.int(&c.Retry.MaxMigrations, "max-migrations", "N", 2, "Times one streamed PD request whose decode engine breaks off mid-stream is continued on another pair (engine-gRPC workers: the prompt and the tokens generated are prefilled again); 0 = never, the stream ends with an error event.")
}

func (s *flagSet) section(title string) {
	s.sections = append(s.sections, flagSection{title: title})
}

func (s *flagSet) record(name, metavar string) {
	cur := &s.sections[len(s.sections)-1]
	cur.names = append(cur.names, name)
	s.metavar[name] = metavar
}

func (s *flagSet) add(v flag.Value, name, metavar, usage string) {
	s.fs.Var(v, name, usage)
	s.record(name, metavar)
}

func (s *flagSet) str(p *string, name, metavar, def, usage string) {
	s.fs.StringVar(p, name, def, usage)
	s.record(name, metavar)
}

func (s *flagSet) int(p *int, name, metavar string, def int, usage string) {
	s.fs.IntVar(p, name, def, usage)
	s.record(name, metavar)
}

func (s *flagSet) int64(p *int64, name, metavar string, def int64, usage string) {
	s.fs.Int64Var(p, name, def, usage)
	s.record(name, metavar)
}

func (s *flagSet) float(p *float64, name, metavar string, def float64, usage string) {
	s.fs.Float64Var(p, name, def, usage)
	s.record(name, metavar)
}

func (s *flagSet) bool(p *bool, name, usage string) {
	s.fs.BoolVar(p, name, false, usage)
	s.record(name, "")
}

// boolOn registers a boolean flag that defaults to true (turned off with --name=false).
func (s *flagSet) boolOn(p *bool, name, usage string) {
	s.fs.BoolVar(p, name, true, usage)
	s.record(name, "")
}

// dur registers a duration flag counted in unit (1 s for the *-secs flags).
func (s *flagSet) dur(p *time.Duration, unit time.Duration, name, metavar string, def time.Duration, usage string) {
	*p = def
	s.add(durationValue{p: p, unit: unit}, name, metavar, usage)
}

// size registers a byte-count flag (a number with an optional unit).
func (s *flagSet) size(p *int64, name, metavar string, def int64, usage string) {
	*p = def
	s.add(sizeValue{p}, name, metavar, usage)
}

// addUnbound registers a flag whose value the flag set keeps raw until finish makes it a setting.
func (s *flagSet) addUnbound(v flag.Value, name, metavar, usage string) {
	s.add(v, name, metavar, usage)
	s.unbound[name] = true
}

// alias registers name as a second name of the setting target, sharing its value.
func (s *flagSet) alias(name, target, usage string) {
	s.fs.Var(s.fs.Lookup(target).Value, name, usage)
	s.record(name, s.metavar[target])
	s.aliases[name] = true
}

// printUsage writes the help text: every flag, grouped, with its default
// (zero defaults included, unlike flag.PrintDefaults).
func (s *flagSet) printUsage(w io.Writer) {
	var b strings.Builder
	b.WriteString("Usage: sluice serve [flags]\n\n")
	b.WriteString("Flags take one or two dashes; values go as --name=value or --name value\n")
	b.WriteString("(booleans: --name or --name=false). Every flag can also be set in the YAML\n")
	b.WriteString("file given by --config, keyed by flag name. Precedence: command line, then\n")
	b.WriteString("environment (API keys only), then file, then default.\n")
	for _, sec := range s.sections {
		fmt.Fprintf(&b, "\n%s:\n", sec.title)
		for _, name := range sec.names {
			f := s.fs.Lookup(name)
			fmt.Fprintf(&b, "  --%s", name)
			if mv := s.metavar[name]; mv != "" {
				fmt.Fprintf(&b, " %s", mv)
			}
			def := f.DefValue
			if def == "" {
				def = `""`
			}
			fmt.Fprintf(&b, "\n        %s (default %s)\n", f.Usage, def)
		}
	}
	_, _ = io.WriteString(w, b.String())
}

// Parse builds a validated Config from the arguments that follow
// `sluice serve`, the environment and the --config file. On -h or --help it
// writes the usage, with every default, to stderr and returns flag.ErrHelp.
// Errors are returned, not printed; a validation error lists every problem,
// one per line.
func Parse(args []string, stderr io.Writer) (*Config, error) {
	return parse(args, stderr, os.LookupEnv)
}

func parse(args []string, stderr io.Writer, lookupEnv func(string) (string, bool)) (*Config, error) {
	s := newFlagSet()
	args, err := s.smgArgs(args)
	if err != nil {
		return nil, err
	}
	if err := s.fs.Parse(s.joinPrefillPorts(args)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			s.printUsage(stderr)
			return nil, flag.ErrHelp
		}
		return nil, err
	}
	if s.fs.NArg() > 0 {
		return nil, unexpectedArgError(s.fs.Arg(0))
	}

	// Flags on the command line (and, below, from the environment) shadow
	// the file; fs.Set marks file values as set too, so this is taken first.
	shadow := map[string]bool{}
	s.fs.Visit(func(f *flag.Flag) { shadow[f.Name] = true })
	for _, e := range envFallback() {
		if shadow[e.flag] {
			continue
		}
		if v, ok := lookupEnv(e.env); ok && v != "" {
			if err := s.fs.Set(e.flag, v); err != nil {
				return nil, fmt.Errorf("environment %s: %w", e.env, err)
			}
			shadow[e.flag] = true
		}
	}
	if path := s.cfg.Server.ConfigFile; path != "" {
		if err := s.applyFile(path, shadow); err != nil {
			return nil, err
		}
	}

	s.finish()
	if err := s.cfg.Validate(); err != nil {
		return nil, err
	}
	return s.cfg, nil
}

func unexpectedArgError(arg string) error {
	hint := "sluice serve takes only flags; see --help"
	switch {
	case arg == "true" || arg == "false":
		hint = "boolean flags take their value as --name=" + arg
	case strings.Contains(arg, "=") && !strings.Contains(arg, "://"):
		hint = "a selector takes one value per flag: repeat it (--selector a=b --selector c=d) or join the pairs with commas (a=b,c=d)"
	case isBootstrapPortToken(arg):
		hint = "only --prefill takes a second value (its bootstrap port)"
	}
	return fmt.Errorf("unexpected argument %q: %s", arg, hint)
}

// joinPrefillPorts rewrites `--prefill URL [PORT]` (and `--prefill=URL
// [PORT]`) into the single argument `--prefill=URL PORT`, because the flag
// package takes one value per flag and stops at the first non-flag argument.
// Values of other flags are skipped over so that a value that looks like
// --prefill is not rewritten.
func (s *flagSet) joinPrefillPorts(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" || len(arg) < 2 || arg[0] != '-' {
			// End of flags: the flag package stops here too.
			return append(out, args[i:]...)
		}
		name := strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-")
		name, value, hasValue := strings.Cut(name, "=")
		if name != "prefill" {
			out = append(out, arg)
			f := s.fs.Lookup(name)
			if f != nil && !hasValue && !isBoolFlag(f) && i+1 < len(args) {
				i++
				out = append(out, args[i])
			}
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				// Let the flag package report the missing value.
				out = append(out, arg)
				continue
			}
			i++
			value = args[i]
		}
		if i+1 < len(args) && isBootstrapPortToken(args[i+1]) {
			i++
			value += " " + args[i]
		}
		out = append(out, "--prefill="+value)
	}
	return out
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// finish records which flags were set by any source and derives the settings that depend on
// others: this is the one place a default is not where its flag is declared.
//   - --prefill-policy and --decode-policy default to --policy;
//   - the flag workers take their protocol from their URL scheme;
//   - --prometheus-host defaults to --host;
//   - --enable-trace without --otlp-traces-endpoint exports to SMG's default endpoint;
//   - --admission-coordination defaults to static when --admission-peers is given (cluster.go).
//
// The engine-load interval in force, 1 s instead of the default when a decision reads the loads and
// no interval was given, is computed on read instead ([Config.LoadMonitorInterval]), so that a
// configuration changed by hand after parsing still gets it.
func (s *flagSet) finish() {
	c := s.cfg
	c.explicit = map[string]bool{}
	s.fs.Visit(func(f *flag.Flag) { c.explicit[f.Name] = true })
	for _, a := range smgAliases { // a setting given under its SMG name was given
		if c.explicit[a.name] {
			c.explicit[a.target] = true
		}
	}
	// Off has one spelling, 0, the one the admin API reports and takes back; a negative bound (the old
	// default, -1, or "auto"'s placeholder) is off too.
	c.Admission.MaxInflightPerWorker = max(c.Admission.MaxInflightPerWorker, 0)
	c.Admission.MaxInflightTokensPerWorker = max(c.Admission.MaxInflightTokensPerWorker, 0)
	c.Admission.DecodeMaxInflightPerWorker = max(c.Admission.DecodeMaxInflightPerWorker, 0)
	if c.Placement.PrefillPolicy == "" {
		c.Placement.PrefillPolicy = c.Placement.Policy
	}
	if c.Placement.DecodePolicy == "" {
		c.Placement.DecodePolicy = c.Placement.Policy
	}
	c.Workers.Initial = nil
	for _, u := range s.workerURLs {
		c.Workers.Initial = append(c.Workers.Initial, s.worker(u, RoleRegular, 0))
	}
	for _, p := range s.prefill {
		c.Workers.Initial = append(c.Workers.Initial, s.worker(p.url, RolePrefill, p.bootstrapPort))
	}
	for _, u := range s.decode {
		c.Workers.Initial = append(c.Workers.Initial, s.worker(u, RoleDecode, 0))
	}
	if !c.explicit["prometheus-host"] {
		// The metrics listener binds where the gateway was told to listen: --host 127.0.0.1 must not
		// leave /metrics open on every interface.
		c.Telemetry.MetricsHost = c.Server.Host
	}
	if c.Telemetry.EnableTrace && c.Telemetry.OTLPTracesEndpoint == "" {
		c.Telemetry.OTLPTracesEndpoint = smgOTLPDefault
	}
	c.Cluster.Mode = c.Cluster.mode()
	c.defaultTenantMaxQueued()
	c.useModelPath() // tokenizer.go
	slices.Sort(c.InertSMGFlags)
	c.InertSMGFlags = slices.Compact(c.InertSMGFlags)
}

// worker builds a flag worker. An http(s) worker's protocol is left empty: the gateway detects it
// from the engine and falls back to --runtime only when the engine answers none of the probes.
func (s *flagSet) worker(rawURL, role string, bootstrapPort int) WorkerFlag {
	proto := ""
	if scheme, _, ok := strings.Cut(rawURL, "://"); ok && (strings.EqualFold(scheme, "grpc") || strings.EqualFold(scheme, "grpcs")) {
		proto = ProtocolGRPC
		// --runtime given explicitly names the engine gRPC a grpc:// worker speaks (SGLang's or vLLM's);
		// otherwise the gateway asks the worker which protocol it speaks.
		s.fs.Visit(func(f *flag.Flag) {
			if f.Name == "runtime" || f.Name == "backend" {
				proto = s.cfg.Workers.Runtime
			}
		})
	}
	// A trailing slash is dropped so "http://h:1/" and "http://h:1" are the
	// same worker and paths join cleanly; a bare "http://" is left for
	// Validate to reject as typed.
	if trimmed := strings.TrimRight(rawURL, "/"); strings.Contains(trimmed, "://") {
		rawURL = trimmed
	}
	return WorkerFlag{
		URL:           rawURL,
		Role:          role,
		BootstrapPort: bootstrapPort,
		Protocol:      proto,
	}
}

// FlagNames returns the name of every `sluice serve` flag (= config file key),
// in help order. The Helm chart's test uses it to check that every setting is
// reachable from the chart's values.
func FlagNames() []string {
	s := newFlagSet()
	var out []string
	for _, sec := range s.sections {
		if sec.title == compatSection || sec.title == refusedSection { // SMG aliases, accepted and refused flags
			continue
		}
		out = append(out, sec.names...)
	}
	return out
}
