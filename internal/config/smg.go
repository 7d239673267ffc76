package config

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Command lines of the Rust gateway (SMG, smg-project/smg, model_gateway/src/main.rs CliArgs) run
// unchanged: every SMG flag is either a sluice setting under the same name (or an alias of one), a
// flag sluice accepts because it already behaves as the flag asks, or a refusal that names the flag,
// says why and what to use instead. Nothing falls through to the flag package's generic "flag
// provided but not defined". docs/migrating-from-smg.md is the table for people; smgFlags below is
// the table for the parser, and smg_test.go runs real SMG command lines through it.

// SMGConfig holds the settings that came to sluice with parity with the Rust gateway: a gateway-wide
// concurrency limit, a separate metrics listener, a probe listener, header names, the manual policy's
// tuning, logs to files. Flag names are SMG's.
type SMGConfig struct {
	// Concurrency is the gateway-wide limit on requests in flight, with its queue.
	Concurrency ConcurrencyConfig
	// MetricsHost and MetricsPort bind a separate listener serving only /metrics
	// (--prometheus-host, default --host; --prometheus-port, default -1 = no separate listener,
	// 0 = a free port). /metrics stays on the main port too.
	MetricsHost string
	MetricsPort int
	// DurationBuckets replaces the buckets of the request duration and time-to-first-token histograms
	// (--prometheus-duration-buckets, repeatable; default none = sluice's buckets).
	DurationBuckets []float64
	// HealthCheckPort, when non-zero, serves /liveness, /readiness and /health on a listener of its
	// own, so probes answer even when the main port is saturated (--health-check-port, default 0 = off).
	HealthCheckPort int
	// RequestIDHeaders are the request headers read, in order, for a request's id
	// (--request-id-headers, repeatable; default x-request-id, x-correlation-id, x-trace-id,
	// request-id, as SMG).
	RequestIDHeaders []string
	// RoutingKeyHeaders are the request headers read, in order, for the routing key of
	// consistent_hashing and manual (--routing-key-headers, repeatable; default
	// x-sluice-routing-key, x-smg-routing-key).
	RoutingKeyHeaders []string
	// DrainSettle is how long a worker removed through SMG's DELETE /workers/{id} keeps draining
	// (in-flight requests finish, no new ones) before it is removed (--drain-settle-secs, default 5s;
	// 0 = at once).
	DrainSettle time.Duration
	// LogDir, when set, also writes the log lines to a file in this directory, a new one per day
	// (--log-dir, default "" = stderr only).
	LogDir string
	// UpstreamIdleTimeout closes pooled connections to engines idle this long
	// (--upstream-pool-idle-timeout-secs, default 90s; 0 = never).
	UpstreamIdleTimeout time.Duration
	// StickyIdle forgets a manual-policy routing key unused this long (--max-idle-secs, alias
	// --sticky-key-idle-secs, default 14400s).
	StickyIdle time.Duration
	// AssignmentMode is how the manual policy places a routing key it has not seen: random,
	// min_load, min_group or delegate (= min_load, as SMG's manual policy does) (--assignment-mode,
	// default random).
	AssignmentMode string
	// CBWindow is SMG's circuit-breaker failure window (--cb-window-duration-secs, default 120s). SMG
	// validates it and never reads it (its breaker counts consecutive failures, as sluice's does); so
	// does sluice.
	CBWindow time.Duration
	// RemoveUnhealthyWorkers is SMG's --remove-unhealthy-workers (alias --worker-auto-recovery): let a
	// long-failed worker recover. sluice never parks a worker in a terminal state, so it recovers
	// either way; see docs/migrating-from-smg.md.
	RemoveUnhealthyWorkers bool
	// EnableTrace turns trace export on, to --otlp-traces-endpoint or SMG's default localhost:4317
	// (--enable-trace).
	EnableTrace bool
	// RuntimeWorkerThreads sets GOMAXPROCS (--runtime-worker-threads, default 0 = Go's default, which
	// follows the container's CPU quota).
	RuntimeWorkerThreads int
	// Inert lists the SMG flags given that sluice accepts without anything to do, for one startup log
	// line (see smgFlags: each says why it needs nothing).
	Inert []string
}

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

// smgOTLPDefault is SMG's --otlp-traces-endpoint default, used by --enable-trace without one.
const smgOTLPDefault = "localhost:4317"

// defaultRequestIDHeaders are SMG's (model_gateway/src/server.rs).
func defaultRequestIDHeaders() []string {
	return []string{"x-request-id", "x-correlation-id", "x-trace-id", "request-id"}
}

func defaultRoutingKeyHeaders() []string {
	return []string{"x-sluice-routing-key", "x-smg-routing-key"}
}

// Policy names sluice takes from SMG beyond its own.
const PolicyManual = "manual"

