package config

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicegw/sluice/internal/placement"
	"github.com/sluicegw/sluice/internal/worker"
)

// PairingConfig matches a PD pair's prefill and decode workers by where they run and which engine
// revision they run (placement.Pairing; docs/routing.md).
type PairingConfig struct {
	// Rules are the penalty per distance (--pd-topology-penalty, default rack=2,zone=8,cross_zone=32)
	// and the forbidden distances (--pd-topology-forbid, default none).
	Rules placement.Pairing
	// Workers gives flag workers their topology and revision as worker labels (--worker-topology
	// URL=zone=Z,rack=R,node=N,revision=V), keyed by normalised URL.
	Workers map[string]map[string]string
	// ZoneLabel, RackLabel and NodeLabel are the pod labels of a discovered worker's topology
	// (--topology-zone-label, default topology.kubernetes.io/zone; --topology-rack-label and
	// --topology-node-label, default none), and
	// RevisionLabel the pod label of its engine revision (--worker-revision-label, default none: opt-in,
	// since a common label such as app.kubernetes.io/version may differ between prefill and decode
	// pods that have always paired); empty = not read.
	ZoneLabel, RackLabel, NodeLabel, RevisionLabel string
}

func (s *flagSet) registerPairing() {
	c := &s.cfg.Pairing
	c.Rules = placement.DefaultPairing()
	s.section("PD pairing by topology and revision")
	s.add(penaltyValue{&c.Rules}, "pd-topology-penalty", "LEVEL=N,...",
		"Cost of a PD pair by the distance between its workers, in in-flight requests: rack (same rack, another node), zone (same zone, another rack), cross_zone and unknown (either worker has no topology); a decode partner farther away is chosen only when the closer ones carry more in-flight requests than the difference. Levels not given keep their default; each is an integer in 0.."+strconv.Itoa(placement.MaxPairPenalty)+".")
	s.add(forbidValue{&c.Rules}, "pd-topology-forbid", "LEVEL,...",
		"Levels a PD pair must not cross: node, rack or zone (e.g. zone: a request with no same-zone pair is refused 503 pd_topology_forbidden, never paired across zones); add unknown to also refuse pairs where either worker has no topology (allowed by default).")
	s.add(workerTopologyValue{&c.Workers}, "worker-topology", "URL=zone=Z,rack=R,node=N,revision=V",
		"Topology and engine revision of a worker given by --prefill or --decode (any subset of the keys); repeatable. A PD pair's workers are always of the same revision (503 pd_no_same_revision_pair when none exists).")
	s.str(&c.ZoneLabel, "topology-zone-label", "KEY", "topology.kubernetes.io/zone", "Pod label holding a discovered worker's zone; empty = none.")
	s.str(&c.RackLabel, "topology-rack-label", "KEY", "", "Pod label holding a discovered worker's rack or block; empty = none.")
	s.str(&c.NodeLabel, "topology-node-label", "KEY", "", "Pod label holding a discovered worker's node (e.g. kubernetes.io/hostname, if the pods carry it); empty = none.")
	s.str(&c.RevisionLabel, "worker-revision-label", "KEY", "", "Pod label holding a discovered worker's engine revision (e.g. app.kubernetes.io/version): a PD pair's workers always share it; empty (the default) = none.")
}

// penaltyValue is --pd-topology-penalty.
type penaltyValue struct{ p *placement.Pairing }

func (v penaltyValue) String() string {
	if v.p == nil {
		return ""
	}
	var parts []string
	for d := worker.DistanceRack; d < worker.NumDistances; d++ {
		parts = append(parts, d.String()+"="+strconv.FormatInt(v.p.Penalty[d], 10))
	}
	return strings.Join(parts, ",")
}

func (v penaltyValue) Set(s string) error { return v.p.SetPenalties(s) }

// forbidValue is --pd-topology-forbid.
type forbidValue struct{ p *placement.Pairing }

func (v forbidValue) String() string {
	if v.p == nil {
		return ""
	}
	var parts []string
	for d := range worker.NumDistances {
		if v.p.Forbidden[d] {
			parts = append(parts, d.String())
		}
	}
	return strings.Join(parts, ",")
}

func (v forbidValue) Set(s string) error { return v.p.SetForbid(s) }

// workerTopologyValue is the repeatable --worker-topology.
type workerTopologyValue struct{ p *map[string]map[string]string }

func (v workerTopologyValue) String() string {
	if v.p == nil {
		return ""
	}
	var parts []string
	for _, url := range slices.Sorted(maps.Keys(*v.p)) {
		parts = append(parts, url+"="+fmt.Sprint((*v.p)[url]))
	}
	return strings.Join(parts, " ")
}

// topologyKeys maps the --worker-topology keys to the reserved worker labels.
var topologyKeys = map[string]string{
	"zone": worker.LabelZone, "rack": worker.LabelRack, "node": worker.LabelNode, "revision": worker.LabelRevision,
}

// Set parses URL=key=value,...: the URL ends at the first "=" (a worker URL has no query).
func (v workerTopologyValue) Set(s string) error {
	url, rest, ok := strings.Cut(strings.TrimSpace(s), "=")
	if !ok || url == "" {
		return fmt.Errorf("worker topology %q: want URL=zone=Z,rack=R,node=N,revision=V", s)
	}
	labels := map[string]string{}
	for item := range strings.SplitSeq(rest, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		label, known := topologyKeys[strings.TrimSpace(k)]
		if !ok || !known || strings.TrimSpace(val) == "" {
			return fmt.Errorf("worker topology %q: %q: want zone, rack, node or revision =VALUE", s, item)
		}
		labels[label] = strings.TrimSpace(val)
	}
	if *v.p == nil {
		*v.p = map[string]map[string]string{}
	}
	(*v.p)[strings.TrimRight(url, "/")] = labels
	return nil
}

// validatePairing refuses a --worker-topology naming no flag worker (a typo would silently leave the
// worker without topology).
func (c *Config) validatePairing(p *problems) {
	for url := range c.Pairing.Workers {
		if !slices.ContainsFunc(c.Workers.Initial, func(w WorkerFlag) bool { return w.URL == url }) {
			p.add("--worker-topology %s: no --prefill, --decode or --worker-urls worker has this URL", url)
		}
	}
}
