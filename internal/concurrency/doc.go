// Package concurrency bounds the requests in flight through the whole gateway, whatever their route,
// model or worker: the Rust gateway's --max-concurrent-requests with --queue-size and
// --queue-timeout-secs, and its --rate-limit-tokens-per-second refill.
//
// It is a token bucket of MaxConcurrent tokens. A request takes one token when it is admitted and
// gives it back when it ends (its response fully sent, streaming included, or abandoned); with a
// refill rate the bucket also gains TokensPerSecond tokens per second, never above MaxConcurrent, as
// SMG's does (model_gateway/src/middleware/token_bucket.rs). Without a refill rate it is a plain concurrency
// bound. A request that finds no token waits in one FIFO queue of at most QueueSize requests: a full
// queue rejects at once ([ErrQueueFull], HTTP 429), a wait longer than QueueTimeout ends with
// [ErrQueueTimeout] (HTTP 408, as SMG answers).
//
// It composes with per-worker prefill admission (internal/admission) by nesting: a request first
// takes a gateway token here, at the surface, and holds it for its whole life; inside dispatch it
// then takes a prefill slot on one worker, only while its prefill runs. A request waiting for a
// prefill slot holds its gateway token, so the gateway limit bounds everything inside sluice, queued
// prefills included.
//
// # Concurrency Model
//
// One mutex guards the token count, its refill clock and the FIFO list of waiters (internal/waitq, x/sync/semaphore
// style). A waiter is owned by the goroutine that called Acquire: a grant removes it from the list
// and closes its ready channel under the mutex. New requests never overtake waiters. Releases grant
// in the releaser's goroutine. With a refill rate only the head of the queue keeps a timer, for the
// moment its token will have accrued; when the head changes, the new head is nudged to arm its own.
// Cancellation and timeout re-check under the mutex: a grant that raced in before a cancellation is
// given back, one that raced in before a timeout is kept. The limiter owns no goroutines.
//
// A [Permit] is released exactly once (an atomic flag), whatever the path.
package concurrency
