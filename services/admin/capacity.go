package admin

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
)

// GetCapacity returns the capacity recommendation per model and role, with its inputs and reasons.
func (s *Service) GetCapacity(context.Context, *adminv1.GetCapacityRequest) (*adminv1.GetCapacityResponse, error) {
	r := s.d.Capacity
	if r == nil {
		return &adminv1.GetCapacityResponse{}, nil
	}
	cfg := r.Config()
	out := &adminv1.GetCapacityResponse{Enabled: true, SloTtft: durationpb.New(cfg.SLOTTFT),
		SloItl: durationpb.New(cfg.SLOITL), ScaleDownHold: durationpb.New(cfg.ScaleDownHold)}
	for _, rec := range r.Snapshot() {
		in := rec.Inputs
		pb := &adminv1.CapacityRecommendation{
			Model: rec.Model, Role: string(rec.Role),
			RecommendedWorkers: clamp32(int64(rec.Recommended)), TargetWorkers: clamp32(int64(rec.Target)),
			CurrentWorkers: clamp32(int64(rec.Current)), BusyWorkers: clamp32(int64(rec.Floor)),
			OfferedLoad: rec.OfferedLoad, PerWorker: rec.PerWorker, Sized: rec.Sized, Reason: rec.Reason,
			Inputs: &adminv1.CapacityInputs{
				ArrivalRate: in.ArrivalRate, RejectionRate: in.RejectionRate,
				PromptTokens: in.PromptTokens, OutputTokens: in.OutputTokens,
				PrefillTokensPerBusySecond: in.PrefillRate, PrefillBusyWorkers: in.PrefillBusy,
				DecodeSequences: in.DecodeBusy, ItlFitted: in.FitOK,
				ItlBase: durationpb.New(in.ITLBase), ItlSlope: durationpb.New(in.ITLSlope),
			},
		}
		if !rec.HoldUntil.IsZero() {
			pb.ScaleDownAt = rec.HoldUntil.UTC().Format(time.RFC3339)
		}
		out.Recommendations = append(out.Recommendations, pb)
	}
	return out, nil
}
