// Package placement chooses workers for a request: load-balancing policies
// (random, round_robin, power_of_two, cache_aware, consistent_hashing,
// least_load, manual, kv_aware, predicted_latency) and
// the selection functions that filter a registry snapshot down to routable
// candidates before running a policy. Nothing here blocks.
//
// # Concurrency Model
//
// Policies are safe for concurrent use and never block on I/O or on other
// requests: round_robin uses an atomic counter, power_of_two and random an
// injected concurrency-safe random source, consistent_hashing an immutable
// ring swapped atomically when its membership changes, least_load the
// engine loads the worker package's load monitor stores atomically on each
// worker. cache_aware keeps one
// approximate radix tree per model, each guarded by its own mutex held only
// for one match+insert (microseconds); eviction ([CacheAware.Evict]) takes the
// same mutex, tree by tree, and is driven by its owner ([CacheAware.Run] or
// [Set.Run]) on an interval. A [Set]'s prefill and decode policies share
// their trees (and so each tree's mutex) when both keep prompts. manual keeps its routing keys in a map under one mutex held for one
// pick; [Manual.Evict] (keys idle too long) takes the same mutex.
// kv_aware only reads [PrefixIndex] (the KV-event index's read locks) and its own cache_aware
// fallback. predicted_latency reads its per-worker models' coefficients through atomic pointers
// (a refit, on the dispatcher's report of a measured TTFT, swaps them) and keeps a cache_aware
// tree set of its own, locked as cache_aware's are. With session affinity (Config.SessionAffinity, session.go) cache_aware and kv_aware keep
// their session keys in a map under one mutex, held for one lookup and one insert per pick, never
// while a tree's lock is taken.
//
// The selection functions ([SelectPrefill], [SelectDecode], [SelectRegular])
// read worker state through atomics (health, breaker, load) and pass the
// snapshot's precomputed candidate slice to the policy unchanged when nothing
// is filtered out; otherwise they filter into a pooled buffer that is cleared
// and returned before they return. Policies must not retain the slice.
//
// # Ownership
//
// Policies only choose; they never take load or admission slots. The caller
// (admission, dispatch) acquires the worker's load or slot after a pick.
// Policies that keep per-worker state implement [Forgetter]; the owner calls
// Forget when a worker is removed or replaced (registry events).
//
// A cache_aware tree that grows past a few megabytes keeps the rest of its nodes and text outside
// the Go heap, in huge pages where Linux gives them (bulk.go): a pick's walk is cache and TLB misses
// in tens of megabytes, and on the heap the tree would also multiply the GC's target. The tree owns
// its mappings; a runtime cleanup unmaps them when it is dropped. [Set.MappedBytes] says how much is
// mapped, which the owner takes off Go's soft memory limit.
package placement
