package backend

import (
	"context"

	"connectrpc.com/connect"

	sglangpb "github.com/sluicegw/sluice/gen/sglang/grpc/scheduler"
	"github.com/sluicegw/sluice/gen/sglang/grpc/scheduler/sglangpbconnect"
	vllmpb "github.com/sluicegw/sluice/gen/vllm/grpc/engine"
	"github.com/sluicegw/sluice/gen/vllm/grpc/engine/vllmpbconnect"
)

// fetchEngineGRPCLoad reads the load of a grpc:// worker that speaks an engine's own gRPC (protocol
// "sglang" or "vllm" at a grpc:// URL) with its GetLoads: one entry per data-parallel rank (vLLM's
// servicer reports one), summed as the HTTP loads are.
func (u *Upstream) fetchEngineGRPCLoad(ctx context.Context, baseURL, protocol string) (Load, error) {
	type rankLoad interface {
		GetDpRank() int32
		GetNumRunningReqs() int32
		GetNumWaitingReqs() int32
		GetTokenUsage() float64
	}
	var loads []rankLoad
	switch protocol {
	case "vllm":
		r, err := vllmpbconnect.NewVllmEngineClient(u.client(), baseURL, connect.WithGRPC()).GetLoads(ctx, &vllmpb.GetLoadsRequest{})
		if err != nil {
			return Load{}, err
		}
		for _, l := range r.GetLoads() {
			loads = append(loads, l)
		}
	default:
		r, err := sglangpbconnect.NewSglangSchedulerClient(u.client(), baseURL, connect.WithGRPC()).GetLoads(ctx, &sglangpb.GetLoadsRequest{})
		if err != nil {
			return Load{}, err
		}
		for _, l := range r.GetLoads() {
			loads = append(loads, l)
		}
	}
	var out Load
	for _, l := range loads {
		rl := RankLoad{Rank: int(l.GetDpRank()), Running: int(l.GetNumRunningReqs()), Waiting: int(l.GetNumWaitingReqs()), KVUsage: l.GetTokenUsage()}
		out.Running += rl.Running
		out.Waiting += rl.Waiting
		out.KVUsage += rl.KVUsage
		out.Ranks = append(out.Ranks, rl)
	}
	if len(loads) > 0 {
		out.KVUsage /= float64(len(loads))
	}
	if len(out.Ranks) < 2 {
		out.Ranks = nil
	}
	return out, nil
}
