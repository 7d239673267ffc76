// Package kvevents keeps, per engine worker and data-parallel rank, an index of the KV-cache blocks that
// engine holds, fed by the engine's own KV-cache events, so the gateway can ask how much of a prompt's
// token prefix a worker already has cached.
//
// Engines publish the events over ZeroMQ as vLLM defines them (vllm/distributed/kv_events.py,
// vllm/config/kv_events.py, `--kv-events-config`); SGLang publishes the same format
// (python/sglang/srt/disaggregation/kv_events.py, python/sglang/srt/mem_cache/events.py). wire.go
// states the frame layout and the msgpack encodings accepted; index.go the block index; subscriber.go
// one subscriber per (worker, rank) endpoint with sequence-gap repair through the replay socket;
// manager.go the subscribers of a changing set of endpoints. Engines serving their own gRPC stream
// the same events on SubscribeKvEvents instead (grpc.go: every rank on one stream, whose servicer
// repairs rank gaps itself; grpcsource.go dials it for the manager).
//
// Blocks are keyed by the chain of their token ids (each block's key hashes its parent's key and its
// own tokens), not by the engine's block hashes: those are engine-local (vLLM hashes with a
// per-process seed, SGLang with Python's hash), while the gateway has only the prompt's tokens. The
// engine hash is kept per block only to resolve a later event's parent_block_hash and BlockRemoved.
//
// # Concurrency Model
//
// An [Index] holds one shard per (worker, rank). The shard map is guarded by an RWMutex taken for
// writing only to add or drop a shard; each shard has its own RWMutex. Writers are the subscribers,
// one goroutine per (worker, rank), applying a whole batch under the shard's write lock, so a reader
// sees a batch entirely or not at all. Readers ([Index.MatchedPrefix], [Index.Match]) take the shard
// map's and one shard's read locks, allocate nothing and walk the prompt's blocks until the first
// miss, so routing under admission's lock stays cheap while events stream in.
//
// A [Subscriber] owns its ZeroMQ sockets and its sequence state: [Subscriber.Run] is its only
// goroutine (plus the socket library's own, all ended when Run returns). A [Manager] owns the
// subscribers of a changing endpoint set: Set and Close start and stop them under its mutex and
// wait for each stopped one's Run to return. Metrics are reported through
// the injected [Metrics]; its methods must be fast and safe for concurrent use.
package kvevents
