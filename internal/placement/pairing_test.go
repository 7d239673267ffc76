package placement

import (
	"testing"

	"github.com/sluicegw/sluice/internal/worker"
)

func TestPairingFlags(t *testing.T) {
	t.Parallel()
	p := DefaultPairing()
	if err := p.SetPenalties("zone=100, unknown=3"); err != nil {
		t.Fatal(err)
	}
	want := [worker.NumDistances]int64{0, 2, 100, 32, 3}
	if p.Penalty != want {
		t.Fatalf("penalties %v, want %v", p.Penalty, want)
	}
	for _, bad := range []string{"node=1", "zone", "zone=-1", "zone=x", "planet=1", "zone=2000000"} {
		q := DefaultPairing()
		if err := q.SetPenalties(bad); err == nil {
			t.Errorf("SetPenalties(%q) accepted", bad)
		}
	}
	var f Pairing
	if err := f.SetForbid("rack"); err != nil {
		t.Fatal(err)
	}
	if f.Allowed(worker.DistanceZone) || f.Allowed(worker.DistanceCrossZone) || !f.Allowed(worker.DistanceRack) || !f.Allowed(worker.DistanceUnknown) {
		t.Fatalf("forbid rack: %v", f.Forbidden)
	}
	if err := f.SetForbid("unknown"); err != nil || f.Allowed(worker.DistanceUnknown) {
		t.Fatalf("forbid unknown: %v, %v", err, f.Forbidden)
	}
	if err := f.SetForbid("continent"); err == nil {
		t.Fatal("SetForbid accepted an unknown level")
	}
}

func TestPairingClamped(t *testing.T) {
	t.Parallel()
	var p Pairing
	p.Penalty = [worker.NumDistances]int64{5, -1, MaxPairPenalty + 1, 7, 0}
	got := p.Clamped().Penalty
	want := [worker.NumDistances]int64{0, 0, MaxPairPenalty, 7, 0}
	if got != want {
		t.Fatalf("clamped %v, want %v", got, want)
	}
}

func TestPairingCompatible(t *testing.T) {
	t.Parallel()
	var p Pairing
	if err := p.SetForbid("zone"); err != nil {
		t.Fatal(err)
	}
	a := worker.Place{Topology: worker.Topology{Zone: "a"}, Revision: "v1"}
	for _, tc := range []struct {
		name string
		b    worker.Place
		ok   bool
		d    worker.Distance
	}{
		{"same zone, same revision", worker.Place{Topology: worker.Topology{Zone: "a"}, Revision: "v1"}, true, worker.DistanceZone},
		{"other zone", worker.Place{Topology: worker.Topology{Zone: "b"}, Revision: "v1"}, false, worker.DistanceCrossZone},
		{"other revision", worker.Place{Topology: worker.Topology{Zone: "a"}, Revision: "v2"}, false, worker.DistanceUnknown},
		{"no revision", worker.Place{Topology: worker.Topology{Zone: "a"}}, false, worker.DistanceUnknown},
		{"unknown topology is allowed", worker.Place{Revision: "v1"}, true, worker.DistanceUnknown},
	} {
		d, ok := p.Compatible(a, tc.b)
		if ok != tc.ok || d != tc.d {
			t.Errorf("%s: Compatible = %s, %v; want %s, %v", tc.name, d, ok, tc.d, tc.ok)
		}
	}
}
