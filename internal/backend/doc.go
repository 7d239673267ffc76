// Package backend is everything about talking to inference engines, free of routing decisions: the
// request model (ParseRequest: one pass over the JSON for the fields routing needs, the body kept
// byte-for-byte), the body rewrites of the PD protocols (SGLang bootstrap fields, vLLM prefill and
// decode bodies, SGLang input-logprob merging), the tuned upstream HTTP client and header allow-list,
// SSE reading and writing for the streaming hot path, the worker gRPC protocol as an
// http.RoundTripper (so grpc:// workers look like HTTP engines), engine metadata and admin calls
// (models, server info, loads, cache flush, health probes), and retry classification and backoff.
//
// Body rewrites work on raw JSON with a small validating scanner (jsonscan.go): untouched members are
// copied byte-for-byte and new top-level fields are spliced in before the closing brace, so unknown
// engine parameters always survive.
//
// # Concurrency Model
//
// Everything except GRPCTransport is either a pure function or a value owned by one goroutine
// (SSEReader, Request). Upstream and the *http.Client are safe for concurrent use.
//
// GRPCTransport is safe for concurrent use; its only shared state is a mutex-guarded cache of
// connect clients per worker address. A call with several sub-requests (n > 1, a prompt batch) runs
// one goroutine per sub-request and joins them all before RoundTrip returns (the first error cancels
// the rest). A streamed decode answers once every sub-request's stream has produced its first message;
// its body is then written by one writer goroutine fed by one pump goroutine per stream over an
// unbuffered channel. The writer owns the pumps: on every exit path (end of streams, worker error,
// transport failure, body closed, request context done) it cancels the call's context, waits for the
// pumps, and closes the pipe. Closing the body cancels the context and waits for the writer, so after
// Close returns no goroutine of the call is left.
package backend
