package config

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicegw/sluice/internal/placement"
)

// Command lines of the Rust gateway (SMG, smg-project/smg, model_gateway/src/main.rs CliArgs) run
// unchanged: every SMG flag is either a sluice setting under the same name (or an alias of one), a
// flag sluice accepts because it already behaves as the flag asks, or a refusal that names the flag,
// says why and what to use instead. Nothing falls through to the flag package's generic "flag
// provided but not defined". docs/migrating-from-smg.md is the table for people; the tables in this
// file are the parser's (smgargs.go rewrites SMG's command-line forms with them, smgvalues.go holds
// their flag values), and smg_test.go runs real SMG command lines through them. The SMG settings
// sluice has are ordinary flags, declared in flags.go beside the settings of the same concern.

// smgOTLPDefault is SMG's --otlp-traces-endpoint default, used by --enable-trace without one.
const smgOTLPDefault = "localhost:4317"

// Assignment modes of the manual policy: internal/placement's.
const (
	AssignRandom   = placement.AssignRandom
	AssignMinLoad  = placement.AssignMinLoad
	AssignMinGroup = placement.AssignMinGroup
	AssignDelegate = placement.AssignDelegate
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
	{"chat-template", "PATH", argOne, nil, "Accepted: engines apply their chat template (SMG uses this only in its gRPC pipeline)."},
	{"disable-tokenizer-autoload", "", argBool, nil, "Accepted: sluice never downloads a tokenizer from a hub: it loads the --tokenizer-path (or local --model-path) directories at startup, and asks an engine-gRPC worker for its tokenizer only when neither is given."},
	{"tokenizer-cache-enable-l0", "", argBool, nil, tokenizerCacheReason},
	{"tokenizer-cache-l0-max-entries", "N", argOne, checkUint, tokenizerCacheReason},
	{"tokenizer-cache-enable-l1", "", argBool, nil, tokenizerCacheReason},
	{"tokenizer-cache-l1-max-memory", "BYTES", argOne, checkUint, tokenizerCacheReason},
}

// tokenizerCacheReason is the help of SMG's tokenizer cache flags.
const tokenizerCacheReason = "Accepted, not used: the tokenizers sluice loads (--tokenizer-path) keep a bounded cache of their own, with nothing to tune."

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

// registerSMGCompat adds SMG's aliases of sluice settings, its --backend, and the accepted and
// refused flags, in help sections of their own after every setting.
func (s *flagSet) registerSMGCompat() {
	s.section(compatSection)
	for _, a := range smgAliases {
		f := s.fs.Lookup(a.target)
		s.fs.Var(f.Value, a.name, "Alias of --"+a.target+".")
		s.record(a.name, s.metavar[a.target])
	}
	s.add(backendValue{&s.cfg.Workers.Runtime}, "backend", "NAME", "SMG's --backend: sglang, vllm or trtllm set --runtime; other backends are refused.")
	for _, f := range smgInert {
		s.add(inertValue{name: f.name, kind: f.kind, check: f.check, into: &s.cfg.InertSMGFlags}, f.name, f.metavar, f.reason)
	}
	s.section(refusedSection)
	for _, name := range slices.Sorted(maps.Keys(smgRefused)) {
		r := smgRefused[name]
		metavar := map[argKind]string{argOne: "VALUE", argMulti: "VALUES", argURLPort: "URL [PORT]"}[r.kind]
		s.add(refusedValue{name: name, r: r}, name, metavar, "Refused: "+r.reason+".")
	}
}

// smgPolicyError explains an SMG policy sluice does not have; "" for other names.
func smgPolicyError(flagName, policy string) string {
	why, ok := smgPolicyRefusals[policy]
	if !ok {
		return ""
	}
	return fmt.Sprintf("--%s %s is not supported: %s", flagName, policy, why)
}
