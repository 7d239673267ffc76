package placement

import "github.com/sluicegw/sluice/internal/worker"

// How predicted_latency scores a PD pair. A pair's TTFT is the prefill worker's model applied to the
// prefill's features and the decode partner's (its load, the pair's topology distance), so one model
// per prefill worker learns what each kind of partner adds: the KV transfer across that distance and
// the decode's first step at that load. The prefill selection scores each prefill candidate by its
// best partner (Request.Partners); the decode selection then scores its candidates with the chosen
// prefill worker's model (Request.Prefill), so with predicted_latency on both sides the pair formed is
// the one of lowest predicted TTFT, among decode workers predicted within the ITL SLO where any is.
// The dispatcher reports the partner it chose (Picks.Paired), whatever the decode policy, so the
// model learns from the pair that ran.

// distanceLevel is a pair's distance as a feature: one step per level crossed.
func distanceLevel(d worker.Distance) float64 {
	switch d {
	case worker.DistanceRack:
		return 1
	case worker.DistanceZone:
		return 2
	case worker.DistanceCrossZone:
		return 3
	}
	return 0
}

// pairFeatures sets x's decode features for prefill worker pw paired with dw.
func pairFeatures(x *[nFeatures]float64, pw, dw *worker.Worker) {
	x[featDecodeLoad] = float64(dw.EstimatedEngineLoad())
	x[featDistance] = distanceLevel(worker.DistanceBetween(pw.Place().Topology, dw.Place().Topology))
}

// bestPair is the lowest TTFT prefill worker pw's model predicts (x: its features) over partners, and
// that partner; ok is false when the model is cold or there is no partner.
func (p *PredictedLatency) bestPair(st *predState, x [nFeatures]float64, pw *worker.Worker, partners []*worker.Worker) (y float64, best *worker.Worker, ok bool) {
	y = -1
	for _, dw := range partners {
		pairFeatures(&x, pw, dw)
		v, warm := st.model.Predict(x[:])
		if !warm {
			return 0, nil, false
		}
		if best == nil || v < y {
			y, best = v, dw
		}
	}
	return y, best, best != nil
}

// choosePartner is a decode selection's pick by the pair's predicted TTFT (req.Prefill set, the
// prefill worker's pick recorded by a predicted_latency policy, its model warm): the candidate of
// lowest prediction among those within the ITL SLO by this policy's own models, else among all.
// paired is false when the pair cannot be scored; the pick is then choose's.
func (p *PredictedLatency) choosePartner(cands []*worker.Worker, req *Request) (best int, y float64, paired bool) {
	if req.Prefill == nil {
		return 0, 0, false
	}
	rec, ok := req.Picks.prefillPick(req.Prefill.URL(), p)
	if !ok {
		return 0, 0, false
	}
	all, within := bestPick{i: -1}, bestPick{i: -1}
	for i, dw := range cands {
		x := rec.x
		pairFeatures(&x, req.Prefill, dw)
		v, warm := rec.st.model.Predict(x[:])
		if !warm {
			return 0, 0, false
		}
		load := float64(dw.EstimatedEngineLoad())
		all.offer(i, v, load)
		if p.withinSLO(p.state(dw.Key()), load) {
			within.offer(i, v, load)
		}
	}
	if within.i >= 0 {
		return within.i, within.y, true
	}
	return all.i, all.y, all.i >= 0
}
