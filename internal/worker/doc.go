// Package worker keeps the gateway's view of its inference workers: the
// registry and its immutable snapshots, each worker's health, circuit breaker,
// in-flight load counter and engine-reported load, the health checker, the
// load monitor, and the event stream that admission and placement subscribe
// to.
//
// # Concurrency Model
//
// Readers never lock. [Registry.Snapshot] returns an immutable [Snapshot]
// published through an atomic pointer; every change (add, remove, replace)
// builds a new snapshot (copy-on-write) and swaps it in. Slices returned by a
// Snapshot are shared and must not be modified.
//
// Per-worker hot state is atomic: the load counter ([Worker.AcquireLoad] and
// [LoadGuard.Release]), the engine's last reported load (a pointer swapped by
// the [LoadMonitor]), the health value, and the spec pointer (labels and
// bootstrap port are updated by swapping in a new copy, so a reader never sees
// a torn spec). The [Breaker] reads its state with one atomic load on the
// fast path and takes a small mutex only to count failures or change state.
// Open turns into HalfOpen lazily, inside [Breaker.Allow] or [Breaker.State],
// without a goroutine and without an event, once its timeout has passed; or
// at once when an active health probe of the Ready worker passes
// ([Breaker.ProbeSucceeded], called by the [HealthChecker], which then emits
// EventBreakerRecovered). Every transition is reported to the registry's
// OnBreakerTransition observer, outside the breaker's lock.
//
// Writers (Add, Remove, Replace, Update, Drain, SetHealth) are serialised by
// the registry. After a change is published, subscribers registered with
// [Registry.Subscribe] are called synchronously, in publication order, on the
// writer's goroutine and outside the lock that guards the worker set.
// Callbacks must not block and must not call the registry's mutating methods
// (that would deadlock); they may read snapshots and workers freely.
//
// # Ownership
//
// The Registry creates every [Worker] and is the only writer of its health
// and spec. A [LoadGuard] belongs to the request that acquired it and must be
// released exactly once; Release is idempotent and nil-safe, so deferring it
// on every path is safe. A removed or replaced Worker stays valid for holders
// of old snapshots and guards, but is never routable again.
//
// The [HealthChecker] owns its goroutines: [HealthChecker.Run] starts at most
// HealthConfig.Concurrency probes at a time in each of its two loops (every
// worker once per Interval; workers never ready yet on a pace of their own,
// 1 s backing off to 2 s) and returns only after all of them have finished,
// once its context is done. A passing probe of a worker whose engine has not
// answered detection (Spec.DetectPending), or of a NotReady worker, first
// runs the injected [Redetector], at most one at a time per worker, and the
// worker is made ready only if it succeeds. The [LoadMonitor] does the
// same with its load fetches ([LoadMonitor.Run]); it is the only writer of
// [Worker.EngineLoad].
package worker
