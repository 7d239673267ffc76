package capacity

import (
	"context"
	"time"
)

// Run ticks every interval with the fleet that sample returns, until ctx
// ends. It runs in its caller's goroutine.
func (r *Recommender) Run(ctx context.Context, every time.Duration, sample func() map[string]Pool) {
	t := time.NewTicker(every)
	defer t.Stop()
	r.Tick(r.cfg.Now(), sample())
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.Tick(r.cfg.Now(), sample())
		}
	}
}