// Assignment modes of the manual policy.
const (
	AssignRandom   = "random"
	AssignMinLoad  = "min_load"
	AssignMinGroup = "min_group"
	AssignDelegate = "delegate"
)

// smgPolicyRefusals are SMG policies sluice does not have, with what to use instead.
var smgPolicyRefusals = map[string]string{
	"passthrough": "sluice always picks a worker; with one worker any policy sends everything to it (use round_robin)",
	"prefix_hash": "use cache_aware (prefix tree on the prompt text) or consistent_hashing with a routing-key header",
	"bucket":      "sluice has no length buckets; use cache_aware or power_of_two",
}

// argKind is how an SMG flag takes its value on the command line.
type argKind uint8

const (
	argBool    argKind = iota // --name (or --name=false)
	argOne                    // --name VALUE
	argMulti                  // --name V1 V2 ... (clap num_args = 0..): values up to the next flag
	argURLPort                // --name URL [PORT|none], as --prefill
)

// smgRefusal is an SMG flag sluice refuses: reason says why and what to use instead, in one line.
type smgRefusal struct {
	kind   argKind
	reason string
}

// smgRefused lists the SMG flags sluice does not support. Each reason names what to do instead.
var smgRefused = map[string]smgRefusal{
	// Cache-aware and load-balancing knobs of policies or indexes sluice does not have.
	"balance-token-usage-threshold":     {argOne, "sluice's cache_aware balances on in-flight requests, not engine KV usage; tune --balance-abs-threshold and --balance-rel-threshold"},
	"overload-token-usage-threshold":    {argOne, "sluice's cache_aware does not read engine KV usage; bound load with prefill admission (--prefill-max-inflight-requests-per-worker) or route with least_load"},
	"worker-overload-protection":        {argBool, "sluice's overload check reads engine queues, not KV usage (SMG's default 0.9); give --worker-overload-waiting-requests N with prefill admission"},
	"worker-overload-token-usage":       {argOne, "sluice's overload check reads engine queues, not KV usage; give --worker-overload-waiting-requests N with prefill admission"},
	"overlap-decay":                     {argOne, "sluice's cache_aware has no backlog decay; tune --balance-abs-threshold and --balance-rel-threshold"},
	"selection-temperature":             {argOne, "sluice's cache_aware picks the best match deterministically; remove the flag"},
	"cache-boundaries":                  {argOne, "sluice has no hash cache index; remove the flag"},
	"cache-index":                       {argOne, "sluice's cache_aware is always a prefix tree on the prompt text; remove the flag"},
	"cache-ttl-secs":                    {argOne, "sluice has no hash cache index; tree entries are trimmed every --eviction-interval-secs"},
	"kv-indexer-ttl-secs":               {argOne, "sluice does not consume engine KV events; remove the flag"},
	"kv-indexer-max-entries":            {argOne, "sluice does not consume engine KV events; bound the tree with --max-tree-size"},
	"prefix-token-count":                {argOne, "prefix_hash is not a sluice policy; use cache_aware or consistent_hashing"},
	"prefix-hash-load-factor":           {argOne, "prefix_hash is not a sluice policy; use cache_aware or consistent_hashing"},
	"prefix-hash-balance-abs-threshold": {argOne, "prefix_hash is not a sluice policy; use cache_aware or consistent_hashing"},
	"least-load-kv-pressure-weight":     {argOne, "sluice's least_load ranks workers by the running and waiting requests their engines report (KV usage breaks ties), with no token-work model to tune; remove the flag"},
	"least-load-default-throughput":     {argOne, "sluice's least_load has no token-work model (it ranks by reported running and waiting requests); remove the flag"},
	"least-load-mean-prefill-tokens":    {argOne, "sluice's least_load has no token-work model (it ranks by reported running and waiting requests); remove the flag"},
	"least-load-max-waiting-requests":   {argOne, "sluice's least_load skips no worker; give --worker-overload-waiting-requests N with prefill admission (a prefill worker over it counts as at capacity)"},
	"dp-minimum-tokens-scheduler":       {argBool, "sluice places data-parallel ranks itself with the policy (--dp-aware); remove the flag"},
	"routing-key-override":              {argBool, "sluice derives no sticky key from the body's rid; use --policy manual or consistent_hashing with a routing-key header"},
	"sticky-sessions":                   {argBool, "sluice derives no sticky key from the body's rid; use --policy manual or consistent_hashing with a routing-key header"},
	// Modes and transports sluice does not speak.
	"epd-disaggregation":             {argBool, "sluice has no encode stage; run vision models as regular or PD workers"},
	"encode":                         {argURLPort, "sluice has no encode stage; run vision models as regular or PD workers"},
	"encode-policy":                  {argOne, "sluice has no encode stage"},
	"encode-selector":                {argMulti, "sluice has no encode stage"},
	"zmq-engine-count":               {argOne, "sluice does not speak the engines' ZMQ protocol; give the engines' HTTP URLs"},
	"upstream-http2":                 {argBool, "sluice speaks HTTP/1.1 to http:// engines (https:// negotiates HTTP/2); remove the flag"},
	"multimodal-tensor-transport":    {argOne, "sluice passes multimodal inputs to the engine in the request; remove the flag"},
	"multimodal-shm-min-bytes":       {argOne, "sluice passes multimodal inputs to the engine in the request; remove the flag"},
	"stream-request-bodies-over":     {argOne, "sluice reads whole request bodies (bounded by --max-payload-size and --body-read-timeout-secs); remove the flag"},
	"stream-body-stall-timeout-secs": {argOne, "sluice reads whole request bodies; a stalled client is cut by --body-read-timeout-secs"},
	"model-alias":                    {argOne, "sluice routes by the model names engines report; serve the alias from the engine (--served-model-name) or --model-id"},
	// Storage, plugins, tools.
	"history-backend":          {argOne, "sluice stores no responses or conversations: /v1/responses is a stateless passthrough to the engines"},
	"oracle-wallet-path":       {argOne, "sluice stores no responses or conversations"},
	"oracle-tns-alias":         {argOne, "sluice stores no responses or conversations"},
	"oracle-dsn":               {argOne, "sluice stores no responses or conversations"},
	"oracle-user":              {argOne, "sluice stores no responses or conversations"},
	"oracle-password":          {argOne, "sluice stores no responses or conversations"},
	"oracle-external-auth":     {argBool, "sluice stores no responses or conversations"},
	"oracle-pool-min":          {argOne, "sluice stores no responses or conversations"},
	"oracle-pool-max":          {argOne, "sluice stores no responses or conversations"},
	"oracle-pool-timeout-secs": {argOne, "sluice stores no responses or conversations"},
	"postgres-db-url":          {argOne, "sluice stores no responses or conversations"},
	"postgres-pool-max-size":   {argOne, "sluice stores no responses or conversations"},
	"redis-url":                {argOne, "sluice stores no responses or conversations"},
	"redis-pool-max-size":      {argOne, "sluice stores no responses or conversations"},
	"redis-retention-days":     {argOne, "sluice stores no responses or conversations"},
	"schema-config":            {argOne, "sluice stores no responses or conversations"},
	"storage-context-headers":  {argMulti, "sluice has no storage hooks"},
	"enable-wasm":              {argBool, "sluice runs no WebAssembly plugins; put request policy in front of sluice or in the engines"},
	"storage-hook-wasm-path":   {argOne, "sluice runs no WebAssembly plugins"},
	"mcp-config-path":          {argOne, "sluice executes no MCP tools: /v1/responses and /v1/messages go to the engines as sent"},
	// Tenancy, scheduling and control-plane auth.
	"priority-scheduler-enabled":             {argBool, "sluice has no per-tenant priority classes; its priorities are prefill admission bands (--prefill-priority-bands) taken from X-Sluice-Priority or the body's priority"},
	"priority-scheduler-default-max-class":   {argOne, "sluice has no per-tenant priority classes; use --prefill-priority-bands"},
	"priority-scheduler-config":              {argOne, "sluice has no per-tenant priority classes; use --prefill-priority-bands"},
	"priority-scheduler-tenant-metric-top-n": {argOne, "sluice has no per-tenant priority classes"},
	"tenant-rate-limit-enabled":              {argBool, "sluice has no per-tenant token budgets; use --max-concurrent-requests with --rate-limit-tokens-per-second"},
	"tenant-rate-limit-config":               {argOne, "sluice has no per-tenant token budgets"},
	"trust-tenant-header":                    {argBool, "sluice identifies callers by credential only (--api-keys-file ids, JWT subjects)"},
	"tenant-header-name":                     {argOne, "sluice identifies callers by credential only (--api-keys-file ids, JWT subjects)"},
	"tenant-api-key":                         {argOne, "give per-caller keys in --api-keys-file (lines \"ID KEY\"); logs name the ID"},
	"control-plane-api-keys":                 {argOne, "use --admin-api-key, or admin lines (\"ID KEY admin\") in --api-keys-file"},
	"jwt-role-mapping":                       {argOne, "name the IdP role that grants the admin API with --jwt-admin-role"},
	"disable-audit-logging":                  {argBool, "sluice always writes one audit line per admin change; filter the logs instead"},
	// High availability mesh, WebRTC.
	"enable-mesh":         {argBool, "sluice replicas share no state by gossip; run them behind one Service (prefill admission shares limits with cluster admission)"},
	"mesh-server-name":    {argOne, "sluice has no mesh"},
	"mesh-host":           {argOne, "sluice has no mesh"},
	"mesh-advertise-host": {argOne, "sluice has no mesh"},
	"mesh-port":           {argOne, "sluice has no mesh"},
	"mesh-peer-urls":      {argMulti, "sluice has no mesh"},
	"router-selector":     {argMulti, "sluice has no mesh, so no router peers to discover"},
	"webrtc-bind-addr":    {argOne, "sluice does not serve the Realtime API"},
	"webrtc-stun-server":  {argOne, "sluice does not serve the Realtime API"},
}

