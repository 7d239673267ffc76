// Package sim is a simulated LLM inference engine: it serves the HTTP APIs of SGLang and vLLM (native
// /generate, OpenAI chat/completions, health, info, loads, metrics) and the sluice.worker.v1 RPCs, and
// models what makes real engines hard to route to, so that the gateway's demo, end-to-end tests and
// benchmarks exercise real behaviour.
//
// # Performance model ("realistic" mode, the default)
//
//   - Tokenizer: deterministic and byte based. Whitespace separates tokens and is not a token; every ASCII
//     punctuation byte is one token; any other run of bytes is a word, split every 4 bytes. English text
//     comes out at roughly one token per 4 characters. A token's id is its bytes packed little-endian.
//   - Admission: continuous batching with at most Config.MaxRunningRequests running requests. A request
//     needs prompt + max output tokens of KV (Config.KVCapacityTokens in total) to start; otherwise it waits
//     in the engine's FIFO waiting queue, which the gateway cannot see. Admission is strictly FIFO (the head
//     blocks requests behind it) like SGLang's default "fcfs" schedule policy. A request that can never fit
//     is rejected with 400, as an engine rejects an input longer than its context.
//   - Prefill: one prefill executor per engine, processing admitted prefills ONE AT A TIME in FIFO order
//     (prefill is compute-bound: batching prefills does not make their sum faster). Its duration is
//     uncached prompt tokens / Config.PrefillTokensPerSec. The prefix cache is looked up when the prefill
//     starts, so a request queued behind one with the same prefix benefits from it.
//   - Prefix cache: blocks of Config.BlockSize tokens keyed by chained block hashes (a block's key hashes
//     its parent's key and its own tokens), LRU-evicted beyond Config.PrefixCacheTokens. Only full blocks
//     are cached and at least one prompt token is always computed. Cached blocks of finished requests
//     are evictable and so are not charged against the admission KV budget (as in SGLang's radix cache).
//   - Decode: the first output token is produced by the prefill; each further token takes
//     ITLBase + ITLPerSeq x (number of sequences decoding at that moment). Each sequence runs on its own
//     timer, recomputed per token from the current batch size: equivalent to a lockstep decode batch
//     except that sequences are not phase aligned.
//   - Output: words of at most 4 bytes (so each is exactly one token) drawn from a fixed vocabulary by a
//     PRNG seeded with hash(Config.Seed, request seed, prompt tokens, choice index). Temperature 0 is greedy:
//     the choice index is not mixed in, so all n choices are equal. Without max_tokens a generation ends
//     "naturally" (finish_reason "stop", the EOS) after Config.DefaultMaxTokens tokens; with max_tokens it
//     runs to max_tokens ("length") unless a stop string matches ("stop", text cut before the match).
//   - Faults multiply every modelled duration by SlownessFactor and add LatencyMS before the request starts.
//
// "instant" mode has no admission, no prefill executor and no sleeps; every generation produces
// min(max_tokens, Config.InstantOutputTokens) tokens. It exists to measure the gateway's own overhead.
//
// # Disaggregation
//
// SGLang style (Protocol "sglang", roles prefill/decode): requests carry bootstrap_host, bootstrap_port and
// bootstrap_room (scalars, or arrays with one room per sample). A prefill engine runs the prefill (one output
// token), publishes the room's KV record (prompt token hash and count) on its bootstrap server (a real TCP
// listener: GET /room/{room} long-polls) and answers normally. A decode engine long-polls that server for the
// room for up to Config.BootstrapTimeout; on timeout it aborts the request as SGLang does (HTTP 500 with an
// error body, or an in-stream error frame because a streaming response's head is already out), and a
// prompt hash mismatch aborts it too. Rooms never claimed expire after Config.RoomTTL. Unlike SGLang, the
// prefill leg does not wait for the decode leg to connect.
//
// vLLM style (Protocol "vllm"): a request with kv_transfer_params.do_remote_decode keeps its KV under fresh
// block ids and the response carries kv_transfer_params for the decode; a decode given do_remote_prefill
// pulls the record from POST http://remote_host:remote_port/sim/kv/pull. A decode-role engine given no
// parameters recomputes the prompt (counted in recomputed_prompts).
//
// # HTTP API
//
// Engine endpoints: POST /generate, /v1/chat/completions, /v1/completions; GET /v1/models, /health,
// /health_generate, /get_server_info (/server_info), /get_model_info (/model_info), /v1/loads, /metrics;
// POST /flush_cache. Simulator control: GET|POST /sim/faults (POST merges the given fields into the current
// faults; "refuse_for_ms" refuses connections for a while and then listens again, the only way back for a
// separate process), GET /sim/stats, POST /sim/stats/reset, and POST /sim/kv/pull (vLLM-style KV pull
// between engines). With Config.GRPC the same port also serves sluice.worker.v1 over h2c.
// Errors are OpenAI-shaped: {"error":{"message","type","param","code"}}.
//
// # Concurrency Model
//
// Each HTTP or RPC request runs in its server goroutine; a request with n > 1 samples runs each sample in a
// goroutine it owns and joins before returning, writing to the response under one mutex. The scheduler
// (admission queue, KV accounting, decode batch size) and the prefill executor are mutex-guarded lists of
// waiters, each with its own channel closed to grant (golang.org/x/sync/semaphore style); cancellation
// re-checks under the lock and gives back a grant that raced with it. All waiting uses plain timers and
// contexts, so tests run the model under testing/synctest with exact simulated time. The Engine owns its
// listeners, their serve goroutines and an outbound HTTP client; Close cancels every request context
// (they derive from the engine's base context), closes the servers and waits for the serve goroutines.
// Faults are an immutable value swapped atomically.
package sim
