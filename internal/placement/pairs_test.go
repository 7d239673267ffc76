package placement

import (
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/worker"
)

// zoned registers a worker of role in zone.
func zoned(t *testing.T, reg *worker.Registry, url string, role worker.Role, zone string) *worker.Worker {
	t.Helper()
	w, err := reg.Add(worker.Spec{URL: url, Role: role, Models: []string{"m"}, Labels: map[string]string{worker.LabelZone: zone}})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestPredictedLatencyScoresPairs: with predicted_latency on both PD sides, each prefill worker's
// model learns what its partner adds to the TTFT (here 200 ms for a cross-zone KV transfer, reported
// through Picks.Paired whatever partner ran) and the pair formed is the one of lowest prediction: the
// decode side picks the same-zone partner of the chosen prefill worker, and the prefill side prefers
// the prefill worker whose best pair is fastest. Before the models are warm nothing is scored.
func TestPredictedLatencyScoresPairs(t *testing.T) {
	reg := worker.NewRegistry(worker.RegistryOptions{StartReady: true})
	pa, pb := zoned(t, reg, "http://pa", worker.RolePrefill, "a"), zoned(t, reg, "http://pb", worker.RolePrefill, "b")
	da, db := zoned(t, reg, "http://da", worker.RoleDecode, "a"), zoned(t, reg, "http://db", worker.RoleDecode, "b")
	decodes := []*worker.Worker{da, db}
	clk := &fakeClock{t: time.Unix(1000, 0)}
	cfg := DefaultConfig()
	cfg.Now = clk.Now
	pre, _ := NewPredictedLatency(cfg)
	dec, _ := NewPredictedLatency(cfg)
	// The cluster's truth: pb prefills in 100 ms, pa in 150 ms; a cross-zone transfer adds 200 ms.
	ttft := map[[2]*worker.Worker]time.Duration{}
	partners := func(*worker.Worker) []*worker.Worker { return decodes }
	run := func(pw, dw *worker.Worker) {
		base := map[*worker.Worker]time.Duration{pa: 150 * time.Millisecond, pb: 100 * time.Millisecond}[pw]
		if pw.Place().Zone != dw.Place().Zone {
			base += 200 * time.Millisecond
		}
		req := &Request{Model: "m", Text: "same prompt", Picks: &Picks{}, Partners: partners}
		pre.Pick([]*worker.Worker{pw}, req) // the pick the training forces
		req.Picks.Paired(pw, dw)
		clk.Advance(base)
		req.Picks.FirstToken()
		ttft[[2]*worker.Worker{pw, dw}] = base
	}
	if _, _, paired := dec.choosePartner(decodes, &Request{Model: "m", Prefill: pa, Picks: &Picks{}}); paired {
		t.Fatal("a pair scored before any pick")
	}
	for i := range 4 * modelMinSamples {
		run([]*worker.Worker{pa, pb}[i%2], decodes[(i/2)%2])
	}
	for _, pw := range []*worker.Worker{pa, pb} {
		req := &Request{Model: "m", Text: "same prompt", Picks: &Picks{}, Partners: partners}
		pre.Pick([]*worker.Worker{pw}, req)
		req.Prefill = pw
		got := decodes[dec.Pick(decodes, req)]
		if got.Place().Zone != pw.Place().Zone {
			t.Errorf("decode for prefill %s: %s, want its own zone's", pw.URL(), got.URL())
		}
	}
	req := &Request{Model: "m", Text: "same prompt", Picks: &Picks{}, Partners: partners}
	if got := []*worker.Worker{pa, pb}[pre.Pick([]*worker.Worker{pa, pb}, req)]; got != pb {
		t.Errorf("prefill pick %s, want %s (its best pair is 50 ms faster)", got.URL(), pb.URL())
	}
	// Only the cross-zone pairs are slow to pb: with only da left, pa's same-zone pair wins.
	partners = func(*worker.Worker) []*worker.Worker { return []*worker.Worker{da} }
	req = &Request{Model: "m", Text: "same prompt", Picks: &Picks{}, Partners: partners}
	if got := []*worker.Worker{pa, pb}[pre.Pick([]*worker.Worker{pa, pb}, req)]; got != pa {
		t.Errorf("prefill pick with only decode da: %s, want %s (pb's pair crosses zones: +200 ms)", got.URL(), pa.URL())
	}
	if len(ttft) != 4 {
		t.Fatalf("trained on %d pairs, want all 4", len(ttft))
	}
}