// smgInert lists SMG flags sluice accepts with nothing to do: what the flag asks for is already
// sluice's behaviour, or only concerns machinery sluice does not need. The parser checks the value's
// type as SMG does; the reason is the help text.
var smgInert = []struct {
	name, metavar string
	kind          argKind
	check         func(string) error
	reason        string
}{
	{"enable-igw", "", argBool, nil, "Accepted (SMG's multi-model mode): sluice always routes each request among the workers of its model."},
	{"worker-startup-timeout-secs", "SECS", argOne, checkUint, "Accepted: sluice registers workers at once and health checks bring them in when ready; it never waits at startup."},
	{"worker-startup-delay", "SECS", argOne, checkUint, "Accepted: sluice never waits for workers at startup (see --worker-startup-timeout-secs)."},
	{"worker-startup-check-interval", "SECS", argOne, checkUint, "Accepted: workers are probed every --health-check-interval-secs."},
	{"job-queue-capacity", "N", argOne, checkPositive, "Accepted: sluice applies worker changes synchronously, without a job queue."},
	{"job-queue-concurrency", "N", argOne, checkPositive, "Accepted: sluice applies worker changes synchronously, without a job queue."},
	{"disable-load-monitoring", "", argBool, nil, "Accepted: sluice polls engine loads every --engine-load-interval-secs (faster when least_load or the overload check reads them); 0 stops the polling."},
	{"engine-metrics", "", argBool, nil, "Accepted: sluice always exports engine loads as sluice_worker_engine_* gauges, polled every --engine-load-interval-secs."},
	{"block-size", "N", argOne, checkPositive, "Accepted: sluice's cache_aware matches prompt text; the block size only shapes SMG's token trees (its Helm chart always passes it)."},
	{"model-path", "PATH", argOne, nil, "Accepted: sluice loads a tokenizer only from --tokenizer-path; engines tokenize."},
	{"model", "PATH", argOne, nil, "Accepted (alias of --model-path): sluice loads a tokenizer only from --tokenizer-path."},
	{"chat-template", "PATH", argOne, nil, "Accepted: engines apply their chat template (SMG uses this only in its gRPC pipeline)."},
	{"disable-tokenizer-autoload", "", argBool, nil, "Accepted: sluice loads no tokenizer."},
	{"tokenizer-cache-enable-l0", "", argBool, nil, "Accepted: sluice loads no tokenizer."},
	{"tokenizer-cache-l0-max-entries", "N", argOne, checkUint, "Accepted: sluice loads no tokenizer."},
	{"tokenizer-cache-enable-l1", "", argBool, nil, "Accepted: sluice loads no tokenizer."},
	{"tokenizer-cache-l1-max-memory", "BYTES", argOne, checkUint, "Accepted: sluice loads no tokenizer."},
	{"reasoning-parser", "NAME", argOne, nil, "Accepted: HTTP engines parse reasoning themselves (SMG uses this only in its gRPC pipeline)."},
	{"tool-call-parser", "NAME", argOne, nil, "Accepted: HTTP engines parse tool calls themselves (SMG uses this only in its gRPC pipeline)."},
}

