package placement

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicegw/sluice/internal/worker"
)

// Pairing is how a PD pair's two workers are matched by where they run (worker.Topology) and which
// engine revision they run (worker.Place.Revision). Revisions always match: a prefill engine of one
// revision never hands KV to a decode engine of another (a worker without a revision pairs only with
// one without). The zero Pairing adds no penalty and forbids no distance.
type Pairing struct {
	// Penalty[d] is the cost of a pair at distance d, in in-flight requests: among the decode workers
	// a prefill worker may pair with, only those with the least load + penalty are offered to the
	// decode policy. A same-node pair costs nothing.
	Penalty [worker.NumDistances]int64
	// Forbidden[d] refuses pairs at distance d: a request with no allowed pair is refused (503).
	Forbidden [worker.NumDistances]bool
}

// MaxPairPenalty bounds a penalty (far above any worker's in-flight requests): Clamped enforces it.
const MaxPairPenalty = 1 << 20

// DefaultPairing is the penalty of each distance when the operator gives none: a pair leaves its
// rack, zone or topology only when the closer partners carry that many more in-flight requests. An
// unknown distance costs nothing, so a fleet without topology is paired as before.
func DefaultPairing() Pairing {
	var p Pairing
	p.Penalty[worker.DistanceRack] = 2
	p.Penalty[worker.DistanceZone] = 8
	p.Penalty[worker.DistanceCrossZone] = 32
	return p
}

// Clamped returns p with every penalty inside 0..MaxPairPenalty: the one place penalties are bounded,
// whatever their source.
func (p Pairing) Clamped() Pairing {
	for d, v := range p.Penalty {
		p.Penalty[d] = min(max(v, 0), MaxPairPenalty)
	}
	p.Penalty[worker.DistanceNode] = 0
	return p
}

// Active reports whether pairing checks anything beyond revisions: a penalty or a forbidden distance.
func (p Pairing) Active() bool { return p != Pairing{} }

// Allowed reports whether a pair at distance d may be formed.
func (p Pairing) Allowed(d worker.Distance) bool { return !p.Forbidden[d] }

// Compatible reports whether prefill place a and decode place b may form a pair, and their distance.
func (p Pairing) Compatible(a, b worker.Place) (worker.Distance, bool) {
	if a.Revision != b.Revision {
		return worker.DistanceUnknown, false
	}
	d := worker.DistanceBetween(a.Topology, b.Topology)
	return d, !p.Forbidden[d]
}

// distanceOf parses a distance name as the flags spell it.
func distanceOf(s string) (worker.Distance, bool) {
	for d := range worker.NumDistances {
		if d.String() == s {
			return d, true
		}
	}
	return 0, false
}

// SetPenalties parses "rack=N,zone=N,cross_zone=N,unknown=N" (any subset; a name not given keeps its
// value) into p. A penalty is a non-negative integer; node is always 0.
func (p *Pairing) SetPenalties(s string) error {
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, val, ok := strings.Cut(item, "=")
		if !ok {
			return fmt.Errorf("topology penalty %q: want LEVEL=N", item)
		}
		d, ok := distanceOf(strings.TrimSpace(name))
		if !ok || d == worker.DistanceNode {
			return fmt.Errorf("topology penalty %q: level must be rack, zone, cross_zone or unknown", item)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(val), 10, 64)
		if err != nil || n < 0 || n > MaxPairPenalty {
			return fmt.Errorf("topology penalty %q: want an integer in 0..%d", item, MaxPairPenalty)
		}
		p.Penalty[d] = n
	}
	return nil
}

// SetForbid parses the levels a pair must not cross, "node", "rack" or "zone" (a pair stays within
// one), plus "unknown" to refuse pairs where either worker has no topology; comma-separated. Crossing
// a level forbids every farther distance too: "rack" refuses zone and cross_zone pairs.
func (p *Pairing) SetForbid(s string) error {
	for item := range strings.SplitSeq(s, ",") {
		switch strings.TrimSpace(item) {
		case "":
		case "node":
			p.Forbidden[worker.DistanceRack] = true
			fallthrough
		case "rack":
			p.Forbidden[worker.DistanceZone] = true
			fallthrough
		case "zone":
			p.Forbidden[worker.DistanceCrossZone] = true
		case "unknown":
			p.Forbidden[worker.DistanceUnknown] = true
		default:
			return fmt.Errorf("topology forbid %q: want node, rack, zone or unknown", strings.TrimSpace(item))
		}
	}
	return nil
}

// Pairing errors: routable prefill and decode workers of the model exist, but no pair of them may be
// formed. Both are of the class ErrUnavailable (503).
var (
	// ErrNoSameRevisionPair: no decode worker runs the revision of any prefill worker.
	ErrNoSameRevisionPair = errors.New("no prefill and decode workers of the same revision")
	// ErrTopologyForbidden: same-revision pairs exist, but every one crosses a forbidden level.
	ErrTopologyForbidden = errors.New("every prefill/decode pair crosses a level the topology rules forbid")
)
