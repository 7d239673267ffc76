// Package sim is a simulated LLM inference engine: it serves the HTTP APIs of SGLang or vLLM (routes,
// response and error shapes, disaggregation handshakes, as read from their sources), their own gRPC
// protocols and the sluice.worker.v1 RPCs, and models what makes real engines hard to route to, so
// that the gateway's demo, end-to-end tests and benchmarks exercise real behaviour.
//
// # Performance model ("realistic" mode, the default)
//
//   - Tokenizer: deterministic and byte based. Whitespace separates tokens and is not a token; every ASCII
//     punctuation byte is one token; any other run of bytes is a word, split every 4 bytes. English text
//     comes out at roughly one token per 4 characters. A token's id is its bytes packed little-endian.
//   - Admission: continuous batching with at most Config.MaxRunningRequests running requests. A request
//     needs prompt + max output tokens of KV (Config.KVCapacityTokens in total) to start; otherwise it waits
//     in the engine's FIFO waiting queue, which the gateway cannot see. (With DP ranks, each of these is a
//     rank's, with the rank's share: see below.) Admission is strictly FIFO (the head
//     blocks requests behind it) like SGLang's default "fcfs" schedule policy. A request that can never fit
//     is rejected with 400, as SGLang's prefill does (_check_if_req_exceed_kv_capacity).
//   - Decode, SGLang style: a PD decode leg first waits in the pre-allocation queue for a request slot
//     (max running requests x 3 when that is at most 32, else x 1: model_runner.py pre_alloc_size) and
//     its KV, and only then completes the handshake its prefill waits for; after the transfer it waits
//     in the waiting queue for the running batch (max running requests). Requests waiting for
//     pre-allocation count as waiting in the reported load (decode.go, from disaggregation/decode.py).
//     vLLM style: the decode pulls the KV at once and then waits in the waiting queue for the running
//     batch (--max-num-seqs); vLLM pulls only once the scheduler takes the request, its prefill holding
//     the blocks until then (up to VLLM_NIXL_ABORT_REQUEST_TIMEOUT), which the simulator does not model.
//   - Prefill: one prefill executor per engine (per DP rank), processing admitted prefills ONE AT A TIME in FIFO order
//     (prefill is compute-bound: batching prefills does not make their sum faster). Its duration is
//     uncached prompt tokens / Config.PrefillTokensPerSec. The prefix cache is looked up when the prefill
//     starts, so a request queued behind one with the same prefix benefits from it.
//   - Prefix cache: blocks of Config.BlockSize tokens keyed by chained block hashes (a block's key hashes
//     its parent's key and its own tokens), LRU-evicted beyond Config.PrefixCacheTokens. Only full blocks
//     are cached and at least one prompt token is always computed. Cached blocks of finished requests
//     are evictable and so are not charged against the admission KV budget (as in SGLang's radix cache).
//   - KV-cache events (Config.KVEvents, kvevents.go): each rank's prefix cache publishes its stores,
//     evictions and flushes as vLLM's ZmqEventPublisher does (PUB + ROUTER replay, msgpack
//     KVEventBatch; vLLM's map encoding, SGLang's array_like one), with a fault dropping batches.
//   - Decode: the first output token is produced by the prefill; each further token takes
//     ITLBase + ITLPerSeq x (number of sequences decoding on the engine at that moment). Each sequence runs on its own
//     timer, recomputed per token from the current batch size: equivalent to a lockstep decode batch
//     except that sequences are not phase aligned.
//   - Output: words of at most 4 bytes (so each is exactly one token) drawn from a fixed vocabulary by a
//     PRNG seeded with hash(Config.Seed, request seed, prompt tokens, choice index), and for an unseeded
//     request over the bootstrap handoff its room too: SGLang PD serves n > 1 as n single-sample requests,
//     which differ as the engines' own random sampling would. Temperature 0 is greedy: each token is a
//     function of the whole context (the engine's seed, the prompt's token ids and the tokens generated
//     so far), as a greedy model's argmax is, so all n choices are equal and a generation continued from
//     its prompt plus its first k output tokens repeats the rest of the original (request migration). Without max_tokens a generation ends
//     "naturally" (finish_reason "stop", the EOS) after Config.DefaultMaxTokens tokens (at most the rest
//     of the context); with max_tokens it runs to max_tokens ("length") unless a stop string matches
//     ("stop", text cut before the match).
//   - Data-parallel ranks (Config.DPSize N, SGLang --dp-size with DP attention, vLLM
//     --data-parallel-size): N ranks, each with its own scheduler (running batch, FIFO waiting queue),
//     prefill executor, prefix cache and KV pool. The engine's capacities are split evenly, so its totals
//     do not change with N: max running requests / N (SGLang model_runner.py: max_running_requests //
//     dp_size), KV and prefix cache tokens / N (each rank's pool lives on its attention-TP group, 1/N of
//     the engine's GPUs) and prefill tokens/s / N. The decode batch that sets the inter-token latency is
//     engine-wide: DP-attention ranks run every forward step together. The same prompt on another rank
//     misses the cache. How a request finds its rank is described under Disaggregation.
//   - Faults multiply every modelled duration by SlownessFactor and add LatencyMS before the request starts;
//     the others are errors, hangs, holds and mid-stream stalls (released when cleared), dying
//     connections, failing health, refused connections and, for a vLLM prefill, kv_transfer_params
//     never returned (Faults).
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
// decode has connected for its room (disaggregation/prefill.py pop_bootstrapped), which a realistic
// decode does only once it has pre-allocated (decode.go), so that wait counts toward prefill time; a prefill whose decode never connects fails after Config.BootstrapTimeout with
// SGLang's "Prefill bootstrap failed ... timed out ... in KVPoll.Bootstrapping" (500). The prefill then
// runs one output token (whatever max_new_tokens was), publishes the room's KV record (prompt token hash
// and count) and answers. A decode whose KV does not come within Config.BootstrapTimeout aborts with
// "Decode transfer failed ..." (500, or an in-stream error); a record of another prompt aborts it too
// (a real engine would decode garbage). Records nobody claims expire after Config.RoomTTL.
//
// Data-parallel ranks, SGLang: a request names its rank with routed_dp_rank (GenerateReqInput and the
// OpenAI requests, managers/io_struct.py and entrypoints/openai/protocol.py) or its deprecated alias
// data_parallel_rank, which only fills an absent routed_dp_rank; on the OpenAI routes the header
// X-Data-Parallel-Rank overrides both (serving_base.py extract_routed_dp_rank_from_header; not an
// integer: 400 "Invalid X-Data-Parallel-Rank header: must be an integer, got '...'", type "400"). A rank
// outside [0, dp_size) is refused with 400 "routed_dp_rank=N out of range [0, dp_size)" (BadRequestError;
// tokenizer_manager.py generate_request), except rank 0 without DP, which is ignored. Without a hint the
// data-parallel controller's default load-balance method decides (server_args.py: "auto" is
// follow_bootstrap_room on a PD prefill, round_robin elsewhere; data_parallel_controller.py): a prefill
// runs bootstrap_room % dp_size, a decode or regular engine round robin. A prefill given a routed_dp_rank
// other than bootstrap_room % dp_size and no disagg_prefill_dp_rank fails at once, as current SGLang's
// KV sender does under follow_bootstrap_room (common/conn.py CommonKVSender): "follow_bootstrap_room
// conflict: dispatched to dp_rank P but bootstrap_room R implies dp_rank Q. Set
// SGLANG_DISAGGREGATION_FORCE_QUERY_PREFILL_DP_RANK=1 to allow mixed routing." (Stats.RankConflicts). The
// decode first asks the prefill's bootstrap server for its server info (GET /route with every rank -1:
// dp_size, follow_bootstrap_room, ...; cached per address), then takes disagg_prefill_dp_rank, else 0
// when the prefill has no DP, else bootstrap_room % the prefill's dp_size (disaggregation/decode.py
// _resolve_prefill_dp_rank), and looks that rank up (GET /route?prefill_dp_rank=P&...): a rank the
// prefill does not have fails the decode at once with "Decode handshake failed ... Could not fetch
// bootstrap info for: prefill_dp_rank: P ..." (Stats.PrefillRankMisses). The room is then met on that
// rank: a decode looking at another rank than its prefill's never meets it, and both legs time out
// (prefill "KVPoll.Bootstrapping", decode "KVPoll.WaitingForInput"). Messages carry the scheduler's
// rank (rank=N), here the DP rank. So a gateway that ignores ranks gets rooms scattered over ranks (and
// the cache with them) but working transfers; one whose hints disagree between legs gets timeouts.
//
// Data-parallel ranks, vLLM: the header X-data-parallel-rank picks the engine core (entrypoints
// serving.py _get_data_parallel_rank; not an integer: ignored; out of range: 400 "data_parallel_rank N
// is out of range [0, dp_size).", input_processor.py); without it the least loaded core by
// waiting*4 + running, lowest index on ties (core_client.py DPLBAsyncMPClient). Each rank is its own
// KV connector engine: its engine id is the engine's suffixed "_dp<rank>" when dp_size > 1
// (vllm/v1/engine/utils.py), in NIXL kv_transfer_params and in Mooncake's /query.
//
// vLLM style (Protocol "vllm", NIXL connector; tests/v1/kv_connector/nixl_integration/
// toy_proxy_server.py is the reference proxy): a prefill given kv_transfer_params.do_remote_decode runs
// as asked (the proxy sends max_tokens=1), keeps its KV under fresh block ids and returns
// kv_transfer_params only when the length cap ended it (nixl_connector.py request_finished); an EOS or
// stop string as the one token, or the OmitKVTransferParams fault, leaves "kv_transfer_params": null
// (Stats.KVParamsOmitted). A decode given do_remote_prefill pulls the record from POST
// http://remote_host:remote_port/sim/kv/pull (the blocks must be remote_engine_id's rank's); a
// decode-role engine given no parameters recomputes the prompt (Stats.RecomputedPrompts).
//
// vLLM Mooncake connector (Config.KVConnector "mooncake"; the reference proxy is
// examples/disaggregated/mooncake_connector/mooncake_connector_proxy.py, the connector
// vllm/distributed/kv_transfer/kv_connector/v1/mooncake/mooncake_connector.py and mooncake_utils.py):
// a prefill runs a bootstrap server (Config.BootstrapPort, VLLM_MOONCAKE_BOOTSTRAP_PORT) whose
// GET /query lists every DP rank as {"<rank>": {"engine_id", "worker_addr": {"0": {"0": "tcp://host:port"}}}}.
// The proxy sends both legs at once: the prefill {do_remote_decode: true, do_remote_prefill: false,
// transfer_id: "xfer-<request id>"} (max_tokens 1, not streamed, header X-data-parallel-rank), the
// decode {do_remote_decode: false, do_remote_prefill: true, remote_bootstrap_addr:
// "http://host:port", remote_engine_id: the rank's engine id, transfer_id}. A prefill ended by the
// length cap keeps its KV under (rank, transfer_id) until one decode pulls it or Config.RoomTTL passes
// (request_finished); one ended by an EOS or stop string, or under the OmitKVTransferParams fault,
// keeps nothing (Stats.MooncakeNotKept). Its response's kv_transfer_params is always null. The decode
// resolves remote_engine_id on the bootstrap server (queried again for an engine id it does not know),
// then pulls the transfer over HTTP from the prefill's bootstrap listener (POST /sim/mooncake/pull, the
// stand-in for the ZMQ side channel and RDMA writes). A pull that comes before the prefill finished
// waits for it (Stats.MooncakeWaits on the prefill); after Config.BootstrapTimeout
// (VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT) it fails ("Timeout waiting for P side ready.",
// Stats.MooncakeTimeouts): so does a pull naming another rank's engine id, an unknown transfer id or a
// prefill that kept nothing. An engine id the bootstrap server does not list, or a bootstrap server
// that does not answer, fails at once (Stats.MooncakeFailures). A failed load fails the request as
// vLLM's default kv_load_failure_policy "fail" does: 500 {"error":{"message":"Internal server error",
// "type":"InternalServerError",...}} (or that frame in a stream); the reason is logged. A decode given
// no parameters recomputes, as with NIXL.
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
// Both styles: POST /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses and
// /v1/messages (conversation.go); the other pooling and tokenization routes where each engine has
// them (pooling.go: SGLang /v1/rerank, /v1/score, /v1/classify, /v1/tokenize, /v1/detokenize; vLLM
// /rerank, /score, /classify, /tokenize, /detokenize); GET /v1/models (owned_by "sglang" or
// "vllm", max_model_len the context length), /health, /metrics. SGLang only: POST /generate; GET
// /health_generate, /get_server_info and /server_info (server args: disaggregation_mode
// prefill/decode/"null", disaggregation_bootstrap_port, dp_size, model_path, tp_size,
// max_running_requests as given, ...; internal_states has one entry per DP rank with the rank's
// effective_max_running_requests_per_dp, scheduler.py get_internal_state),
// /get_model_info (/model_info), /v1/loads (one entry per DP rank, ?dp_rank=N for one; cache_hit_rate is
// the rank's hit tokens / prompt tokens since start or reset), /get_load (older; a list per DP rank);
// GET or POST /flush_cache (every rank); SGLang gauges in /metrics (sglang:num_running_reqs, ...,
// labelled dp_rank when there are several ranks). An SGLang prefill's bootstrap server answers GET
// /health ("OK"), GET /route (the real routes: server info with every rank -1, else one rank's
// {"rank_ip","rank_port"}, 404 "Bootstrap info not found for dp_rank=..." for a rank it lacks) and the
// simulator's GET /room/{room}?dp_rank=N. vLLM only: GET /version; load only in /metrics
// (vllm:num_requests_running, vllm:num_requests_waiting, vllm:kv_cache_usage_perc, labelled
// model_name and engine, the DP rank); a Mooncake prefill's bootstrap server answers GET /query and the
// simulator's POST /sim/mooncake/pull. Other routes answer FastAPI's 404 {"detail":"Not Found"}. Simulator control:
// GET|POST /sim/faults (POST merges the given fields into the current faults; "refuse_for_ms" refuses
// connections for a while and then listens again, the only way back for a separate process;
// "crash_for_ms" kills the engine as SIGKILL would, every connection dropped and every request lost,
// and restarts it empty on the same ports after that long: Engine.Crash), GET
// /sim/stats (with a per-rank breakdown in "ranks": requests, queue, running, prefix cache hit and
// prompt tokens, KV), POST /sim/stats/reset, and POST /sim/kv/pull (NIXL-style KV pull between engines). With
// Config.GRPC the same port also serves gRPC (HTTP/2 with prior knowledge): the engine's own protocol
// and sluice.worker.v1. As the engines serve it on a native HTTP/2 transport (grpcio), not a generic
// HTTP server, the simulator serves it on grpc-go's: connections that open with HTTP/2's preface go to
// a grpc.Server whose one handler runs the connect-go services for each call (grpcnative.go), the
// rest to net/http. A handler that aborts (die_after_tokens) fails its call INTERNAL, as a reset does.
//
// # The engines' gRPC protocols
//
// With Config.GRPC an SGLang engine serves sglang.grpc.scheduler.SglangScheduler and a vLLM engine
// vllm.grpc.engine.VllmEngine, as `--grpc-mode` and `vllm serve --grpc` do (smg-project/smg
// grpc_servicer/smg_grpc_servicer/ sglang/servicer.py and vllm/servicer.py); the other engines'
// services answer UNIMPLEMENTED, which is how a gateway tells them apart (grpcengine.go; one file per
// protocol: grpc_sglang.go, grpc_vllm.go). Token ids in, token ids out, through the same model as
// HTTP: Generate streams one chunk per output token and ends with a Complete (finish_reason, prompt,
// completion and cached token counts, the matched stop token or string; SGLang's natural end matches
// the EOS id 2). SGLang's chunks count cumulatively; vLLM's servicer runs the engine in DELTA mode, so
// its chunks and its Complete carry per-output counts. In a stream the Complete repeats the last
// chunk's ids, as both servicers build it from the same engine output; unstreamed it has every id.
// Sampling parameters are read as each servicer reads them: SGLang takes the proto's zeros as values
// (temperature 0 is greedy, top_p 0 is refused by SGLang's own check), vLLM reads an unset
// temperature as 1.0 and a zero top_p as 1.0; max_new_tokens / max_tokens, ignore_eos, stop strings
// and stop_token_ids (the token ends the output and is part of it) are honoured, and the engine's
// HTTP validation applies. Abort ends a running Generate by request id (its Complete says "abort");
// a client that cancels the stream ends the engine's request too. HealthCheck fails with the
// FailHealth fault. GetModelInfo gives the served model name, context length and EOS ids;
// GetServerInfo SGLang's server args and scheduler info, or vLLM's KV connector, role and engine id.
// GetLoads: SGLang one entry per DP rank with the disaggregation section (a prefill's bootstrap queue
// in prefill_prealloc_queue_reqs, a decode's pre-allocation and transfer queues); vLLM one entry for
// the engine, as its servicer reports (the simulator's sums its ranks). PD: SGLang's legs carry the
// same DisaggregatedParams and meet on the bootstrap rendezvous as over HTTP (an unset port is the
// engine's own bootstrap port; the int32 room is widened alike on both legs); vLLM's carry
// kv_transfer_params_json (else the deprecated typed host/port), and a prefill's Complete answers the
// NIXL params in kv_transfer_params_json with the typed host/port mirror. vLLM's data_parallel_rank
// pins the rank; SGLang's servicer does not pass its data_parallel_rank on, so neither does the
// simulator. Logprobs (grpc_logprobs.go): SGLang's return_logprob/top_logprobs_num/logprob_start_len
// and vLLM's logprobs/prompt_logprobs give OutputLogProbs and InputLogProbs from the model of
// /generate's input_token_logprobs (a decode leg gives no prompt logprobs). Embed answers
// /v1/embeddings' vector of the tokenized input (grpc_embed.go). Not served over gRPC:
// n > 1 on an SGLang PD leg or with vLLM's kv_transfer_params (UNIMPLEMENTED; otherwise the samples
// run one after the other, each with its index and own Complete), GetTokenizer, SubscribeKvEvents, LoRA and profiling RPCs, hidden
// states, and structured output constraints (ignored).
// vLLM's text input is tokenized by the simulator's tokenizer.
//
// Protocol trtllm (gRPC only, regular role only) serves TensorRT-LLM's trtllm.TrtllmService as
// `trtllm-serve --grpc --grpc-protocol smg` does (NVIDIA/TensorRT-LLM tensorrt_llm/grpc/smg/
// servicer.py; grpc_trtllm.go): chunks with the new ids and the cumulative count, a Complete with every
// output id whether streaming or not, no matched stop for the end id; an unset temperature or top_p is
// 1.0; max_tokens is required, and one above the model's answer (DefaultMaxTokens) ends "stop" there.
// Abort completes the stream "cancelled". Context-only and generation-only requests are refused: the
// service returns no context-phase state for a decode leg, so TensorRT-LLM PD is not modelled.
//
// # Not modelled
//
// Tensor and expert parallelism beyond the even split of capacities over DP ranks (each simulated rank
// is one attention-TP rank: server info reports tp_size = dp_size), ranks stepping prefills together
// (each rank prefills on its own), SGLang load-balance methods other than the defaults (total_requests,
// total_tokens, cost_aware, and with them the prefill's /register_dp_rank and the decode's
// /query_dp_ranks; the decode's rank query is refused), SGLANG_DISAGGREGATION_FORCE_QUERY_PREFILL_DP_RANK,
// the DP controller's assertion on a PD request without a room (SGLang's controller would fail the
// assertion; here the scheduler's 400 "without bootstrap room id" answers), the max_new_tokens=0 warm-up
// SGLang sends before n > 1 samples, SGLang's acceptance of any model name (both styles answer 404 to an
// unknown model), a room list in a single request (SGLang carries the list on as the room; refused here
// with 400), vLLM connectors other than NIXL and Mooncake (P2P NCCL, LMCache, ...), Mooncake's ZMQ side
// channel and RDMA writes (an HTTP pull stands in), vLLM's reaction to incomplete Mooncake params (it
// logs "Got invalid KVTransferParams" and, as we read it, never loads; refused here with 400),
// kv_load_failure_policy "recompute", heterogeneous TP between prefill and decode, KV a prefill keeps for
// its decode counting against its KV budget (NIXL and Mooncake), vLLM's DP load balancer's 100 ms stale
// counts (the simulator's are live), X-Request-Id as vLLM's response id, chat templates (a chat prompt is
// its messages' tokens), logprobs over HTTP beyond /generate's input_token_logprobs, SGLang's 300 s and vLLM's
// 480 s default transfer timeouts (30 s here), vLLM's n > 1 with do_remote_prefill (refused with 400),
// and every upstream message not quoted in validate.go, rank.go, rendezvous.go, mooncake.go and errors.go.
//
// # Concurrency Model
//
// Each HTTP or RPC request runs in its server goroutine; a request with n > 1 samples runs each sample in a
// goroutine it owns and joins before returning, writing to the response under one mutex. SGLang rooms
// are claimed in sample order before those goroutines start, so which sample collides is deterministic.
// The bootstrap rendezvous (one per DP rank) is a mutex-guarded map of rooms whose channels are closed on
// the handshake and on publication; a waiter that gives up re-checks under the lock and drops a room
// nobody holds. The Mooncake transfer store (one per DP rank) works the same way by transfer_id. Each
// rank's scheduler (admission queue, KV accounting) and prefill executor are mutex-guarded internal/waitq lists of
// waiters, each with its own channel closed to grant (golang.org/x/sync/semaphore style); cancellation
// re-checks under the lock and gives back a grant that raced with it. The decode batch size and the round
// robin counter are atomics; what decodes learn from bootstrap servers is cached under a mutex. All waiting uses plain timers and
// contexts, so tests run the model under testing/synctest with exact simulated time. The Engine owns its
// listeners, their serve goroutines and an outbound HTTP client; Close cancels every request context
// (they derive from the engine's base context), closes the servers and waits for the serve goroutines.
// With gRPC, one goroutine accepts on the port and one per new connection reads its first bytes (at
// most 10 s) before handing it to net/http or grpc-go; closing the port closes the connections still
// being read, and the accept goroutine ends after them. A refuse drains the gRPC server in a goroutine
// (GracefulStop) that a crash or Close cuts short with Stop.
// Faults are an immutable value swapped atomically. The engine gRPC servicers keep their running
// Generate calls by request id in a mutex-guarded map of cancel functions, for Abort.
package sim