func checkUint(s string) error {
	if _, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64); err != nil {
		return errors.New("want a non-negative integer")
	}
	return nil
}

func checkPositive(s string) error {
	n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil || n == 0 {
		return errors.New("want an integer >= 1")
	}
	return nil
}

// smgMulti are the flags that take several values after one flag name, as SMG's (clap num_args =
// 0..): `--worker-urls http://a http://b`. The parser turns them into one flag per value.
var smgMulti = map[string]bool{
	"worker-urls": true, "selector": true, "prefill-selector": true, "decode-selector": true,
	"routing-key-headers": true, "request-id-headers": true, "prometheus-duration-buckets": true,
	"cors-allowed-origins": true,
}

// smgParseState is what parsing the SMG flags remembers until finish.
type smgParseState struct {
	requestIDSet, routingKeySet bool // the header lists were given (replacing the defaults)
}

// isSMGList reports the list settings this file adds (a YAML sequence in the config file).
func isSMGList(name string) bool {
	return name == "routing-key-headers" || name == "request-id-headers" || name == "prometheus-duration-buckets"
}

// compatSection is the help section of SMG's aliases and accepted flags; FlagNames leaves it and
// refusedSection out (they are not settings of their own).
const compatSection = "Rust gateway (SMG) flags accepted for compatibility"

