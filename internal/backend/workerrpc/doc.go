// Package workerrpc speaks sluice's worker gRPC protocol (gen/sluice/worker/v1) to grpc:// workers,
// as an http.RoundTripper so they look like HTTP engines to the layers above: grpcconv.go turns an
// OpenAI or SGLang body into Prefill and Decode calls, grpcjson.go renders their answers as the JSON
// and SSE an HTTP engine would send, grpctransport.go runs the calls. typed.go lets a caller that
// holds the request as a Call skip the body: dispatch's worker-RPC PD flow converts once for both
// legs and sets the handshake on the messages, and a typed surface builds the Call from its own
// messages (NewCall). answer.go and chunks.go let such a caller take the answer as messages too
// (Call.WithTypedAnswer: Answer, Stream), rendering JSON or SSE only if the body is read.
//
// # Concurrency Model
//
// GRPCTransport is safe for concurrent use; its only shared state is a mutex-guarded cache of
// connect clients per worker address. A call with several sub-requests (n > 1, a prompt batch) runs
// one goroutine per sub-request and joins them all before RoundTrip returns (the first error cancels
// the rest). A streamed decode answers once every sub-request's stream has produced its first message;
// its body is then written by one writer goroutine fed by one pump goroutine per stream over an
// unbuffered channel. The writer owns the pumps: on every exit path (end of streams, worker error,
// transport failure, body closed, request context done) it cancels the call's context, waits for the
// pumps, and closes the pipe. Closing the body cancels the context and waits for the writer, so after
// Close returns no goroutine of the call is left. A typed stream (Stream) has no writer: the caller's
// goroutine pulls the pumps' events in Next (or Read), and Close cancels the context and waits for the
// pumps. A Call is never modified once built (Send copies
// it to give it a request id), so both legs of a PD request run one Call at once.
package workerrpc
