package dispatch

import (
	"net/http"
	"slices"
	"time"

	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/placement"
	"github.com/sluicegw/sluice/internal/worker"
)

// How a PD pair respects where its workers run and which revision they run (Config.Pairing,
// placement.Pairing): the prefill worker is chosen first (by the prefill policy, among those with a
// compatible decode partner), then its decode partner among the compatible ones — same revision, at a
// distance not forbidden — whose load plus the distance's penalty is the least; the decode policy picks
// among those. With no worker placed (no topology, no revision) and unknown distances allowed, every
// check is skipped: the fleet is paired as before.

// Pairing refusals, each a 503 with its own code: the fleet has workers for the model, but no pair
// of them may be formed, and waiting will not change that (only the fleet changing will).
var (
	errNoSameRevision    = &pairError{placement.ErrNoSameRevisionPair, CodeNoSameRevisionPair}
	errTopologyForbidden = &pairError{placement.ErrTopologyForbidden, CodeTopologyForbidden}
)

// The codes of the pairing refusals.
const (
	CodeNoSameRevisionPair = "pd_no_same_revision_pair"
	CodeTopologyForbidden  = "pd_topology_forbidden"
)

// pairError is a pairing refusal: a placement error of the class ErrUnavailable with its own code.
type pairError struct {
	err  error
	code string
}

func (e *pairError) Error() string { return e.err.Error() }

// Is makes a pairError match its placement error and ErrUnavailable.
func (e *pairError) Is(target error) bool {
	return target == e.err || target == placement.ErrUnavailable
}

// APIError is the refusal's wire form.
func (e *pairError) APIError() *apierror.Error {
	return apierror.New(http.StatusServiceUnavailable, e.code, "no prefill/decode pair of the requested model may be formed: "+e.err.Error(), e)
}

// pairMetrics is implemented by metrics that count the pairs formed (telemetry's).
type pairMetrics interface {
	IncPDPair(distance, revision string)
}

// pairingOn reports whether pairs must be checked in snap.
func (x *Dispatcher) pairingOn(snap *worker.Snapshot) bool {
	return snap.Placed() || x.cfg.Pairing.Forbidden[worker.DistanceUnknown]
}

// decodeCands are the decode candidates placement picks among for preq.
func decodeCands(snap *worker.Snapshot, preq *placement.Request) []*worker.Worker {
	if preq.IgnoreRanks {
		return snap.Candidates(worker.RoleDecode, preq.Model)
	}
	return snap.RankCandidates(worker.RoleDecode, preq.Model)
}

// pairCheck refuses a request none of whose routable prefill and decode workers (capacity and seats
// aside) may form a pair: with no same-revision pair errNoSameRevision, else errTopologyForbidden. It
// returns nil when a pair exists or when a side has no routable worker (selection says why).
func (x *Dispatcher) pairCheck(snap *worker.Snapshot, preq *placement.Request, allowed worker.HandoffSet, now time.Time) error {
	sameRevision, prefills := false, 0
	ps, ds := snap.Candidates(worker.RolePrefill, preq.Model), snap.Candidates(worker.RoleDecode, preq.Model)
	if t := preq.TargetWorker; t >= 0 {
		if t >= len(ps) || t >= len(ds) {
			return nil // selection reports the bad target
		}
		ps, ds = ps[t:t+1], ds[t:t+1]
	}
	for _, pw := range ps {
		if !pw.Routable(now) || !allowed.Has(pw.Handoff()) {
			continue
		}
		prefills++
		pp := pw.Place()
		for _, dw := range ds {
			if !dw.Routable(now) || dw.Handoff() != pw.Handoff() || dw.Place().Revision != pp.Revision {
				continue
			}
			sameRevision = true
			if _, ok := x.cfg.Pairing.Compatible(pp, dw.Place()); ok {
				return nil
			}
		}
	}
	switch {
	case prefills == 0:
		return nil
	case !sameRevision:
		// No routable decode of a prefill's handoff at all is selection's to report, not ours.
		if placement.RoutableHandoffs(snap, worker.RoleDecode, preq.Model, now)&allowed == 0 {
			return nil
		}
		return errNoSameRevision
	}
	return errTopologyForbidden
}

