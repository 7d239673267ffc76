// Package bench is sluice's load generator and scenario runner: it sends OpenAI-compatible chat or
// completions requests to any endpoint (the gateway, a simulator, a proxy) in an open loop (Poisson
// arrivals at a fixed rate) or a closed loop (a fixed number of concurrent clients), records each
// request (status, error code, TTFT, inter-token latencies, end-to-end latency, output tokens, the
// worker that served it), summarises the run, compares runs (table and SVG CDF plot), and runs the
// benchmark scenarios that start simulators, the gateway and nginx on loopback.
// cmd/sluice-bench only calls Main.
//
// # Workloads
//
// Prompt text is deterministic pseudo-text from the run's seed: three-letter lowercase words separated
// by spaces, so one word is one token for the simulator's tokenizer and about one token (4 characters)
// for real BPE tokenizers. Every request's prompt is a pure function of (seed, request index):
//
//   - fixed: a user message of --prompt-tokens, --max-tokens output tokens.
//   - dist: prompt and output lengths drawn per request between --prompt-tokens-min/max and
//     --max-tokens-min/max, uniform (--dist uniform), or lognormal (--dist lognormal) with its median at
//     the geometric mean of the bounds and sigma = ln(max/min)/4 (so the bounds sit at ±2 sigma),
//     clamped to the bounds.
//   - prefix: --conversations conversations run side by side; request i is turn (i/C) mod T of the
//     conversation in slot i mod C (C conversations, T = --turns). Conversation c uses system prompt
//     c mod K (K = --prefixes, each --prefix-tokens long), and turn t carries the t previous user turns and
//     synthetic assistant replies (--max-tokens long each) before a new user message of --prompt-tokens.
//     Each turn's prompt therefore extends the previous turn's prompt, and K system prompts are shared by
//     all conversations: what a prefix cache and cache-aware routing exploit.
//
// # Measurements
//
// Latencies are measured from the moment the request is handed to the HTTP client. TTFT is the time to
// the first SSE chunk with non-empty content (chat delta content or completion text); inter-token
// latencies are the gaps between consecutive content chunks; end-to-end latency ends when the body has
// been read. For non-streaming requests TTFT equals the end-to-end latency (the first token arrives
// with the whole answer). Output tokens come from usage.completion_tokens when present, else the number of
// content chunks. A request succeeded when the status is 200, the body was read to the end and, for a
// stream, it ended with [DONE] and had no error frame. Open-loop arrivals the --max-inflight bound turns
// away are dropped and count as failed; goodput is the share of all measured requests (dropped included)
// that succeeded with a TTFT within --slo-ttft. The schedule lag (how late the client actually sent
// each request) is reported so a saturated client is visible.
//
// # Scenarios
//
// Each scenario ([Scenarios]) starts what it needs on 127.0.0.1, runs its loads, tears everything down
// and returns a [ScenarioResult]; [RunScenario] writes <name>.json, <name>.md and one result file per
// load into the output directory. overhead compares an instant simulator reached directly, through
// nginx, through sluice regular mode and through sluice PD mode, with the gateway and nginx as separate
// processes so their CPU can be read from /proc; overload drives a realistic 2+2 PD cluster at twice its
// prefill capacity with admission off and on; prefix compares routing policies on the shared-prefix
// workload; replicas compares three gateway replicas with per-replica limits, a manual split of the limit
// and cluster admission under 80/10/10 skew, against one gateway; scale registers hundreds of instant
// engines and measures routing and the admission queue; decode-bound drives 2 prefill engines and one
// decode engine with a running window of 8 (SGLang and vLLM NIXL) at 2x the decode's capacity, 2x the
// prefill's and 0.7x the decode's, with the decode gate off and on (--decode-gate-flags; a gateway that
// lacks those flags leaves the "on" rows "not run"); capacity ramps a 2+2 PD cluster 0.3x → 2x → 2x with
// shorter outputs → 0.5x and records the gateway's capacity recommendation against the need computed
// from the simulator's parameters; kv-events drives multi-turn conversations, turn by
// turn round robin over 3 gateway replicas, onto 4 engines publishing KV-cache events, and compares the
// engines' own prefix-cache hit rate and TTFT for kv_aware, cache_aware and round_robin against one
// replica, with an engine restarted mid-run; tenants drives four quiet tenants and one noisy tenant
// (named by a header, prompts lognormal 256-4,096 tokens or --prompts) at 2x the prefill capacity with
// the noisy tenant absent, fair queueing off, round robin and share, and reports each tenant's TTFT,
// admitted rate, rejections and served against fair share, next to a model's best for a gate that
// never preempts.
// Short mode shrinks every duration to seconds.
//
// # Concurrency Model
//
// Run owns every goroutine it starts: one scheduler (open loop) or N clients (closed loop), one goroutine
// per in-flight open-loop request, and the progress printer; it waits for all of them before returning.
// Counters are atomics; records are appended under one mutex. Every request goroutine holds one in-flight
// unit that it gives back exactly once when it ends, whatever the outcome. Cancelling the context stops
// the schedule and cancels the requests in flight.
package bench
