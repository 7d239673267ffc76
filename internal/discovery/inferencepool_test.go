package discovery

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sluicegw/sluice/internal/testkit/poll"
	"github.com/sluicegw/sluice/internal/worker"
)

func poolObject(t *testing.T, name string, selector map[string]string, port int32) *unstructured.Unstructured {
	t.Helper()
	p := &InferencePool{
		TypeMeta:   metav1.TypeMeta{APIVersion: PoolGroup + "/" + PoolVersion, Kind: PoolKind},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: InferencePoolSpec{
			Selector:          LabelSelector{MatchLabels: selector},
			TargetPorts:       []Port{{Number: port}},
			EndpointPickerRef: EndpointPickerRef{Name: "epp"},
		},
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

func (h *harness) putPool(u *unstructured.Unstructured) {
	h.t.Helper()
	pools := h.dyn.Resource(PoolGVR).Namespace(ns)
	_, err := pools.Update(context.Background(), u, metav1.UpdateOptions{})
	if err != nil {
		_, err = pools.Create(context.Background(), u, metav1.CreateOptions{})
	}
	if err != nil {
		h.t.Fatal(err)
	}
}

// TestInferencePoolRetargets drives the pool and its pods: nothing is served while the pool is absent,
// its selector and port pick the workers, editing either moves them, another pool is ignored, and
// deleting the pool drains every worker it gave.
func TestInferencePoolRetargets(t *testing.T) {
	t.Parallel()
	cfg := Config{
		InferencePool: "llama", Namespace: ns,
		ModelIDFrom: pdConfig().ModelIDFrom, Workers: 1, RetryBase: pdConfig().RetryBase, RetryMax: pdConfig().RetryMax,
	}
	a := map[string]string{"pool": "a", "model": "m1"}
	b := map[string]string{"pool": "b", "model": "m1"}
	h := start(t, cfg, nil, mkPod("a-0", a, "10.0.0.1", true), mkPod("b-0", b, "10.0.0.2", true))
	poll.Until(t, "first list", 10*time.Second, h.disc.Synced)
	if n := h.reg.Snapshot().Len(); n != 0 {
		t.Fatalf("%d workers before the pool exists", n)
	}

	h.putPool(poolObject(t, "other", a, 7000)) // not ours: ignored
	h.putPool(poolObject(t, "llama", map[string]string{"pool": "a"}, 8000))
	added := h.next("pool a's pod added", kind(worker.EventAdded, "http://10.0.0.1:8000")).Worker
	if s := added.Spec(); s.Role != worker.RoleRegular || s.Pod != "a-0" {
		t.Fatalf("added spec = %+v", s)
	}
	// A marker pod in the pool, created now, is reconciled after every pod the new list queued.
	h.create(mkPod("a-1", a, "10.0.0.3", true))
	h.next("marker added", kind(worker.EventAdded, "http://10.0.0.3:8000"))
	if _, ok := h.byURL("http://10.0.0.2:8000"); ok || h.reg.Snapshot().Len() != 2 {
		t.Fatalf("pool a serves %d workers, want a-0 and a-1 only", h.reg.Snapshot().Len())
	}

	h.putPool(poolObject(t, "llama", map[string]string{"pool": "a"}, 9000))
	ev := h.next("port change replaces the worker", kind(worker.EventReplaced, "http://10.0.0.1:9000"))
	if ev.Worker.ID() != added.ID() {
		t.Fatalf("replaced under id %s, want %s", ev.Worker.ID(), added.ID())
	}
	// Each pod is replaced on its own reconcile: wait for the marker too, or the selector change
	// below may find it still at the old port.
	h.next("port change replaces the marker", kind(worker.EventReplaced, "http://10.0.0.3:9000"))

	h.putPool(poolObject(t, "llama", map[string]string{"pool": "b"}, 9000))
	h.nextAll("pool b's pod added, pool a's removed", kind(worker.EventAdded, "http://10.0.0.2:9000"),
		kind(worker.EventRemoved, "http://10.0.0.1:9000"), kind(worker.EventRemoved, "http://10.0.0.3:9000"))
	h.delete("b-0")
	h.next("a deleted pod is removed", kind(worker.EventRemoved, "http://10.0.0.2:9000"))
	h.create(mkPod("b-1", b, "10.0.0.4", true))
	h.next("a new pod of the pool is added", kind(worker.EventAdded, "http://10.0.0.4:9000"))

	if err := h.dyn.Resource(PoolGVR).Namespace(ns).Delete(context.Background(), "llama", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.next("the pool's last worker leaves with it", kind(worker.EventRemoved, "http://10.0.0.4:9000"))
	poll.Until(t, "no workers once the pool is deleted", 10*time.Second, func() bool { return h.reg.Snapshot().Len() == 0 })
}

func TestTargetOfRefusesUnusablePools(t *testing.T) {
	t.Parallel()
	for name, u := range map[string]*unstructured.Unstructured{
		"no labels": poolObject(t, "p", nil, 8000),
		"port 0":    poolObject(t, "p", map[string]string{"a": "b"}, 0),
	} {
		if _, err := targetOf(u); !errors.Is(err, errBadPool) {
			t.Errorf("%s: err = %v, want errBadPool", name, err)
		}
	}
	u := poolObject(t, "p", map[string]string{"a": "b"}, 8000)
	if err := unstructured.SetNestedSlice(u.Object, []any{}, "spec", "targetPorts"); err != nil {
		t.Fatal(err)
	}
	if _, err := targetOf(u); !errors.Is(err, errBadPool) {
		t.Errorf("no ports: err = %v, want errBadPool", err)
	}
	got, err := targetOf(poolObject(t, "p", map[string]string{"a": "b"}, 8000))
	if err != nil || got.port != 8000 || got.selector["a"] != "b" {
		t.Fatalf("targetOf = %+v, %v", got, err)
	}
}

// nextAll waits until each of want has matched an event, in any order.
func (h *harness) nextAll(what string, want ...func(worker.Event) bool) {
	h.t.Helper()
	left := slices.Clone(want)
	for len(left) > 0 {
		h.next(what, func(ev worker.Event) bool {
			for i, w := range left {
				if w(ev) {
					left = slices.Delete(left, i, i+1)
					return true
				}
			}
			return false
		})
	}
}