// partners returns the routable decode candidates of preq that ok accepts (nil: all): read once per
// selection, so that checking each prefill candidate's partners costs only the compatibility checks.
func (x *Dispatcher) partners(snap *worker.Snapshot, preq *placement.Request, ok func(*worker.Worker) bool, now time.Time) []*worker.Worker {
	cands := decodeCands(snap, preq)
	out := make([]*worker.Worker, 0, len(cands))
	for _, dw := range cands {
		if dw.Routable(now) && (ok == nil || ok(dw)) {
			out = append(out, dw)
		}
	}
	return out
}

// hasPartner reports whether prefill worker pw may form a pair with one of ds.
func (x *Dispatcher) hasPartner(pw *worker.Worker, ds []*worker.Worker) bool {
	pp := pw.Place()
	for _, dw := range ds {
		if dw.Handoff() != pw.Handoff() {
			continue
		}
		if _, ok := x.cfg.Pairing.Compatible(pp, dw.Place()); ok {
			return true
		}
	}
	return false
}

// partnerFilter returns the decode filter for prefill worker pw among ds (partners' result): the
// compatible ones whose load plus the distance's penalty is the least. The decode policy picks among
// those, so a closer partner is preferred until a farther one is less loaded by more than the penalty
// difference. The set is fixed here, from the loads read once, so loads moving before the policy's
// pick cannot empty it.
func (x *Dispatcher) partnerFilter(preq *placement.Request, pw *worker.Worker, ds []*worker.Worker) func(*worker.Worker) bool {
	pp := pw.Place()
	compatible := func(dw *worker.Worker) (worker.Distance, bool) {
		if dw.Handoff() != pw.Handoff() {
			return 0, false
		}
		return x.cfg.Pairing.Compatible(pp, dw.Place())
	}
	if preq.TargetWorker >= 0 {
		// A strict target names an engine and the policy its rank: only compatibility applies, among
		// the ranks ds holds.
		return func(dw *worker.Worker) bool {
			_, ok := compatible(dw)
			return ok && (slices.Contains(ds, dw) || slices.ContainsFunc(dw.Ranks(), func(r *worker.Worker) bool { return slices.Contains(ds, r) }))
		}
	}
	best := int64(-1)
	keep := ds[:0:0]
	for _, dw := range ds {
		d, ok := compatible(dw)
		if !ok {
			continue
		}
		switch c := dw.Load() + x.cfg.Pairing.Penalty[d]; {
		case best < 0 || c < best:
			best, keep = c, append(keep[:0], dw)
		case c == best:
			keep = append(keep, dw)
		}
	}
	return func(dw *worker.Worker) bool { return slices.Contains(keep, dw) }
}

// notePair counts a pair formed, by distance and revision.
func (x *Dispatcher) notePair(pw, dw *worker.Worker) {
	m, ok := x.d.Metrics.(pairMetrics)
	if !ok {
		return
	}
	pp, dp := pw.Place(), dw.Place()
	m.IncPDPair(worker.DistanceBetween(pp.Topology, dp.Topology).String(), dp.Revision)
}

// pairScoring returns the Partners of a prefill selection when the prefill policy scores PD pairs
// (predicted_latency; nil otherwise): for prefill candidate pw, the decode workers of its handoff among
// ds that pairing lets it pair with (the least loaded plus penalty, as partnerFilter). ds nil: the
// routable decode candidates that ok accepts (nil: all), read here once per selection.
func (x *Dispatcher) pairScoring(snap *worker.Snapshot, preq *placement.Request, ds []*worker.Worker, now time.Time, ok func(*worker.Worker) bool) func(*worker.Worker) []*worker.Worker {
	if _, pl := x.d.Policies.Prefill.(*placement.PredictedLatency); !pl {
		return nil
	}
	if ds == nil {
		ds = x.partners(snap, preq, ok, now)
	}
	paired := x.pairingOn(snap)
	return func(pw *worker.Worker) []*worker.Worker {
		var allow func(*worker.Worker) bool
		if paired {
			allow = x.partnerFilter(preq, pw, ds)
		}
		out := make([]*worker.Worker, 0, len(ds))
		for _, dw := range ds {
			if dw.Handoff() == pw.Handoff() && (allow == nil || allow(dw)) {
				out = append(out, dw)
			}
		}
		return out
	}
}
