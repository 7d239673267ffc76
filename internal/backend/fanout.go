package backend

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// Fanout calls fn for each of workers at once, each call bounded by timeout and given an Upstream
// that carries that worker's own API key; the results come back in the order of workers. It is the
// admin surfaces' way of asking every engine the same thing (loads, cache flushes, metrics).
func Fanout[W interface{ APIKey() string }, T any](ctx context.Context, client *http.Client, timeout time.Duration,
	workers []W, fn func(context.Context, W, *Upstream) T) []T {
	out := make([]T, len(workers))
	var wg sync.WaitGroup
	for i, w := range workers {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			out[i] = fn(cctx, w, &Upstream{Client: client, APIKey: w.APIKey()})
		})
	}
	wg.Wait()
	return out
}
