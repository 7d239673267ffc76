package app

import (
	"context"
	"strings"
	"time"

	"github.com/sluicegw/sluice/internal/capacity"
	"github.com/sluicegw/sluice/internal/config"
	"github.com/sluicegw/sluice/internal/dispatch"
	"github.com/sluicegw/sluice/internal/telemetry"
	"github.com/sluicegw/sluice/internal/worker"
)

// How the capacity recommendation is fed: every finished request (dispatchMetrics.ObserveRequest)
// and, every capacityTick, the fleet as the registry and admission see it.

// capacityTick is the fleet's sampling period: fine enough that a worker's prefill busy share and
// a decode's batch are measured within a few percent over the smoothing constant (5 s).
const capacityTick = 250 * time.Millisecond

// newCapacity builds the recommender in PD mode (nil otherwise: without roles there is nothing to
// size).
func (a *App) newCapacity(cfg *config.Config) error {
	if cfg.Mode() != config.ModePD {
		return nil
	}
	r, err := capacity.New(capacity.Config{SLOTTFT: cfg.Capacity.SLOTTFT, SLOITL: cfg.Capacity.SLOITL},
		telemetry.NewCapacityMetrics(a.Prom))
	if err != nil {
		return err
	}
	a.Capacity = r
	return nil
}

// startCapacity runs the sampler until bg ends.
func (a *App) startCapacity(bg context.Context) {
	if a.Capacity != nil {
		a.wg.Go(func() { a.Capacity.Run(bg, capacityTick, a.capacityFleet) })
	}
}

// capacityFleet samples each model's prefill and decode workers: what each holds now (admission's
// slots and seats, or its load counter when admission does not count it) and its bound.
func (a *App) capacityFleet() map[string]capacity.Pool {
	snap := a.Registry.Snapshot()
	st := a.Admission.Status()
	seats := map[string]int{} // decode seats by engine URL (keys may be URL@rank)
	for k, n := range st.Seats {
		url, _, _ := strings.Cut(k, "@")
		seats[url] += n
	}
	seatLimits := map[string]int{}
	for k, n := range st.SeatLimits {
		url, _, _ := strings.Cut(k, "@")
		seatLimits[url] += max(n, 0)
	}
	out := map[string]capacity.Pool{}
	for _, m := range snap.Models() {
		var p capacity.Pool
		for _, w := range snap.Candidates(worker.RolePrefill, m) {
			p.Prefill = append(p.Prefill, capacity.Worker{Key: w.URL(),
				Busy: max(st.Inflight[w.URL()], load(w)), Limit: st.Limits[w.URL()]})
		}
		for _, w := range snap.Candidates(worker.RoleDecode, m) {
			p.Decode = append(p.Decode, capacity.Worker{Key: w.URL(),
				Busy: max(seats[w.URL()], load(w)), Limit: seatLimits[w.URL()]})
		}
		if len(p.Prefill)+len(p.Decode) > 0 {
			out[m] = p
		}
	}
	return out
}

// load is a worker's request count, its ranks' when it has data-parallel ranks.
func load(w *worker.Worker) int {
	n := w.Load()
	var ranks int64
	for _, r := range w.Ranks() {
		ranks += r.Load()
	}
	return int(max(n, ranks))
}

// observeCapacity feeds one finished request to the recommender.
func observeCapacity(r *capacity.Recommender, model string, s *dispatch.RequestStats) {
	if r == nil {
		return
	}
	q := capacity.Request{Model: model, Rejected: s.Status == 429, Answered: s.HasUsage,
		PromptTokens: int(s.Usage.Prompt), Output: int(s.Usage.Completion), DecodeWorker: s.Worker, ITL: s.ITL}
	if s.TTFT > 0 {
		q.Decode = s.Duration - s.TTFT
	}
	r.Observe(q)
}
