package admin

import (
	"context"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/internal/backend"
	"github.com/sluicegw/sluice/internal/worker"
)

// fanout calls fn for every registered worker (backend.Fanout), in registry order.
func fanout[T any](ctx context.Context, s *Service, fn func(context.Context, *worker.Worker, *backend.Upstream) T) []T {
	return backend.Fanout(ctx, s.d.HTTP, s.d.FanoutTimeout, s.d.Registry.Snapshot().All(), fn)
}

// GetLoads asks every worker for its load.
func (s *Service) GetLoads(ctx context.Context, _ *adminv1.GetLoadsRequest) (*adminv1.GetLoadsResponse, error) {
	loads := fanout(ctx, s, func(ctx context.Context, w *worker.Worker, u *backend.Upstream) *adminv1.WorkerLoad {
		l := &adminv1.WorkerLoad{Id: w.ID(), Url: w.URL()}
		load, err := u.FetchLoad(ctx, w.URL(), string(w.Protocol()))
		if err != nil {
			l.Error = err.Error()
		} else {
			l.RunningRequests, l.WaitingRequests, l.KvUsage = int32(load.Running), int32(load.Waiting), load.KVUsage
			for _, r := range load.Ranks {
				l.Ranks = append(l.Ranks, &adminv1.EngineRankLoad{Rank: uint32(r.Rank),
					RunningRequests: int32(r.Running), WaitingRequests: int32(r.Waiting), KvUsage: r.KVUsage})
			}
		}
		return l
	})
	return &adminv1.GetLoadsResponse{Loads: loads}, nil
}

// FlushCache asks every worker to flush its prefix cache; failures are reported per worker, not hidden.
func (s *Service) FlushCache(ctx context.Context, _ *adminv1.FlushCacheRequest) (*adminv1.FlushCacheResponse, error) {
	results := fanout(ctx, s, func(ctx context.Context, w *worker.Worker, u *backend.Upstream) *adminv1.FlushResult {
		r := &adminv1.FlushResult{Id: w.ID(), Url: w.URL(), Ok: true}
		if err := u.FlushCache(ctx, w.URL(), string(w.Protocol())); err != nil {
			r.Ok, r.Error = false, err.Error()
		}
		return r
	})
	return &adminv1.FlushCacheResponse{Results: results}, nil
}
