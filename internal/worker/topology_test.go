package worker

import "testing"

func TestDistanceBetween(t *testing.T) {
	t.Parallel()
	n1 := Topology{Zone: "a", Rack: "r1", Node: "n1"}
	for _, tc := range []struct {
		name string
		a, b Topology
		want Distance
	}{
		{"same node", n1, n1, DistanceNode},
		{"same rack", n1, Topology{Zone: "a", Rack: "r1", Node: "n2"}, DistanceRack},
		{"same zone", n1, Topology{Zone: "a", Rack: "r2", Node: "n3"}, DistanceZone},
		{"other zone", n1, Topology{Zone: "b", Rack: "r1", Node: "n1"}, DistanceCrossZone},
		{"zone only, equal", Topology{Zone: "a"}, Topology{Zone: "a"}, DistanceZone},
		{"zone only, other", Topology{Zone: "a"}, Topology{Zone: "b"}, DistanceCrossZone},
		{"node only, equal", Topology{Node: "n1"}, Topology{Node: "n1"}, DistanceNode},
		{"node only, other", Topology{Node: "n1"}, Topology{Node: "n2"}, DistanceUnknown},
		{"same zone, racks unknown, other node", Topology{Zone: "a", Node: "n1"}, Topology{Zone: "a", Node: "n2"}, DistanceZone},
		{"same rack, zones unknown, other node", Topology{Rack: "r", Node: "n1"}, Topology{Rack: "r", Node: "n2"}, DistanceRack},
		{"one side unknown", n1, Topology{}, DistanceUnknown},
		{"no common level", Topology{Zone: "a"}, Topology{Node: "n1"}, DistanceUnknown},
		{"zone on one side only, racks differ", Topology{Zone: "a", Rack: "r1"}, Topology{Rack: "r2"}, DistanceZone},
	} {
		if got := DistanceBetween(tc.a, tc.b); got != tc.want {
			t.Errorf("%s: DistanceBetween(%+v, %+v) = %s, want %s", tc.name, tc.a, tc.b, got, tc.want)
		}
		if got := DistanceBetween(tc.b, tc.a); got != tc.want {
			t.Errorf("%s: not symmetric: DistanceBetween(%+v, %+v) = %s, want %s", tc.name, tc.b, tc.a, got, tc.want)
		}
	}
}

// The reserved labels are read once, when the spec is stored, and an update that changes them
// publishes a new snapshot so Placed follows.
func TestPlaceFromLabelsAndUpdate(t *testing.T) {
	t.Parallel()
	r := NewRegistry(RegistryOptions{})
	w, err := r.Add(Spec{URL: "http://p:1", Role: RolePrefill, Labels: map[string]string{"team": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	if w.Place() != (Place{}) || r.Snapshot().Placed() {
		t.Fatalf("unlabelled worker: place %+v, placed %v", w.Place(), r.Snapshot().Placed())
	}
	v := r.Snapshot().Version()
	if err := r.Update(w.ID(), func(s *Spec) {
		s.Labels[LabelZone], s.Labels[LabelNode], s.Labels[LabelRevision] = "a", "n1", "v2"
	}); err != nil {
		t.Fatal(err)
	}
	want := Place{Topology: Topology{Zone: "a", Node: "n1"}, Revision: "v2"}
	if w.Place() != want {
		t.Fatalf("place %+v, want %+v", w.Place(), want)
	}
	if s := r.Snapshot(); !s.Placed() || s.Version() == v {
		t.Fatalf("after update: placed %v, version %d (was %d)", s.Placed(), s.Version(), v)
	}
	v = r.Snapshot().Version()
	if err := r.Update(w.ID(), func(s *Spec) { s.Labels["team"] = "y" }); err != nil {
		t.Fatal(err)
	}
	if r.Snapshot().Version() != v {
		t.Fatal("an update of other labels published a new snapshot")
	}
	w2, err := r.Add(Spec{URL: "http://d:1", Role: RoleDecode, DPSize: 2, Labels: map[string]string{LabelRack: "r1"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := w2.Ranks()[1].Place().Rack; got != "r1" {
		t.Fatalf("rank view's rack %q, want its engine's r1", got)
	}
}