// refusedSection lists the SMG flags sluice refuses, with the reason, so --help answers for them too.
const refusedSection = "Rust gateway (SMG) flags sluice refuses (the error says why and what to use)"

// smgAliases are SMG's names of sluice settings: same value, same meaning.
var smgAliases = []struct{ name, target string }{
	{"eviction-interval", "eviction-interval-secs"},
	{"cache-match-threshold", "cache-threshold"},
	{"spill-abs-threshold", "balance-abs-threshold"},
	{"spill-rel-threshold", "balance-rel-threshold"},
	{"sticky-key-idle-secs", "max-idle-secs"},
	{"worker-auto-recovery", "remove-unhealthy-workers"},
	{"load-monitor-interval", "load-monitor-interval-secs"},
}

// registerSMG adds the SMG settings, aliases, accepted and refused flags.
func (s *flagSet) registerSMG() {
	c := s.cfg
	const sec = 1e9
	m := &c.SMG
	m.Concurrency.QueueTimeout = 60 * time.Second
	m.MetricsPort = -1
	m.DrainSettle = 5 * time.Second
	m.UpstreamIdleTimeout = 90 * time.Second
	m.StickyIdle = 14400 * time.Second
	m.CBWindow = 120 * time.Second

	s.section("Gateway concurrency limit (all inference routes, regular and PD mode)")
	s.int(&m.Concurrency.MaxConcurrent, "max-concurrent-requests", "N", -1, "Requests in flight at once through the whole gateway, streaming included; <= 0 = off. Composes with prefill admission: a request holds its gateway slot for its whole life and a prefill slot only during its prefill.")
	s.int(&m.Concurrency.QueueSize, "queue-size", "N", 100, "Requests that may wait for a gateway slot; 0 = reject at once (429). Ignored while the limit is off, as in SMG.")
	s.dur(&m.Concurrency.QueueTimeout, sec, "queue-timeout-secs", "SECS", "Longest wait for a gateway slot; then 408. Ignored while the limit is off.")
	s.int(&m.Concurrency.TokensPerSecond, "rate-limit-tokens-per-second", "N", 0, "Also refill the gateway's bucket at N tokens/s (SMG's token bucket); 0 = no refill, a pure concurrency bound.")

	s.section("Listeners and observability (SMG names)")
	s.str(&m.MetricsHost, "prometheus-host", "ADDR", "", "Address of the separate metrics listener (default: --host).")
	s.int(&m.MetricsPort, "prometheus-port", "PORT", -1, "Serve /metrics also on this port (0 = a free port); -1 = only on --port.")
	s.add(floatListValue{&m.DurationBuckets}, "prometheus-duration-buckets", "SECS", "Buckets of the request duration and time-to-first-token histograms, in seconds; repeatable, or several after one flag.")
	s.int(&m.HealthCheckPort, "health-check-port", "PORT", 0, "Also serve /liveness, /readiness and /health on this port, on a listener of their own; 0 = off.")
	s.add(headerListValue{&m.RequestIDHeaders, &s.smg.requestIDSet}, "request-id-headers", "HEADER", "Request headers holding the request id, first present wins; repeatable. Default x-request-id, x-correlation-id, x-trace-id, request-id.")
	s.add(headerListValue{&m.RoutingKeyHeaders, &s.smg.routingKeySet}, "routing-key-headers", "HEADER", "Request headers holding the routing key (consistent_hashing, manual), first present wins; repeatable. Default x-sluice-routing-key, x-smg-routing-key.")
	s.str(&m.LogDir, "log-dir", "DIR", "", "Also write logs to DIR/sluice.YYYY-MM-DD (a new file each UTC day); empty = stderr only.")
	s.bool(&m.EnableTrace, "enable-trace", "Export traces to --otlp-traces-endpoint, or localhost:4317 when it is empty (SMG's default).")
	s.int(&m.RuntimeWorkerThreads, "runtime-worker-threads", "N", 0, "GOMAXPROCS; 0 = Go's default (the container's CPU quota).")

	s.section("Workers and policies (SMG names)")
	s.dur(&m.DrainSettle, sec, "drain-settle-secs", "SECS", "DELETE /workers/{id} drains the worker this long (in-flight requests finish) before removing it; 0 = at once.")
	s.dur(&m.UpstreamIdleTimeout, sec, "upstream-pool-idle-timeout-secs", "SECS", "Close pooled engine connections idle this long; 0 = never.")
	s.dur(&m.StickyIdle, sec, "max-idle-secs", "SECS", "manual: forget a routing key unused this long.")
	s.str(&m.AssignmentMode, "assignment-mode", "MODE", "", "manual: how a new routing key gets its worker: random (default), min_load, min_group (fewest keys) or delegate (= min_load).")
	s.dur(&m.CBWindow, sec, "cb-window-duration-secs", "SECS", "SMG's breaker window; validated, unused (breakers count consecutive failures, as SMG's do).")
	s.bool(&m.RemoveUnhealthyWorkers, "remove-unhealthy-workers", "Let long-failed workers recover (SMG); sluice always keeps probing them, so they come back when healthy.")

	s.section(compatSection)
	for _, a := range smgAliases {
		f := s.fs.Lookup(a.target)
		s.fs.Var(f.Value, a.name, "Alias of --"+a.target+".")
		s.record(a.name, s.metavar[a.target])
	}
	s.add(backendValue{&c.Workers.Runtime}, "backend", "NAME", "SMG's --backend: sglang or vllm set --runtime; other backends are refused.")
	for _, f := range smgInert {
		s.add(inertValue{name: f.name, kind: f.kind, check: f.check, into: &m.Inert}, f.name, f.metavar, f.reason)
	}
	s.section(refusedSection)
	for _, name := range slices.Sorted(maps.Keys(smgRefused)) {
		r := smgRefused[name]
		metavar := map[argKind]string{argOne: "VALUE", argMulti: "VALUES", argURLPort: "URL [PORT]"}[r.kind]
		s.add(refusedValue{name: name, r: r}, name, metavar, "Refused: "+r.reason+".")
	}
}

