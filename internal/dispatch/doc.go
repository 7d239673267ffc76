// Package dispatch runs one inference request's life: parse -> admit -> place -> call the legs ->
// hand the decode response back -> release. It is the only package that combines the core (worker,
// placement, admission) with the engine clients (backend); the REST surface and the typed RPCs both
// call Dispatcher.Do and only relay what it returns.
//
// One flow per file: regular.go (one worker), pd.go (how every PD request starts: admission on a
// prefill worker whose KV handoff a decode worker speaks, then the handoff's adapter), pair.go (with
// decode seats: the prefill/decode pair chosen in admission's one selection), pd_sglang.go
// (SGLang's bootstrap handoff, n > 1 split into single samples), pd_vllm.go (vLLM's NIXL connector),
// pd_workerrpc.go (sluice.worker.v1), aux.go (the routes served by one worker in either mode:
// embeddings, rerank, score, classify, tokenize, responses, messages), exchange.go (the parallel two-leg exchange of the bootstrap
// handoffs), samples.go (merging split samples), migrate.go (a stream whose decode engine broke off,
// continued on a new pair), call.go (one leg on the wire), fleet.go (what a new worker's engine says
// about itself).
//
// # Concurrency Model
//
// Do runs in the caller's goroutine. A parallel exchange (SGLang, worker protocol) starts exactly one
// goroutine for its prefill leg; the request owns it: Response.Close (or the exchange's own error
// path) cancels the legs' context and waits for that goroutine before returning, so no goroutine
// outlives its request. Close first gives a prefill still running a moment to end by itself
// (Config.PrefillGrace, 50ms by default, never past the request's context): the decode's answer means
// the prefill's work is done, and a cancelled leg would lose its upstream connection. The prefill goroutine releases its hold on the admission slot and the
// prefill load guard itself, as soon as the prefill body has been read, has failed or was cancelled —
// a long decode never holds prefill capacity. The decode load guard is released by Response.Close, and
// so is the decode seat (pd.go's holdSeat, the one place it is released: on close, on the attempt's
// error, on a panic), independently of the slot.
//
// A migration (migrate.go) runs on the goroutine of the engine transport's stream writer, the one
// that relays the broken stream: it calls the request's migrator, which runs a whole PD attempt (its
// exchange's prefill goroutine included) on that goroutine and hands back the continuation's
// Response; the writer closes it when it moves on or when the client's stream ends, which releases
// the continuation's guards as any attempt's. Its context is the broken generation's, cancelled when
// the client goes away or the body is closed, so a migration never outlives the request.
//
// A split n > 1 request runs its n exchanges from n goroutines that Do joins before it returns. Each
// holds one admission.Guard of the request's one slot. A merged stream (samples.go) has one pump
// goroutine per sample, owned by the merged body: its Close cancels the samples, waits for the pumps
// and then closes every sample's body.
//
// # Request Lifecycle and Ownership
//
// Every guard (admission slot and guards, load guards, the request timeout's cancel, spans) is
// released exactly once on every path: on error inside Do before it returns, otherwise by
// Response.Close. Retries happen only before any byte reached the client; each attempt releases its
// slot before the backoff and goes through admission again with fresh bootstrap rooms. Admission
// rejections (429), unavailability (503/404) and the engines' client errors (4xx) are never retried.
package dispatch
