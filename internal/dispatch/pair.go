package dispatch

import (
	"errors"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/placement"
	"github.com/sluicegw/sluice/internal/worker"
)

// How a PD pair is chosen when the gate also holds decode seats (DESIGN.md §3b), in admission's one
// selection under its lock: first the decode side — which handoffs have a routable decode worker with
// a free seat that its engine's load does not veto — so that the prefill policy (stateful with
// cache_aware) only ever records a worker whose pair will be granted; then the prefill worker among
// those with a slot and such a handoff; then the decode worker, by the decode policy, among the seated
// ones of the prefill's handoff. A seat is per decode worker key: per data-parallel rank where ranks
// are known (placement's rank views), else per engine.

// selectPair picks the pair. It returns admission.ErrNoSeat when routable decode partners exist but
// none has a seat while some prefill worker has a slot, admission.ErrNoCapacity when no prefill
// worker has a slot (whatever the seats), and placement's errors (404, 503) otherwise.
func (x *Dispatcher) selectPair(preq *placement.Request, allowed worker.HandoffSet, hasSlot, hasSeat func(string) bool) (*worker.Worker, *worker.Worker, error) {
	snap := x.d.Registry.Snapshot()
	now := x.now()
	seatOK := func(w *worker.Worker) bool { return hasSeat(w.Key()) && !x.decodeVetoed(w) }
	paired := x.pairingOn(snap)
	if paired {
		if err := x.pairCheck(snap, preq, allowed, now); err != nil {
			return nil, nil, err
		}
	}
	routable, seated := x.decodeHandoffs(snap, preq, seatOK, now)
	routable &= allowed
	seated &= allowed
	if routable == 0 {
		// No decode partner at all: the decode selection says why (404 or 503).
		if _, err := placement.SelectDecode(snap, preq, x.d.Policies.Decode, now); err != nil {
			return nil, nil, err
		}
		return nil, nil, errNoCompatibleDecode
	}
	if seated == 0 {
		return nil, nil, x.noSeat(snap, preq, routable, hasSlot, now)
	}
	p := *preq
	p.Handoffs = seated
	slotOK := func(w *worker.Worker) bool { return hasSlot(w.URL()) && !x.overloaded(w) }
	prefillOK := slotOK
	var partners []*worker.Worker
	if paired {
		partners = x.partners(snap, preq, seatOK, now)
		prefillOK = func(w *worker.Worker) bool { return slotOK(w) && x.hasPartner(w, partners) }
	}
	p.Partners = x.pairScoring(snap, preq, partners, now, seatOK)
	pw, err := placement.SelectPrefill(snap, &p, x.d.Policies.Prefill, prefillOK, now)
	if err != nil {
		if errors.Is(err, placement.ErrAtCapacity) {
			if paired {
				// Prefill workers with a slot but no seated partner wait for a decode seat.
				if _, err := placement.SelectPrefill(snap, &p, firstPolicy{}, slotOK, now); err == nil {
					return nil, nil, admission.ErrNoSeat
				}
			}
			return nil, nil, admission.ErrNoCapacity
		}
		return nil, nil, err
	}
	decodeOK := seatOK
	if paired {
		decodeOK = x.partnerFilter(preq, pw, partners)
	}
	dw, err := x.seatedDecode(snap, preq, pw, decodeOK, seatOK, now)
	if err != nil {
		return nil, nil, err
	}
	return pw, dw, nil
}

