// Package h1 is the gateway's HTTP/1.1 client for plain-http engines: a connection pool whose
// round trips run in the calling goroutine (see Transport for why, and for its concurrency model).
package h1
