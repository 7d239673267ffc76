// Package backend talks to inference engines over HTTP: the tuned upstream client and its header
// allow-list (httpclient.go), engine metadata and admin calls (models, server info, loads, cache
// flush, health probes: engine.go, load_vllm.go), protocol detection (detect.go), Mooncake's
// bootstrap server (mooncake.go), and retry classification and backoff (retry.go).
//
// It is the top floor of the engine side: request and response bodies are body's business, the
// HTTP/1.1 connection h1's, the worker gRPC protocol workerrpc's, the engines' own gRPC enginerpc's;
// backend composes them into one *http.Client that reaches http://, https:// and grpc:// engines
// alike, and decides nothing about routing.
//
// # Concurrency Model
//
// Upstream and the *http.Client are safe for concurrent use; everything else is a pure function.
// The transports' own models are in h1, workerrpc and enginerpc.
package backend