// noSeat says why no pair can be granted when routable decode partners exist but none has a seat: a
// placement error (404/503 win over a wait), admission.ErrNoCapacity when prefill is full too, else
// admission.ErrNoSeat.
func (x *Dispatcher) noSeat(snap *worker.Snapshot, preq *placement.Request, routable worker.HandoffSet, hasSlot func(string) bool, now time.Time) error {
	p := *preq
	p.Handoffs = routable
	if _, err := placement.SelectPrefill(snap, &p, firstPolicy{}, nil, now); err != nil {
		return err
	}
	// When prefill is full too, prefill is what holds the head back: its seats are taken by
	// requests still in prefill (a seat is held from the pair's choice), and the decode gets no
	// new work until a slot frees. Naming decode then would tell an operator to add the wrong
	// workers (the scenario's prefill-bound phase answered pd_decode_* before this).
	if _, err := placement.SelectPrefill(snap, &p, firstPolicy{},
		func(w *worker.Worker) bool { return hasSlot(w.URL()) && !x.overloaded(w) }, now); errors.Is(err, placement.ErrAtCapacity) {
		return admission.ErrNoCapacity
	}
	return admission.ErrNoSeat
}

// seatedDecode picks the decode worker of prefill pw's handoff among those decodeOK allows, by the
// decode policy; admission.ErrNoSeat when none has a seat.
func (x *Dispatcher) seatedDecode(snap *worker.Snapshot, preq *placement.Request, pw *worker.Worker, decodeOK, seatOK func(*worker.Worker) bool, now time.Time) (*worker.Worker, error) {
	d := *preq
	d.Handoffs = worker.HandoffSet(0).Add(pw.Handoff())
	d.Prefill = pw
	dw, err := placement.Select(snap, worker.RoleDecode, &d, x.d.Policies.Decode, decodeOK, now)
	if err != nil {
		if errors.Is(err, placement.ErrAtCapacity) {
			return nil, admission.ErrNoSeat
		}
		return nil, err
	}
	if !seatOK(dw) {
		// A strict target names an engine; the policy picked one of its ranks without a seat.
		return nil, admission.ErrNoSeat
	}
	return dw, nil
}

// decodeHandoffs returns the handoffs of the routable decode workers of the request's model, and of
// those among them that have a seat. With ranks placed (the default) a rank view is a candidate of its
// own; a strict target restricts both sets to that engine.
func (x *Dispatcher) decodeHandoffs(snap *worker.Snapshot, preq *placement.Request, seatOK func(*worker.Worker) bool, now time.Time) (routable, seated worker.HandoffSet) {
	cands := snap.Candidates(worker.RoleDecode, preq.Model)
	if preq.TargetWorker >= 0 {
		if preq.TargetWorker >= len(cands) {
			return 0, 0 // SelectDecode reports the bad target
		}
		cands = cands[preq.TargetWorker : preq.TargetWorker+1]
	}
	for _, e := range cands {
		if !e.Routable(now) {
			continue
		}
		routable = routable.Add(e.Handoff())
		views := []*worker.Worker{e}
		if r := e.Ranks(); len(r) > 0 && !preq.IgnoreRanks {
			views = r
		}
		for _, w := range views {
			if seatOK(w) {
				seated = seated.Add(w.Handoff())
				break
			}
		}
	}
	return routable, seated
}

// decodeVetoed reports whether a decode worker's engine reports more load than allowed: more waiting
// requests than --decode-overload-waiting-requests, or a KV cache fuller than --decode-max-kv-usage.
// An engine without a report is not vetoed (health checks judge it).
func (x *Dispatcher) decodeVetoed(w *worker.Worker) bool {
	if !x.cfg.CheckDecodeOverload && x.cfg.DecodeMaxKVUsage <= 0 {
		return false
	}
	l, ok := w.EngineLoad()
	if !ok {
		return false
	}
	return (x.cfg.CheckDecodeOverload && l.Waiting > x.cfg.DecodeOverloadWaitingRequests) ||
		(x.cfg.DecodeMaxKVUsage > 0 && l.KVUsage > x.cfg.DecodeMaxKVUsage)
}

// firstPolicy picks the first candidate and keeps no state: selectPair uses it to learn only whether
// a prefill worker could serve, without driving the real (possibly stateful) policy.
type firstPolicy struct{}

func (firstPolicy) Name() string                                  { return "probe" }
func (firstPolicy) Pick([]*worker.Worker, *placement.Request) int { return 0 }