// finishSMG derives the SMG settings that depend on several flags.
func (s *flagSet) finishSMG() {
	m := &s.cfg.SMG
	for _, a := range smgAliases { // a setting given under its SMG name was given
		if s.cfg.explicit[a.name] {
			s.cfg.explicit[a.target] = true
		}
	}
	if !s.smg.requestIDSet {
		m.RequestIDHeaders = defaultRequestIDHeaders()
	}
	if !s.smg.routingKeySet {
		m.RoutingKeyHeaders = defaultRoutingKeyHeaders()
	}
	if m.AssignmentMode == "" {
		m.AssignmentMode = AssignRandom
	}
	if m.EnableTrace && s.cfg.Telemetry.OTLPTracesEndpoint == "" {
		s.cfg.Telemetry.OTLPTracesEndpoint = smgOTLPDefault
	}
	slices.Sort(m.Inert)
	m.Inert = slices.Compact(m.Inert)
}

// validateSMG checks the SMG settings.
func (c *Config) validateSMG() []error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, a...)...))
	}
	m := c.SMG
	cc := m.Concurrency
	// Unlike prefill admission's queue flags, these are accepted without a limit and then ignored, as
	// SMG does: its Helm chart always passes them (with --max-concurrent-requests -1).
	if cc.QueueSize < 0 {
		bad("--queue-size must be at least 0, got %d", cc.QueueSize)
	}
	if cc.QueueTimeout <= 0 {
		bad("--queue-timeout-secs must be positive, got %v (use --queue-size 0 to never wait)", cc.QueueTimeout)
	}
	if cc.TokensPerSecond < 0 {
		bad("--rate-limit-tokens-per-second must be at least 0, got %d", cc.TokensPerSecond)
	}
	if m.MetricsPort < -1 || m.MetricsPort > 65535 {
		bad("--prometheus-port must be between 0 and 65535 (or -1 for none), got %d", m.MetricsPort)
	}
	if m.MetricsPort > 0 && (m.MetricsPort == c.Server.Port || m.MetricsPort == c.Server.AdminPort) {
		bad("--prometheus-port %d is already taken by --port or --admin-port; /metrics is served on --port anyway", m.MetricsPort)
	}
	if m.HealthCheckPort < 0 || m.HealthCheckPort > 65535 {
		bad("--health-check-port must be between 1 and 65535 (0 = off), got %d", m.HealthCheckPort)
	}
	if m.HealthCheckPort > 0 && (m.HealthCheckPort == c.Server.Port || m.HealthCheckPort == c.Server.AdminPort || m.HealthCheckPort == m.MetricsPort) {
		bad("--health-check-port %d is already taken by another listener", m.HealthCheckPort)
	}
	for i, b := range m.DurationBuckets {
		if !(b > 0) || math.IsInf(b, 0) {
			bad("--prometheus-duration-buckets: %v is not a positive number of seconds", b)
		} else if i > 0 && b <= m.DurationBuckets[i-1] {
			bad("--prometheus-duration-buckets must increase, got %v after %v", b, m.DurationBuckets[i-1])
		}
	}
	if len(m.RequestIDHeaders) == 0 {
		bad("--request-id-headers needs at least one header name")
	}
	if len(m.RoutingKeyHeaders) == 0 {
		bad("--routing-key-headers needs at least one header name")
	}
	if m.DrainSettle < 0 {
		bad("--drain-settle-secs must not be negative, got %v", m.DrainSettle)
	}
	if m.UpstreamIdleTimeout < 0 {
		bad("--upstream-pool-idle-timeout-secs must not be negative, got %v", m.UpstreamIdleTimeout)
	}
	if m.StickyIdle <= 0 {
		bad("--max-idle-secs must be positive, got %v", m.StickyIdle)
	}
	switch m.AssignmentMode {
	case AssignRandom, AssignMinLoad, AssignMinGroup, AssignDelegate, "":
	default:
		bad("--assignment-mode must be random, min_load, min_group or delegate, got %q", m.AssignmentMode)
	}
	if m.CBWindow <= 0 {
		bad("--cb-window-duration-secs must be positive, got %v", m.CBWindow)
	}
	if m.RuntimeWorkerThreads < 0 {
		bad("--runtime-worker-threads must not be negative, got %d", m.RuntimeWorkerThreads)
	}
	return errs
}

