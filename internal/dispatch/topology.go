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
	for _, pw := range snap.Candidates(worker.RolePrefill, preq.Model) {
		if !pw.Routable(now) || !allowed.Has(pw.Handoff()) {
			continue
		}
		prefills++
		pp := pw.Place()
		for _, dw := range snap.Candidates(worker.RoleDecode, preq.Model) {
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

// hasPartner reports whether prefill worker pw has a routable decode partner with which it may form a
// pair, among those decodeOK accepts (nil: all).
func (x *Dispatcher) hasPartner(snap *worker.Snapshot, preq *placement.Request, pw *worker.Worker, decodeOK func(*worker.Worker) bool, now time.Time) bool {
	pp := pw.Place()
	for _, dw := range decodeCands(snap, preq) {
		if dw.Handoff() != pw.Handoff() || !dw.Routable(now) {
			continue
		}
		if _, ok := x.cfg.Pairing.Compatible(pp, dw.Place()); ok && (decodeOK == nil || decodeOK(dw)) {
			return true
		}
	}
	return false
}

// partnerFilter returns the decode filter for prefill worker pw: the routable compatible partners
// base accepts (base nil: all) whose load plus the distance's penalty is the least. The decode policy
// picks among those, so a closer partner is preferred until a farther one is less loaded by more than
// the penalty difference. The set is fixed here, from the loads read once, so loads moving before
// the policy's pick cannot empty it.
func (x *Dispatcher) partnerFilter(snap *worker.Snapshot, preq *placement.Request, pw *worker.Worker, base func(*worker.Worker) bool, now time.Time) func(*worker.Worker) bool {
	pp := pw.Place()
	if preq.TargetWorker >= 0 {
		// A strict target names an engine and the policy its rank: only compatibility applies.
		return func(dw *worker.Worker) bool {
			_, ok := x.cfg.Pairing.Compatible(pp, dw.Place())
			return ok && (base == nil || base(dw))
		}
	}
	best := int64(-1)
	var keep []*worker.Worker
	for _, dw := range decodeCands(snap, preq) {
		if dw.Handoff() != pw.Handoff() || !dw.Routable(now) || (base != nil && !base(dw)) {
			continue
		}
		d, ok := x.cfg.Pairing.Compatible(pp, dw.Place())
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
