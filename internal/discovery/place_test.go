package discovery

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/worker"
)

// A pod's zone, rack, node and revision labels become the worker's reserved labels; unconfigured
// keys are not read.
func TestClassifyPlacement(t *testing.T) {
	t.Parallel()
	c := classifier{
		pd:             true,
		decodeSelector: map[string]string{"app": "sglang", "role": "decode"},
		port:           30000,
		zoneLabel:      "topology.kubernetes.io/zone", rackLabel: "example.com/rack", nodeLabel: "kubernetes.io/hostname",
		revisionLabel: "app.kubernetes.io/version",
	}
	labels := decodeLabels("")
	labels["topology.kubernetes.io/zone"] = "eu-1a"
	labels["example.com/rack"] = "r7"
	labels["app.kubernetes.io/version"] = "0.5.1"
	labels["kubernetes.io/hostname"] = "gpu-node-3"
	pod := mkPod("d", labels, "10.0.0.2", true)
	want := map[string]string{
		worker.LabelZone: "eu-1a", worker.LabelRack: "r7", worker.LabelNode: "gpu-node-3", worker.LabelRevision: "0.5.1",
	}
	v := c.view(pod)
	if diff := cmp.Diff(want, v.spec().Labels); diff != "" {
		t.Fatalf("worker labels (-want +got):\n%s", diff)
	}
	if got := placeOfSpec(v.spec()); got.Zone != "eu-1a" || got.Revision != "0.5.1" {
		t.Fatalf("place %+v", got)
	}

	c.nodeLabel, c.rackLabel, c.revisionLabel = "example.com/host", "", ""
	labels["example.com/host"] = "h1"
	v = c.view(mkPod("d", labels, "10.0.0.2", true))
	want = map[string]string{worker.LabelZone: "eu-1a", worker.LabelNode: "h1"}
	if diff := cmp.Diff(want, v.spec().Labels); diff != "" {
		t.Fatalf("with a node label and no rack or revision keys (-want +got):\n%s", diff)
	}

	none := classifier{pd: true, decodeSelector: c.decodeSelector, port: 30000}
	if got := none.view(mkPod("d", decodeLabels(""), "10.0.0.2", true)).spec().Labels; got != nil {
		t.Fatalf("a pod without placement got labels %v", got)
	}
}

// placeOfSpec is the placement a registry reads from a spec.
func placeOfSpec(s worker.Spec) worker.Place {
	r := worker.NewRegistry(worker.RegistryOptions{})
	w, err := r.Add(s)
	if err != nil {
		panic(err)
	}
	return w.Place()
}

func TestWithPlace(t *testing.T) {
	t.Parallel()
	got := withPlace(map[string]string{"team": "x", worker.LabelZone: "a"}, map[string]string{worker.LabelZone: "a"},
		map[string]string{worker.LabelRevision: "v2"})
	want := map[string]string{"team": "x", worker.LabelRevision: "v2"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("labels (-want +got):\n%s", diff)
	}
}
