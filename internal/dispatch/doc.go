// Package dispatch runs one inference request's life: parse -> admit -> place -> call the legs ->
// hand the decode response back -> release. It is the only package that combines the core (worker,
// placement, admission) with the engine clients (backend); the REST surface and the typed RPCs both
// call Dispatcher.Do and only relay what it returns.
//
// # Concurrency Model
//
// Do runs in the caller's goroutine. In PD mode with parallel legs (SGLang style and the worker gRPC
// protocol) Do starts exactly one goroutine for the prefill leg; the request owns it: Response.Close
// (or Do's own error path) cancels the legs' context and waits for that goroutine before returning, so
// no goroutine outlives its request. The prefill goroutine releases the admission slot and the prefill
// load guard itself, as soon as the prefill body has been read, has failed or was cancelled — a long
// decode never holds prefill capacity. The decode load guard is released by Response.Close.
//
// # Request Lifecycle and Ownership
//
// Every guard (admission slot, load guards, the request timeout's cancel, spans) is released exactly once
// on every path: on error inside Do before it returns, otherwise by Response.Close. Retries happen only
// before any byte reached the client; each attempt releases its slot before the backoff and goes through
// admission again with fresh bootstrap rooms. Admission rejections (429) and unavailability (503/404) are
// never retried.
package dispatch
