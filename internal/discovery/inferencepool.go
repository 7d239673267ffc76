package discovery

import (
	"context"
	"errors"
	"fmt"
	"maps"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// The InferencePool API (inference.networking.k8s.io/v1) as discovery reads it: our own types, written
// from the field names and rules of kubernetes-sigs/gateway-api-inference-extension's api/v1
// (inferencepool_types.go). deploy/crds/inferencepool.yaml is the CRD of these types; a test holds the
// two together. Only spec is read; status belongs to the pool's Gateway controller.
const (
	PoolGroup    = "inference.networking.k8s.io"
	PoolVersion  = "v1"
	PoolResource = "inferencepools"
	PoolKind     = "InferencePool"
)

// PoolGVR is the resource discovery lists and watches.
var PoolGVR = schema.GroupVersionResource{Group: PoolGroup, Version: PoolVersion, Resource: PoolResource}

// InferencePool is a group of model server pods: those its selector matches in its namespace, served
// on its target port.
type InferencePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              InferencePoolSpec `json:"spec"`
}

// InferencePoolSpec is what the pool selects. Upstream requires every field; the CRD says so.
type InferencePoolSpec struct {
	// Selector matches pods by labels in the pool's namespace only.
	Selector LabelSelector `json:"selector"`
	// TargetPorts is the model servers' port; v1 allows exactly one.
	TargetPorts []Port `json:"targetPorts"`
	// EndpointPickerRef names the pool's endpoint picker. The gateway picks endpoints itself, so it
	// is accepted and not used.
	EndpointPickerRef EndpointPickerRef `json:"endpointPickerRef"`
}

// LabelSelector is the v1 pool selector: label equality only, like a Service's.
type LabelSelector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

// Port is one target port.
type Port struct {
	Number int32 `json:"number"`
}

// EndpointPickerRef references the endpoint picker extension (unused by the gateway).
type EndpointPickerRef struct {
	Group       *string `json:"group,omitempty"`
	Kind        string  `json:"kind,omitempty"`
	Name        string  `json:"name"`
	PortNumber  *int32  `json:"portNumber,omitempty"`
	FailureMode string  `json:"failureMode,omitempty"`
}

// errBadPool: a pool whose spec selects nothing usable (the CRD's validation should have refused it).
var errBadPool = errors.New("unusable InferencePool")

// poolTarget is what a pool means for discovery: which pods, on which port.
type poolTarget struct {
	selector map[string]string
	port     int
}

func (t *poolTarget) equal(o *poolTarget) bool {
	if t == nil || o == nil {
		return t == o
	}
	return t.port == o.port && maps.Equal(t.selector, o.selector)
}

// targetOf reads a pool object (as the dynamic client returns it).
func targetOf(obj *unstructured.Unstructured) (*poolTarget, error) {
	var p InferencePool
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &p); err != nil {
		return nil, fmt.Errorf("%w: %w", errBadPool, err)
	}
	if len(p.Spec.Selector.MatchLabels) == 0 {
		return nil, fmt.Errorf("%w: spec.selector.matchLabels is empty", errBadPool)
	}
	if len(p.Spec.TargetPorts) == 0 {
		return nil, fmt.Errorf("%w: spec.targetPorts is empty", errBadPool)
	}
	n := p.Spec.TargetPorts[0].Number
	if n < 1 || n > 65535 {
		return nil, fmt.Errorf("%w: spec.targetPorts[0].number %d out of range", errBadPool, n)
	}
	return &poolTarget{selector: maps.Clone(p.Spec.Selector.MatchLabels), port: int(n)}, nil
}

// runPool watches the one pool named by Config.InferencePool and retargets pod discovery whenever its
// selector or port changes, it appears, or it goes. It returns once synced (or ctx ended); stop ends
// the informer and waits for it.
func (d *Discovery) runPool(ctx context.Context) (stop func(), synced bool) {
	pools := d.d.Dynamic.Resource(PoolGVR).Namespace(d.cfg.Namespace)
	byName := fields.OneTermEqualSelector("metadata.name", d.cfg.InferencePool).String()
	lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = byName
			return pools.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = byName
			return pools.Watch(ctx, o)
		},
	}, d.d.Dynamic) // streaming lists only where the client supports them (a fake does not)
	inf := cache.NewSharedIndexInformerWithOptions(lw, &unstructured.Unstructured{}, cache.SharedIndexInformerOptions{})
	_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		d.watchFails.Add(1)
		d.log.Warn("InferencePool list/watch failed; retrying with backoff, the registry keeps its workers", "err", err)
	})
	// The field selector already asks for the one pool; the name is checked again so that another
	// pool's events can never retarget discovery, whatever the server (or a fake) returns.
	ours := func(obj any) bool {
		key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		return err == nil && key == d.cfg.Namespace+"/"+d.cfg.InferencePool
	}
	_, _ = inf.AddEventHandler(cache.FilteringResourceEventHandler{FilterFunc: ours, Handler: cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { d.setPool(obj) },
		UpdateFunc: func(_, obj any) { d.setPool(obj) },
		DeleteFunc: func(any) { d.setPool(nil) },
	}})
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		inf.RunWithContext(pctx)
	}()
	synced = cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
	return func() { cancel(); <-done }, synced
}

// setPool installs the classifier for the pool's current spec (obj nil: the pool is gone) and wakes the
// watch loop, which re-lists pods under it. An unchanged target changes nothing.
func (d *Discovery) setPool(obj any) {
	var target *poolTarget
	if u, ok := obj.(*unstructured.Unstructured); ok {
		t, err := targetOf(u)
		if err != nil {
			d.log.Warn("InferencePool not usable; serving none of its pods until it is fixed", "pool", d.cfg.InferencePool, "err", err)
		}
		target = t
	}
	cur := d.classifier()
	if cur.pool.equal(target) {
		return
	}
	next := *cur
	next.pool = target
	d.classify.Store(&next)
	if target == nil {
		d.log.Info("InferencePool absent; its workers are drained", "pool", d.cfg.InferencePool, "namespace", d.cfg.Namespace)
	} else {
		d.log.Info("InferencePool selects pods", "pool", d.cfg.InferencePool, "namespace", d.cfg.Namespace,
			"selector", metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: target.selector}), "port", target.port)
	}
	select {
	case d.retarget <- struct{}{}:
	default: // a wake-up is already pending; the loop reads the latest classifier
	}
}
