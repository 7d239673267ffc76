package admin

import (
	"math"
	"testing"
	"time"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/internal/capacity"
)

// GetCapacity says "not enabled" without a recommender (regular mode), and otherwise carries each
// recommendation with its SLOs, inputs and reason.
func TestGetCapacity(t *testing.T) {
	s, _ := newTestService(t, false)
	resp, err := s.GetCapacity(t.Context(), &adminv1.GetCapacityRequest{})
	if err != nil || resp.GetEnabled() || len(resp.GetRecommendations()) != 0 {
		t.Fatalf("without a recommender: %v, %v; want disabled and empty", resp, err)
	}

	now := time.Unix(1_000_000, 0)
	r, err := capacity.New(capacity.Config{SLOTTFT: time.Second, SLOITL: 50 * time.Millisecond, Now: func() time.Time { return now }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	fleet := map[string]capacity.Pool{"m": {Prefill: []capacity.Worker{{Key: "p", Busy: 1}}, Decode: []capacity.Worker{{Key: "d", Busy: 2}}}}
	r.Tick(now, fleet)
	for range 20 {
		r.Observe(capacity.Request{Model: "m", Answered: true, PromptTokens: 800, Output: 50})
		now = now.Add(250 * time.Millisecond)
		r.Tick(now, fleet)
	}
	s.d.Capacity = r
	resp, err = s.GetCapacity(t.Context(), &adminv1.GetCapacityRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetEnabled() || resp.GetSloTtft().AsDuration() != time.Second || resp.GetSloItl().AsDuration() != 50*time.Millisecond {
		t.Fatalf("response %v: want enabled with the SLOs", resp)
	}
	recs := resp.GetRecommendations()
	if len(recs) != 2 || recs[0].GetRole() != "prefill" || recs[1].GetRole() != "decode" {
		t.Fatalf("recommendations %v, want prefill then decode of m", recs)
	}
	p := recs[0]
	if p.GetModel() != "m" || p.GetRecommendedWorkers() < 1 || p.GetCurrentWorkers() != 1 || p.GetReason() == "" ||
		math.Abs(p.GetInputs().GetPromptTokens()-800) > 1e-6 || p.GetInputs().GetArrivalRate() <= 0 {
		t.Errorf("prefill %v", p)
	}
}
