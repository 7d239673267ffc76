package backend

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	sglangpb "github.com/sluicegw/sluice/gen/sglang/grpc/scheduler"
	"github.com/sluicegw/sluice/gen/sglang/grpc/scheduler/sglangpbconnect"
)

// fakeScheduler answers SGLang's GetLoads with loads, recording the sections asked for.
type fakeScheduler struct {
	sglangpbconnect.UnimplementedSglangSchedulerHandler
	loads []*sglangpb.SchedulerLoad

	mu      sync.Mutex
	include []string
}

func (f *fakeScheduler) GetLoads(_ context.Context, req *sglangpb.GetLoadsRequest) (*sglangpb.GetLoadsResponse, error) {
	f.mu.Lock()
	f.include = slices.Clone(req.GetInclude())
	f.mu.Unlock()
	return &sglangpb.GetLoadsResponse{DpRankCount: int32(len(f.loads)), Loads: f.loads}, nil
}

// SGLang's DisaggregationMetrics feed a PD rank's waiting load as HTTP's num_waiting_reqs does: an
// engine that counts its pre-allocation, transfer and retracted queues in num_waiting_reqs (as
// get_loads does) gives that figure, not twice the queues; one that reports them only in the
// disaggregation section still has them counted.
func TestFetchLoadEngineGRPCDisaggregation(t *testing.T) {
	t.Parallel()
	decode := func(rank, waiting, queued, prealloc, transfer, retracted int32) *sglangpb.SchedulerLoad {
		return &sglangpb.SchedulerLoad{DpRank: rank, NumRunningReqs: 2, NumWaitingReqs: waiting, TokenUsage: 0.5,
			Queues: &sglangpb.QueueMetrics{Waiting: queued},
			Disaggregation: &sglangpb.DisaggregationMetrics{Mode: "decode", DecodePreallocQueueReqs: prealloc,
				DecodeTransferQueueReqs: transfer, DecodeRetractedQueueReqs: retracted}}
	}
	tests := []struct {
		name  string
		loads []*sglangpb.SchedulerLoad
		want  Load
	}{
		{"num_waiting_reqs already counts the queues", []*sglangpb.SchedulerLoad{decode(0, 5, 1, 2, 1, 1)},
			Load{Running: 2, Waiting: 5, KVUsage: 0.5}},
		{"queues only in the disaggregation section", []*sglangpb.SchedulerLoad{decode(0, 1, 1, 3, 2, 1)},
			Load{Running: 2, Waiting: 7, KVUsage: 0.5}},
		{"per rank", []*sglangpb.SchedulerLoad{decode(0, 0, 0, 4, 0, 0), decode(1, 1, 1, 0, 0, 0)},
			Load{Running: 4, Waiting: 5, KVUsage: 0.5, Ranks: []RankLoad{{0, 2, 4, 0.5}, {1, 2, 1, 0.5}}}},
		{"prefill bootstrap queue", []*sglangpb.SchedulerLoad{{NumWaitingReqs: 1, Queues: &sglangpb.QueueMetrics{Waiting: 1},
			Disaggregation: &sglangpb.DisaggregationMetrics{Mode: "prefill", PrefillPreallocQueueReqs: 3}}},
			Load{Waiting: 4}},
		{"no disaggregation section", []*sglangpb.SchedulerLoad{{NumRunningReqs: 1, NumWaitingReqs: 3, TokenUsage: 0.25}},
			Load{Running: 1, Waiting: 3, KVUsage: 0.25}},
		{"negative counts are 0", []*sglangpb.SchedulerLoad{decode(0, -4, -1, -2, 1, 0)},
			Load{Running: 2, Waiting: 1, KVUsage: 0.5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeScheduler{loads: tt.loads}
			addr := startWorker(t, &fakeWorker{}, func(mux *http.ServeMux) { mux.Handle(sglangpbconnect.NewSglangSchedulerHandler(f)) })
			got, err := FetchLoad(context.Background(), testClient(t), "grpc://"+addr, "sglang")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("FetchLoad (-want +got):\n%s", diff)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if !slices.Contains(f.include, "disagg") || !slices.Contains(f.include, "queues") {
				t.Errorf("GetLoads include = %q: SGLang sends only core unless the sections are named", f.include)
			}
		})
	}
}