// smgPolicyError explains an SMG policy sluice does not have; "" for other names.
func smgPolicyError(flagName, policy string) string {
	why, ok := smgPolicyRefusals[policy]
	if !ok {
		return ""
	}
	return fmt.Sprintf("--%s %s is not supported: %s", flagName, policy, why)
}

// smgArgs rewrites SMG's command-line forms into ones the flag package reads and reports SMG flags
// sluice refuses (each on its own line) and unknown flags, before anything is parsed:
//
//   - a flag taking several values (`--worker-urls http://a http://b`) becomes one flag per value;
//     given no value at all, it is dropped (an empty list, as in SMG);
//   - a refused flag is reported with its reason, its values skipped;
//   - a flag neither sluice nor SMG has is an error naming it (not the flag package's generic one).
//
// Like the flag package it stops at "--" or at the first argument that is not a flag.
func (s *flagSet) smgArgs(args []string) ([]string, error) {
	out := make([]string, 0, len(args))
	var refused []error // refused and unknown flags, one line each
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" || len(arg) < 2 || arg[0] != '-' {
			out = append(out, args[i:]...)
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-"), "=")
		if name == "h" || name == "help" {
			out = append(out, arg)
			continue
		}
		if r, ok := smgRefused[name]; ok {
			refused = append(refused, fmt.Errorf("--%s is not supported: %s", name, r.reason))
			i = s.skipValues(args, i, r.kind, hasValue)
			continue
		}
		f := s.fs.Lookup(name)
		if f == nil {
			refused = append(refused, fmt.Errorf("unknown flag --%s: neither a sluice flag nor a Rust gateway (SMG) flag; see sluice serve --help and docs/migrating-from-smg.md", name))
			continue
		}
		switch {
		case smgMulti[name]:
			if hasValue {
				out = append(out, "--"+name+"="+value)
				continue
			}
			for i+1 < len(args) && !s.isFlagArg(args[i+1]) {
				i++
				out = append(out, "--"+name+"="+args[i])
			}
		case name == "prefill":
			out = append(out, arg)
			if !hasValue && i+1 < len(args) {
				i++
				out = append(out, args[i])
			}
			if i+1 < len(args) && isBootstrapPortToken(args[i+1]) {
				i++
				out = append(out, args[i])
			}
		default:
			out = append(out, arg)
			if !hasValue && !isBoolFlag(f) && i+1 < len(args) {
				i++
				out = append(out, args[i])
			}
		}
	}
	if len(refused) > 0 {
		return nil, errors.Join(refused...)
	}
	return out, nil
}

// isFlagArg reports an argument that starts the next flag, and so ends the values of a flag taking
// several: "--anything", or "-name" when name is a flag. Anything else (a negative number, a label
// selector "-app=x" that is no flag) is a value.
func (s *flagSet) isFlagArg(a string) bool {
	if len(a) < 2 || a[0] != '-' || a == "--" {
		return a == "--"
	}
	if strings.HasPrefix(a, "--") {
		return true
	}
	name, _, _ := strings.Cut(a[1:], "=")
	_, refused := smgRefused[name]
	return refused || s.fs.Lookup(name) != nil || name == "h" || name == "help"
}

// skipValues returns the index of the last argument that belongs to the refused flag at args[i].
func (s *flagSet) skipValues(args []string, i int, kind argKind, hasValue bool) int {
	switch kind {
	case argBool:
	case argOne:
		if !hasValue && i+1 < len(args) {
			i++
		}
	case argMulti:
		if !hasValue {
			for i+1 < len(args) && !s.isFlagArg(args[i+1]) {
				i++
			}
		}
	case argURLPort:
		if !hasValue && i+1 < len(args) {
			i++
		}
		if i+1 < len(args) && isBootstrapPortToken(args[i+1]) {
			i++
		}
	}
	return i
}

