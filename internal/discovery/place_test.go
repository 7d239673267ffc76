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

// TestPodPlacementFollowsLabels: a discovered worker gets its zone and revision from its pod's
// labels; a change of them updates the worker in place (same worker, no re-detection), keeping the
// labels an operator set through the admin API.
func TestPodPlacementFollowsLabels(t *testing.T) {
	t.Parallel()
	cfg := pdConfig()
	cfg.ZoneLabel, cfg.RevisionLabel = "topology.kubernetes.io/zone", "app.kubernetes.io/version"
	h := start(t, cfg, nil)
	const url = "http://10.0.1.1:30000"
	labels := decodeLabels("m1")
	labels["topology.kubernetes.io/zone"], labels["app.kubernetes.io/version"] = "a", "1.0"
	pod := mkPod("decode-0", labels, "10.0.1.1", true)
	h.create(pod)
	w := h.next("decode added", kind(worker.EventAdded, url)).Worker
	if got := w.Place(); got.Zone != "a" || got.Revision != "1.0" {
		t.Fatalf("added place %+v", got)
	}
	h.next("decode ready", health(worker.HealthReady, url))
	if err := h.reg.Update(w.ID(), func(s *worker.Spec) { s.Labels["team"] = "infra" }); err != nil {
		t.Fatal(err)
	}
	h.next("admin label", kind(worker.EventUpdated, url))

	pod.Labels["topology.kubernetes.io/zone"] = "b"
	delete(pod.Labels, "app.kubernetes.io/version")
	h.update(pod)
	ev := h.next("placement updated", kind(worker.EventUpdated, url))
	if ev.Worker != w {
		t.Fatal("the worker was replaced; a label change should update it in place")
	}
	want := map[string]string{"team": "infra", worker.LabelZone: "b"}
	if diff := cmp.Diff(want, w.Spec().Labels); diff != "" {
		t.Fatalf("labels after the pod's change (-want +got):\n%s", diff)
	}
	if got := w.Place(); got.Zone != "b" || got.Revision != "" {
		t.Fatalf("place %+v, want zone b and no revision", got)
	}
}
