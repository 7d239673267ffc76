// Package sim is a simulated LLM inference engine: it serves the HTTP APIs of SGLang or vLLM (routes,
// response and error shapes, disaggregation handshakes, as read from their sources) and the
// sluice.worker.v1 RPCs, and models what makes real engines hard to route to, so that the gateway's
// demo, end-to-end tests and benchmarks exercise real behaviour.
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
//     is rejected with 400, as SGLang's prefill does (_check_if_req_exceed_kv_capacity).
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
//     "naturally" (finish_reason "stop", the EOS) after Config.DefaultMaxTokens tokens (at most the rest
//     of the context); with max_tokens it runs to max_tokens ("length") unless a stop string matches
//     ("stop", text cut before the match).
//   - Faults multiply every modelled duration by SlownessFactor and add LatencyMS before the request starts;
//     the others are errors, hangs, dying connections, failing health, refused connections and, for a
//     vLLM prefill, kv_transfer_params never returned (Faults).
//
// "instant" mode has no admission, no prefill executor and no sleeps; every generation produces
// min(max_tokens, Config.InstantOutputTokens) tokens. It exists to measure the gateway's own overhead.
//
// # Disaggregation
//
// SGLang style (Protocol "sglang", roles prefill/decode; disaggregation/mini_lb.py is the reference
// router): both legs get the same body with bootstrap_host, bootstrap_port and bootstrap_room. The
// engine normalises them as SGLang's GenerateReqInput does (managers/io_struct.py): a single request
// keeps its scalars; a batch, or n > 1, expands them per prompt (a scalar room becomes room+i for
// prompt i, a list is repeated n times) and all n samples of a prompt share the prompt's room
// (managers/tokenizer_manager.py). A room serves one prefill/decode pair: every further sample on a
// room already held on the engine collides (Stats.RoomCollisions) and never completes its handshake,
// so a PD request with n > 1 fails after the bootstrap timeout, as the SGLang bug makes it hang. A list
// shorter than the batch fails like SGLang's IndexError (500); a longer one is cut. A PD engine given
// no room answers SGLang's 400 "Disaggregated request received without bootstrap room id". A null or
// absent bootstrap_port means the engine's own Config.BootstrapPort (--disaggregation-bootstrap-port,
// default 8998; scheduler.py): a decode then connects to bootstrap_host on that port.
//
// The decode connects to the prefill's bootstrap server (a real TCP listener: GET /room/{room} is the
// handshake and long-polls for the room's KV record). The prefill does not start a request until the
// decode has connected for its room (disaggregation/prefill.py pop_bootstrapped), so that wait counts
// toward prefill time; a prefill whose decode never connects fails after Config.BootstrapTimeout with
// SGLang's "Prefill bootstrap failed ... timed out ... in KVPoll.Bootstrapping" (500). The prefill then
// runs one output token (whatever max_new_tokens was), publishes the room's KV record (prompt token hash
// and count) and answers. A decode whose KV does not come within Config.BootstrapTimeout aborts with
// "Decode transfer failed ..." (500, or an in-stream error); a record of another prompt aborts it too
// (a real engine would decode garbage). Records nobody claims expire after Config.RoomTTL.
//
// vLLM style (Protocol "vllm", NIXL connector; tests/v1/kv_connector/nixl_integration/
// toy_proxy_server.py is the reference proxy): a prefill given kv_transfer_params.do_remote_decode runs
// as asked (the proxy sends max_tokens=1), keeps its KV under fresh block ids and returns
// kv_transfer_params only when the length cap ended it (nixl_connector.py request_finished); an EOS or
// stop string as the one token, or the OmitKVTransferParams fault, leaves "kv_transfer_params": null
// (Stats.KVParamsOmitted). A decode given do_remote_prefill pulls the record from POST
// http://remote_host:remote_port/sim/kv/pull; a decode-role engine given no parameters recomputes the
// prompt (Stats.RecomputedPrompts).
//
// # Validation and errors
//
// Prompts are checked against Config.ContextLength as each engine does: SGLang refuses an input of the
// context length or more, and input + max_new_tokens beyond it (tokenizer_manager.py
// _validate_one_request); vLLM refuses an input longer than the context minus max_tokens
// (renderers/params.py). Sampling parameters are checked with each engine's rules and messages: SGLang
// (sampling_params.py verify) temperature >= 0, top_p in (0, 1], max_new_tokens >= 0, and no check of
// n (n < 2 is one sample); vLLM (sampling_params.py _verify_args) n >= 1, temperature in [0, 2], top_p in
// (0, 1], max_tokens >= 1, and n = 1 when greedy. Errors use each engine's shape: vLLM's
// {"error":{"message","type","param","code"}} with the HTTP status as code; SGLang's OpenAI routes
// {"object":"error","message","type","param","code"}; SGLang's /generate {"error":{"message"}} for a
// refused request. Errors after a streaming response started are in-stream frames followed by
// [DONE]. SGLang's OpenAI routes send their head with the first chunk, the others at once.
//
// # HTTP API
//
// Both styles: POST /v1/chat/completions, /v1/completions; GET /v1/models (owned_by "sglang" or
// "vllm", max_model_len the context length), /health, /metrics. SGLang only: POST /generate; GET
// /health_generate, /get_server_info and /server_info (server args: disaggregation_mode
// prefill/decode/"null", disaggregation_bootstrap_port, dp_size, model_path, tp_size, ...),
// /get_model_info (/model_info), /v1/loads, /get_load (older); GET or POST /flush_cache; SGLang gauges
// in /metrics (sglang:num_running_reqs, ...). vLLM only: GET /version; load only in /metrics
// (vllm:num_requests_running, vllm:num_requests_waiting, vllm:kv_cache_usage_perc, labelled
// model_name and engine). Other routes answer FastAPI's 404 {"detail":"Not Found"}. Simulator control:
// GET|POST /sim/faults (POST merges the given fields into the current faults; "refuse_for_ms" refuses
// connections for a while and then listens again, the only way back for a separate process), GET
// /sim/stats, POST /sim/stats/reset, and POST /sim/kv/pull (vLLM-style KV pull between engines). With
// Config.GRPC the same port also serves sluice.worker.v1 over h2c.
//
// # Not modelled
//
// DP ranks (dp_size is only reported; routed_dp_rank is ignored), tensor parallelism, the max_new_tokens=0
// warm-up SGLang sends before n > 1 samples, SGLang's acceptance of any model name (both styles answer
// 404 to an unknown model), a room list in a single request (SGLang carries the list on as the room;
// refused here with 400), vLLM connectors other than NIXL, KV transfer failure policies, chat templates (a chat
// prompt is its messages' tokens), logprobs beyond /generate's input_token_logprobs, SGLang's 300 s
// default bootstrap timeouts (30 s here), vLLM's n > 1 with do_remote_prefill (refused with 400), and
// every upstream message not quoted in validate.go, rendezvous.go and errors.go.
//
// # Concurrency Model
//
// Each HTTP or RPC request runs in its server goroutine; a request with n > 1 samples runs each sample in a
// goroutine it owns and joins before returning, writing to the response under one mutex. SGLang rooms
// are claimed in sample order before those goroutines start, so which sample collides is deterministic.
// The bootstrap rendezvous is a mutex-guarded map of rooms whose channels are closed on the handshake
// and on publication; a waiter that gives up re-checks under the lock and drops a room nobody holds. The scheduler
// (admission queue, KV accounting, decode batch size) and the prefill executor are mutex-guarded lists of
// waiters, each with its own channel closed to grant (golang.org/x/sync/semaphore style); cancellation
// re-checks under the lock and gives back a grant that raced with it. All waiting uses plain timers and
// contexts, so tests run the model under testing/synctest with exact simulated time. The Engine owns its
// listeners, their serve goroutines and an outbound HTTP client; Close cancels every request context
// (they derive from the engine's base context), closes the servers and waits for the serve goroutines.
// Faults are an immutable value swapped atomically.
package sim
