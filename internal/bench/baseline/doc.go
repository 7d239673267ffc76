// Package baseline is what the overhead scenario measures sluice against, each a small program
// (cmd/sluice-baseline) built from this module: the standard library's httputil.ReverseProxy in front
// of one engine, a bare two-leg PD proxy (SGLang's bootstrap handoff with nothing else: no routing,
// admission, metrics or tracing), and a frame server, an instant upstream that streams its frames
// spaced like tokens, back to back, or holds a stream open, as each request asks.
//
// # Concurrency Model
//
// Every handler runs in its net/http server goroutine. The PD proxy starts one goroutine per request
// for its prefill leg and waits for it before the handler returns; on the decode leg's failure it
// cancels the prefill first. A held frame stream ends when its client goes away. Serve owns its
// server: it returns after the context ends and the server has shut down.
package baseline
