// Package enginerpc serves the gateway's generation requests from workers that speak an engine's own
// gRPC protocol (SGLang's sglang.grpc.scheduler.SglangScheduler, vLLM's vllm.grpc.engine.VllmEngine,
// TensorRT-LLM's trtllm.TrtllmService: gen/sglang, gen/vllm, gen/trtllm), as an http.RoundTripper, so
// that dispatch treats them exactly like HTTP engines. A request "POST grpc://host:port/v1/chat/completions" (or /v1/completions, /generate)
// carries the JSON body dispatch would send the engine's HTTP server; the transport renders the chat
// with the model's template and tokenizes it (internal/tokenizer), calls Generate with the token ids
// and the sampling parameters mapped to the engine's defaults (engines.go), decodes the streamed ids
// (tokenizer.DecodeStream), cuts them at stop strings and ids (internal/stop), and answers the OpenAI
// JSON or SSE (or SGLang's /generate object) the engine's HTTP server would have (render.go): usage
// from the engine's counts, finish_reason, vLLM's stop_reason and kv_transfer_params (TensorRT-LLM's
// server answers vLLM's stop_reason too), SGLang's matched_stop. Each protocol's mapping is in its own
// file: engines.go (SGLang, vLLM), trtllm.go (TensorRT-LLM: its sampling defaults, max_tokens it
// requires, stop and bad words it tokenizes itself).
//
// Prefill/decode: SGLang's bootstrap_host/port/room, which dispatch writes into both legs' bodies,
// become DisaggregatedParams (the room reduced to the wire's int32, keeping room % dp_size); vLLM's
// kv_transfer_params become kv_transfer_params_json, and the Complete's kv_transfer_params_json comes
// back as the answer's kv_transfer_params, which dispatch's NIXL flow hands to the decode leg.
// TensorRT-LLM workers serve regular requests only (docs/engines.md says why).
//
// Chat answers of a model with parsers (Engine.ReasoningParser, ToolCallParser: --reasoning-parser,
// --tool-call-parser) are split as vLLM's are: reasoning_content (the request's
// chat_template_kwargs.enable_thinking reaches the qwen3 parser), content, and, when the request offers
// tools, OpenAI tool_calls with finish_reason tool_calls; streamed, as delta.reasoning_content and
// delta.tool_calls argument deltas, which join to the whole answer. tools for a model without a
// tool-call parser are a 400 naming tools: the calls would reach the client as raw text.
//
// Logprobs (logprobs.go): chat's logprobs/top_logprobs, completions' logprobs and echo, /generate's
// return_logprob become SGLang's return_logprob/top_logprobs_num/logprob_start_len and vLLM's
// sampling_params.logprobs/prompt_logprobs and TensorRT-LLM's output_config.logprobs/prompt_logprobs;
// the engine's values come back in the HTTP servers' shapes, token strings from the gateway's
// tokenizer.
//
// n > 1 (samples.go) is one Generate with sampling_params.n (TensorRT-LLM: num_return_sequences); the
// engine's chunks and Completes carry their sample's index (sequence_index), which becomes the choice's; usage counts the prompt once and every sample's
// completion; /generate answers a list.
//
// /v1/embeddings (embed.go) is one Embed call per input, answered as OpenAI's embeddings list.
// A prompt that fills the model's context (Engine.ContextLength) is a 400 context_length_exceeded
// before any engine call.
//
// A batch of prompts (batch.go) is one Generate per prompt, run at once, the answers merged as the
// engines' HTTP servers give them.
//
// Not served yet, refused with a 400 naming the field: streamed batches, chat's echo, embeddings'
// dimensions, and over TensorRT-LLM a streamed echo with logprobs (its prompt logprobs come last).
//
// SGLang's and vLLM's Generate is called by the transport itself (genclient.go): for a cleartext
// engine on an HTTP/2 client of its own (h2c.go: one stream at a time per pooled connection, its
// frames read on the caller's goroutine), for grpcs:// on net/http's. Its request, written by hand
// (reqwire.go), is sent from the caller's goroutine, and the stream's messages are decoded by hand
// (wire.go: protowire straight into the transport's events). Connect's goroutine and pipe per call, and the generic marshaller's
// and decoder's reflection, were a large part of the gateway's CPU in gRPC mode (issue #35). Its
// errors carry connect's codes for the same failures. Both clients are tested against Go's servers and
// against grpcio's C core (grpcio_test.go: a grpc.aio server as SGLang runs it, from Debian's
// python3-grpcio). TensorRT-LLM's Generate and every other call go through connect.
//
// Workers are registered by URL (SetEngine); a request for any other grpc:// worker goes to the
// fallback transport (sluice.worker.v1's).
//
// # Concurrency Model
//
// Transport is safe for concurrent use; its shared state is the RWMutex-guarded map of engines and
// each engine's pool of idle HTTP/2 connections (mutex-guarded; a connection carries one call at a
// time and is used by that call's goroutine alone, the context's watch only setting its deadline).
// A Generate RPC runs on a context detached from the request's, so that a client going away is first
// an Abort and only then the RPC's cancellation (the Rust gateway's abort-on-drop): a context.AfterFunc
// on the request's context, or closing the body, sends Abort (once, bounded by a timeout, never after
// the Complete) and cancels the RPC. A unary call runs on the caller's goroutine. A streamed call
// answers once the engine sent its first message; its body is then rendered on the goroutine that
// reads it (the relay's): a Read with nothing rendered reads the Generate stream until it has a chunk,
// and renders with it the messages that arrived together, until the Complete, a stream error, or the
// cancellation. A Close from another goroutine sends the Abort and cancels the RPC, which ends a Read
// waiting for the engine, and then ends the generation under the body's mutex. A stream that ends
// without a Complete sends the Abort itself (an engine that broke off). Every path ends by
// deregistering the AfterFunc or waiting for it, so after RoundTrip's error or the body's end or Close
// no goroutine of the call is left.
//
// Mid-stream migration (migrate.go): when the Generate stream breaks off, the body's reader asks the
// request's migrator (dispatch) for a continuation on its goroutine; the continuation's decode leg is
// a generation of its own whose stream the body then reads, and which it ends (Abort unless
// completed, cancel, close) by closing the continuation's response when it moves on or ends.
package enginerpc
