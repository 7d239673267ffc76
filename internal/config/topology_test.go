package config

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/worker"
)

func TestParsePairing(t *testing.T) {
	pd := []string{"--pd-disaggregation", "--prefill", "http://p:1", "--decode", "http://d:1"}
	c, err := parseNoEnv(append(pd, "--worker-topology", "http://p:1=zone=a,node=n1,revision=v2",
		"--worker-topology", "http://d:1/=rack=r1", "--pd-topology-penalty", "zone=3,unknown=1",
		"--pd-topology-forbid", "zone", "--worker-revision-label", "example.com/rev")...)
	if err != nil {
		t.Fatal(err)
	}
	wantWorkers := map[string]map[string]string{
		"http://p:1": {worker.LabelZone: "a", worker.LabelNode: "n1", worker.LabelRevision: "v2"},
		"http://d:1": {worker.LabelRack: "r1"},
	}
	if diff := cmp.Diff(wantWorkers, c.Pairing.Workers); diff != "" {
		t.Errorf("workers (-want +got):\n%s", diff)
	}
	if got := c.Pairing.Rules.Penalty; got != [worker.NumDistances]int64{0, 2, 3, 32, 1} {
		t.Errorf("penalties %v: given levels set, others kept at their default", got)
	}
	if c.Pairing.Rules.Allowed(worker.DistanceCrossZone) || !c.Pairing.Rules.Allowed(worker.DistanceZone) {
		t.Errorf("forbid zone: %v", c.Pairing.Rules.Forbidden)
	}
	if c.Pairing.RevisionLabel != "example.com/rev" || c.Pairing.ZoneLabel != "topology.kubernetes.io/zone" {
		t.Errorf("labels: revision %q, zone %q", c.Pairing.RevisionLabel, c.Pairing.ZoneLabel)
	}
	for _, tt := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--worker-topology", "http://p:1"}, "want URL=zone"},
		{[]string{"--worker-topology", "http://p:1=planet=x"}, "want zone, rack, node or revision"},
		{[]string{"--worker-topology", "http://p:9=zone=a"}, "no --prefill, --decode or --worker-urls worker has this URL"},
		{[]string{"--pd-topology-penalty", "zone=-2"}, "want an integer"},
		{[]string{"--pd-topology-penalty", "node=1"}, "level must be"},
		{[]string{"--pd-topology-forbid", "region"}, "want node, rack, zone or unknown"},
	} {
		_, err := parseNoEnv(append(pd, tt.args...)...)
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%v: err = %v, want %q", tt.args, err, tt.wantErr)
		}
	}
}

// The file form takes the same values (the chart writes one).
func TestFilePairing(t *testing.T) {
	path := writeFile(t, `pd-disaggregation: true
prefill: ["http://p:1"]
decode: ["http://d:1"]
pd-topology-penalty: rack=5
pd-topology-forbid: rack,unknown
worker-topology: ["http://p:1=zone=a"]
`)
	c, err := parseNoEnv("--config", path)
	if err != nil {
		t.Fatal(err)
	}
	r := c.Pairing.Rules
	if r.Penalty[worker.DistanceRack] != 5 || r.Allowed(worker.DistanceZone) || r.Allowed(worker.DistanceUnknown) || !r.Allowed(worker.DistanceRack) {
		t.Fatalf("rules from the file: %+v", r)
	}
	if c.Pairing.Workers["http://p:1"][worker.LabelZone] != "a" {
		t.Fatalf("workers from the file: %v", c.Pairing.Workers)
	}
}
