package backend

import (
	"context"

	"connectrpc.com/connect"

	sglangpb "github.com/sluicegw/sluice/gen/sglang/grpc/scheduler"
	"github.com/sluicegw/sluice/gen/sglang/grpc/scheduler/sglangpbconnect"
	vllmpb "github.com/sluicegw/sluice/gen/vllm/grpc/engine"
	"github.com/sluicegw/sluice/gen/vllm/grpc/engine/vllmpbconnect"
)

// sglangLoadSections are the GetLoads sections asked of SGLang: its scheduler sends only "core" when
// none is named, and the disaggregation and queue sections are what queuedInDisaggregation reads.
var sglangLoadSections = []string{"core", "disagg", "queues"}

// fetchEngineGRPCLoad reads the load of a grpc:// worker that speaks an engine's own gRPC (protocol
// "sglang" or "vllm" at a grpc:// URL) with its GetLoads: one entry per data-parallel rank (vLLM's
// servicer reports one), summed as the HTTP loads are.
func (u *Upstream) fetchEngineGRPCLoad(ctx context.Context, baseURL, protocol string) (Load, error) {
	var ranks []RankLoad
	switch protocol {
	case "vllm":
		r, err := vllmpbconnect.NewVllmEngineClient(u.client(), baseURL, connect.WithGRPC()).GetLoads(ctx, &vllmpb.GetLoadsRequest{})
		if err != nil {
			return Load{}, err
		}
		for _, l := range r.GetLoads() {
			ranks = append(ranks, RankLoad{Rank: int(l.GetDpRank()), Running: nonNegative(l.GetNumRunningReqs()),
				Waiting: nonNegative(l.GetNumWaitingReqs()), KVUsage: max(l.GetTokenUsage(), 0)})
		}
	default:
		r, err := sglangpbconnect.NewSglangSchedulerClient(u.client(), baseURL, connect.WithGRPC()).GetLoads(ctx,
			&sglangpb.GetLoadsRequest{Include: sglangLoadSections})
		if err != nil {
			return Load{}, err
		}
		for _, l := range r.GetLoads() {
			ranks = append(ranks, RankLoad{Rank: int(l.GetDpRank()), Running: nonNegative(l.GetNumRunningReqs()),
				Waiting: max(nonNegative(l.GetNumWaitingReqs()), queuedInDisaggregation(l)), KVUsage: max(l.GetTokenUsage(), 0)})
		}
	}
	var out Load
	for _, rl := range ranks {
		out.Running += rl.Running
		out.Waiting += rl.Waiting
		out.KVUsage += rl.KVUsage
	}
	if len(ranks) > 0 {
		out.KVUsage /= float64(len(ranks))
	}
	if len(ranks) > 1 {
		out.Ranks = ranks
	}
	return out, nil
}

// queuedInDisaggregation is how many requests an SGLang PD rank holds before running them: its
// waiting queue plus, on a decode, the pre-allocation, transfer and retracted queues (on a prefill,
// the bootstrap queue). SGLang's num_waiting_reqs counts these too (scheduler_metrics_mixin.py
// get_loads), as /v1/loads reports it over HTTP, so the larger of the two is the rank's waiting load:
// the same figure as HTTP mode's where the engine counts them, and not an undercount where a build
// reports them only in the disaggregation section. 0 without that section.
func queuedInDisaggregation(l *sglangpb.SchedulerLoad) int {
	d := l.GetDisaggregation()
	if d == nil {
		return 0
	}
	n := nonNegative(l.GetQueues().GetWaiting())
	switch d.GetMode() {
	case "decode":
		n += nonNegative(d.GetDecodePreallocQueueReqs()) + nonNegative(d.GetDecodeTransferQueueReqs()) +
			nonNegative(d.GetDecodeRetractedQueueReqs())
	case "prefill":
		n += nonNegative(d.GetPrefillPreallocQueueReqs())
	}
	return n
}

// nonNegative reads an engine-reported count; a negative one is 0, as count does for HTTP's.
func nonNegative(n int32) int { return int(max(n, 0)) }
