package worker

// Where a worker runs and which engine revision it runs, for PD pairing (DESIGN.md §3b): a KV cache
// moved across racks or zones costs far more than within a node, and a prefill engine of one version
// must never hand its KV to a decode engine of another. Both are carried as reserved labels of the
// spec, so every source sets them the same way: Kubernetes discovery copies them from pod labels, the
// admin API takes them in a worker's labels, and static flags from --worker-topology.

// The reserved labels a worker's placement is read from. Empty or absent means unknown.
const (
	LabelZone     = "sluice.dev/zone"
	LabelRack     = "sluice.dev/rack"
	LabelNode     = "sluice.dev/node"
	LabelRevision = "sluice.dev/revision"
)

// Topology is where a worker runs, from the coarsest level to the finest.
type Topology struct {
	Zone, Rack, Node string
}

// Known reports whether any level is known.
func (t Topology) Known() bool { return t.Zone != "" || t.Rack != "" || t.Node != "" }

// Place is what pairing reads of a worker: its topology and its revision.
type Place struct {
	Topology
	Revision string
}

// placeOf reads a spec's reserved labels.
func placeOf(labels map[string]string) Place {
	return Place{
		Topology: Topology{Zone: labels[LabelZone], Rack: labels[LabelRack], Node: labels[LabelNode]},
		Revision: labels[LabelRevision],
	}
}

// Distance is how far apart two workers are: the finest level they share.
type Distance uint8

// The distances, closest first. DistanceUnknown is a pair where either side has no topology.
const (
	DistanceNode      Distance = iota // same node
	DistanceRack                      // same rack, another node
	DistanceZone                      // same zone, another rack
	DistanceCrossZone                 // another zone
	DistanceUnknown
	NumDistances
)

// String returns the metric label of d.
func (d Distance) String() string {
	switch d {
	case DistanceNode:
		return "node"
	case DistanceRack:
		return "rack"
	case DistanceZone:
		return "zone"
	case DistanceCrossZone:
		return "cross_zone"
	}
	return "unknown"
}

// DistanceBetween compares two topologies from the top: a zone or rack known on both sides that
// differs decides (another zone is cross_zone, another rack in the zone is zone); the same node name
// is node; otherwise the finest level known on both sides and equal does (another node in a known
// rack is rack, in a known zone with racks unknown zone), and with none known on both, unknown. A
// node name is taken as unique within the fleet, a rack name within its zone.
func DistanceBetween(a, b Topology) Distance {
	if !a.Known() || !b.Known() {
		return DistanceUnknown
	}
	both := func(x, y string) bool { return x != "" && y != "" }
	shared := DistanceUnknown
	switch {
	case both(a.Zone, b.Zone) && a.Zone != b.Zone:
		return DistanceCrossZone
	case both(a.Zone, b.Zone):
		shared = DistanceZone
	}
	switch {
	case both(a.Rack, b.Rack) && a.Rack != b.Rack:
		return DistanceZone
	case both(a.Rack, b.Rack):
		shared = DistanceRack
	}
	if both(a.Node, b.Node) && a.Node == b.Node {
		return DistanceNode
	}
	return shared
}

// Place returns the worker's topology and revision (a rank view: its engine's). Precomputed when the
// spec is stored: reading it costs one atomic load.
func (w *Worker) Place() Place {
	if p := w.s.place.Load(); p != nil {
		return *p
	}
	return Place{}
}

// Placed reports whether any worker of the snapshot has a topology or a revision: when none has,
// pairing skips its checks altogether.
func (s *Snapshot) Placed() bool { return s.placed }
