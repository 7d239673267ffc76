// Package body reads and rewrites the JSON and SSE bodies the gateway exchanges with clients and
// engines, and does nothing else: no I/O beyond the reader it is handed, no routing.
//
// It holds the request model (ParseRequest in request.go: one pass over the JSON for the fields
// routing needs, the body kept byte-for-byte; the routes in route.go, the prompts and messages in
// prompt.go, aux.go for the auxiliary routes), the body rewrites of the PD
// protocols (SGLang bootstrap fields and input-logprob merging in sglang.go, vLLM NIXL bodies in
// vllm.go, Mooncake bodies in mooncake.go), n > 1 sample merging (samples.go), usage extraction
// (usage.go), and SSE reading and writing for the streaming hot path (sse.go).
//
// Rewrites work on raw JSON with the gateway's validating scanner (internal/jsonscan) and an editor (jsonedit.go):
// untouched members are copied byte-for-byte and new top-level fields are spliced in before the
// closing brace, so unknown engine parameters always survive.
//
// # Concurrency Model
//
// Everything is either a pure function or a value owned by one goroutine (SSEReader, Request,
// SampleStreamMerger).
package body
