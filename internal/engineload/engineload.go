// Package engineload polls every registered worker's engine for the load the engine itself reports —
// SGLang's /v1/loads (or /get_load), vLLM's /metrics, the worker protocol's LoadService, all read by
// backend.Upstream.FetchLoad — and hands each reading to a sink (the gateway's metrics). The gateway's
// own counters say what it sent; this says what the engine is carrying, its own queue included.
//
// # Concurrency Model
//
// Run is one loop in the caller's goroutine. Each round polls every registered worker at once, one
// goroutine per worker, each bounded by the poll timeout, and waits for all of them before the next
// round: polls of one worker never overlap, and no goroutine outlives Run. A worker removed while its
// poll is in flight is reported anyway; the sink decides (Worker.Removed) whether it still counts.
package engineload

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/sluicegw/sluice/internal/backend"
	"github.com/sluicegw/sluice/internal/worker"
)

// Sink receives the readings. Its methods are called from the poll goroutines, concurrently.
type Sink interface {
	// Loaded reports what w's engine said.
	Loaded(w *worker.Worker, l backend.Load)
	// Failed reports a poll of w that failed (unreachable engine, unknown format, timeout).
	Failed(w *worker.Worker, err error)
}

// Poller polls engines at a fixed interval.
type Poller struct {
	Registry *worker.Registry
	// HTTP calls the engines; each call carries the worker's own API key.
	HTTP *http.Client
	// Interval between rounds; Run returns at once when it is not positive (polling off).
	Interval time.Duration
	// Timeout bounds one worker's poll; default min(Interval, 5s).
	Timeout time.Duration
	Sink    Sink
}

// Run polls until ctx ends.
func (p *Poller) Run(ctx context.Context) {
	if p.Interval <= 0 {
		return
	}
	t := time.NewTicker(p.Interval)
	defer t.Stop()
	for {
		p.PollOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// PollOnce polls every registered worker once and returns when all polls have ended.
func (p *Poller) PollOnce(ctx context.Context) {
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = min(p.Interval, 5*time.Second)
		if timeout <= 0 {
			timeout = 5 * time.Second
		}
	}
	var wg sync.WaitGroup
	for _, w := range p.Registry.Snapshot().All() {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			l, err := (&backend.Upstream{Client: p.HTTP, APIKey: w.APIKey()}).FetchLoad(cctx, w.URL(), string(w.Protocol()))
			switch {
			case err == nil:
				p.Sink.Loaded(w, l)
			case ctx.Err() == nil: // the gateway stopping is not the engine's failure
				p.Sink.Failed(w, err)
			}
		})
	}
	wg.Wait()
}