// refusedValue is a refused SMG flag in the flag set (so that the config file reports it too).
type refusedValue struct {
	name string
	r    smgRefusal
}

func (v refusedValue) String() string   { return "" }
func (v refusedValue) IsBoolFlag() bool { return v.r.kind == argBool }
func (v refusedValue) Set(string) error {
	return fmt.Errorf("--%s is not supported: %s", v.name, v.r.reason)
}

// inertValue is an accepted SMG flag that needs nothing from sluice: its value is checked and its
// name recorded for the startup log.
type inertValue struct {
	name  string
	kind  argKind
	check func(string) error
	into  *[]string
}

func (v inertValue) String() string   { return "" }
func (v inertValue) IsBoolFlag() bool { return v.kind == argBool }
func (v inertValue) Set(s string) error {
	if v.kind == argBool {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return errors.New("want true or false")
		}
		if !b {
			return nil
		}
	} else if v.check != nil {
		if err := v.check(s); err != nil {
			return err
		}
	}
	if v.into != nil {
		*v.into = append(*v.into, v.name)
	}
	return nil
}

// backendValue is SMG's --backend (alias --runtime there): the engines sluice speaks set --runtime.
type backendValue struct{ p *string }

func (v backendValue) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}

func (v backendValue) Set(s string) error {
	switch s = strings.ToLower(strings.TrimSpace(s)); s {
	case ProtocolSGLang, ProtocolVLLM:
		*v.p = s
		return nil
	case "trtllm", "tokenspeed":
		return fmt.Errorf("%s engines are not supported: sluice speaks SGLang's and vLLM's HTTP APIs", s)
	case "openai", "anthropic", "gemini":
		return fmt.Errorf("sluice does not route to cloud providers (%s); it fronts self-hosted SGLang and vLLM engines", s)
	}
	return fmt.Errorf("want sglang or vllm, got %q", s)
}

// floatListValue is a repeatable flag of numbers.
type floatListValue struct{ p *[]float64 }

func (v floatListValue) String() string {
	if v.p == nil {
		return ""
	}
	parts := make([]string, len(*v.p))
	for i, f := range *v.p {
		parts[i] = strconv.FormatFloat(f, 'g', -1, 64)
	}
	return strings.Join(parts, ",")
}

func (v floatListValue) Set(s string) error {
	for _, part := range strings.Split(s, ",") {
		f, err := strconv.ParseFloat(strings.TrimSpace(part), 64)
		if err != nil {
			return fmt.Errorf("%q is not a number", part)
		}
		*v.p = append(*v.p, f)
	}
	return nil
}

// headerListValue is a repeatable list of header names; the first value given replaces the default.
type headerListValue struct {
	p   *[]string
	set *bool
}

func (v headerListValue) String() string {
	if v.p == nil {
		return ""
	}
	return strings.Join(*v.p, ",")
}

func (v headerListValue) Set(s string) error {
	for _, part := range strings.Split(s, ",") {
		h := strings.ToLower(strings.TrimSpace(part))
		if h == "" || !validHeaderName(h) {
			return fmt.Errorf("%q is not a header name", part)
		}
		if !*v.set {
			*v.p = nil
			*v.set = true
		}
		if !slices.Contains(*v.p, h) {
			*v.p = append(*v.p, h)
		}
	}
	return nil
}

// validHeaderName reports an HTTP field name (RFC 9110 token).
func validHeaderName(h string) bool {
	return strings.IndexFunc(h, func(r rune) bool {
		return r > 0x7e || r <= ' ' || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r)
	}) < 0 && textproto.CanonicalMIMEHeaderKey(h) != ""
}

// smgLogValue is the SMG settings' group of the startup log line.
func (c *Config) smgLogValue() slog.Attr {
	m := c.SMG
	return slog.Group("smg",
		slog.Int("max_concurrent_requests", m.Concurrency.MaxConcurrent),
		slog.Int("queue_size", m.Concurrency.QueueSize),
		slog.Duration("queue_timeout", m.Concurrency.QueueTimeout),
		slog.Int("rate_limit_tokens_per_second", m.Concurrency.TokensPerSecond),
		slog.String("prometheus", fmt.Sprintf("%s:%d", m.MetricsHost, m.MetricsPort)),
		slog.Int("health_check_port", m.HealthCheckPort),
		slog.Any("request_id_headers", m.RequestIDHeaders),
		slog.Any("routing_key_headers", m.RoutingKeyHeaders),
		slog.Duration("drain_settle", m.DrainSettle),
		slog.String("log_dir", m.LogDir),
		slog.String("assignment_mode", m.AssignmentMode),
	)
}
