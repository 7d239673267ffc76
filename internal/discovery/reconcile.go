package discovery

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/sluicegw/sluice/internal/worker"
)

// reconcile brings the registry in line with one pod. An error re-queues the pod with backoff.
func (d *Discovery) reconcile(ctx context.Context, key string) error {
	v := d.classifier().view(d.podFor(key))
	d.mu.Lock()
	cur := d.served[key]
	d.mu.Unlock()

	if v.refusal != nil {
		d.noteRefusal(key, v.refusal)
	}
	switch v.state {
	case stateGone:
		if v.refusal == nil {
			d.clearRefusal(key)
		}
		if cur != nil {
			d.retire(ctx, key, cur, v.why)
		}
		return nil
	case stateUnready:
		if cur == nil {
			return nil
		}
		if cur.view.uid != v.uid {
			// A new pod under the old name (StatefulSet): the old one's worker is gone for good.
			d.retire(ctx, key, cur, "pod replaced by a new one")
			return nil
		}
		d.markUnready(key, cur, v.why)
		return nil
	}

	if cur == nil {
		return d.register(ctx, key, v)
	}
	old := cur.view
	switch {
	case cur.unready, old.uid != v.uid, old.url != v.url, old.role != v.role, old.model != v.model,
		old.dpSize != v.dpSize, old.kvConnector != v.kvConnector, old.kvEvents != v.kvEvents:
		return d.replace(ctx, key, cur, v)
	case !maps.Equal(old.place, v.place):
		err := d.d.Registry.Update(cur.id, func(s *worker.Spec) { s.Labels = withPlace(s.Labels, old.place, v.place) })
		if err != nil {
			return err
		}
		d.mu.Lock()
		cur.view.place = v.place
		d.mu.Unlock()
		d.log.Info("topology or revision updated", "pod", key, "id", cur.id, "labels", v.place)
	case old.bootstrapPort != v.bootstrapPort:
		err := d.d.Registry.Update(cur.id, func(s *worker.Spec) { s.BootstrapPort = v.bootstrapPort })
		if err != nil {
			return err
		}
		d.mu.Lock()
		cur.view.bootstrapPort = v.bootstrapPort
		d.mu.Unlock()
		d.log.Info("bootstrap port updated", "pod", key, "id", cur.id, "bootstrap_port", v.bootstrapPort)
	}
	return nil
}

// complete runs detection on the spec discovery wants and checks the model is known. Discovery's own
// facts (address, role, pod, metadata model, annotated bootstrap port) win over the Completer's.
func (d *Discovery) complete(ctx context.Context, v podView) (worker.Spec, error) {
	want := v.spec()
	got, err := d.d.Completer.Complete(ctx, want.Clone())
	if err != nil {
		return worker.Spec{}, fmt.Errorf("%w: %w", ErrRefused, err)
	}
	got.URL, got.Role, got.Source, got.Namespace, got.Pod, got.Labels = want.URL, want.Role, want.Source, want.Namespace, want.Pod, want.Labels
	if want.BootstrapPort != 0 || got.Role != worker.RolePrefill {
		got.BootstrapPort = want.BootstrapPort
	}
	if len(want.Models) > 0 {
		got.Models = want.Models
	}
	if !knownModels(got.Models) {
		return worker.Spec{}, fmt.Errorf("%w: pod has no model in its metadata (--model-id-from) and the engine at %s named none (got %q); not routing to it", ErrUnknownModel, v.url, got.Models)
	}
	return got, nil
}

func (d *Discovery) register(ctx context.Context, key string, v podView) error {
	spec, err := d.complete(ctx, v)
	if err != nil {
		d.noteRefusal(key, err)
		return err
	}
	w, err := d.d.Registry.Add(spec)
	if err != nil {
		if errors.Is(err, worker.ErrAlreadyExists) {
			err = fmt.Errorf("%s is already registered (by a flag, the admin API, or a pod still draining): %w", v.url, err)
		}
		d.noteRefusal(key, err)
		return err
	}
	d.clearRefusal(key)
	d.mu.Lock()
	d.served[key] = &served{view: v, id: w.ID()}
	d.mu.Unlock()
	d.log.Info("pod registered as worker", "pod", key, "id", w.ID(), "url", w.URL(), "role", w.Role(), "models", w.Models())
	d.checkNow(ctx, w.ID())
	return nil
}

// replace re-detects a served pod whose address, role or model changed, or that became ready again,
// and swaps its worker under the same id.
func (d *Discovery) replace(ctx context.Context, key string, cur *served, v podView) error {
	spec, err := d.complete(ctx, v)
	if err != nil {
		// The old address is dead or the engine is not answering: keep the worker out of rotation
		// until a retry succeeds.
		d.markUnready(key, cur, err.Error())
		d.noteRefusal(key, err)
		return err
	}
	if prev, ok := d.d.Registry.Get(cur.id); ok {
		ps := prev.Spec()
		// Set through the admin API: keep them, but the pod's topology and revision are the pod's.
		spec.Labels, spec.APIKey = withPlace(ps.Labels, cur.view.place, v.place), ps.APIKey
	}
	w, err := d.d.Registry.Replace(cur.id, spec)
	switch {
	case errors.Is(err, worker.ErrNotFound):
		d.mu.Lock()
		delete(d.served, key)
		delete(d.gated, cur.id)
		d.mu.Unlock()
		return d.register(ctx, key, v)
	case err != nil:
		d.noteRefusal(key, err)
		return err
	}
	d.clearRefusal(key)
	d.mu.Lock()
	cur.view, cur.unready = v, false
	delete(d.gated, cur.id)
	d.mu.Unlock()
	d.log.Info("worker replaced for pod", "pod", key, "id", w.ID(), "url", w.URL(), "role", w.Role(), "models", w.Models())
	d.checkNow(ctx, w.ID())
	return nil
}

func (d *Discovery) checkNow(ctx context.Context, id string) {
	if d.d.Checker == nil {
		return
	}
	if h, err := d.d.Checker.CheckNow(ctx, id); err != nil {
		d.log.Info("new worker not healthy yet; health checks continue", "id", id, "health", h, "err", err)
	}
}

// markUnready closes the prober gate and marks the worker NotReady.
func (d *Discovery) markUnready(key string, cur *served, why string) {
	d.mu.Lock()
	was := cur.unready
	cur.unready = true
	d.gated[cur.id] = true
	d.mu.Unlock()
	err := d.d.Registry.SetHealth(cur.id, worker.HealthNotReady)
	if err != nil && !errors.Is(err, worker.ErrNotFound) && !errors.Is(err, worker.ErrDraining) {
		d.log.Warn("mark worker not ready", "id", cur.id, "err", err)
	}
	if !was {
		d.log.Info("pod not ready; worker marked not_ready", "pod", key, "id", cur.id, "why", why)
	}
}

// retire stops serving a pod: its worker is drained at once and removed when idle or when the pod's
// grace period has passed, on a goroutine Run waits for.
func (d *Discovery) retire(ctx context.Context, key string, cur *served, why string) {
	d.mu.Lock()
	if d.served[key] != cur {
		d.mu.Unlock()
		return
	}
	delete(d.served, key)
	d.gated[cur.id] = true // never probed back to Ready while it drains
	d.mu.Unlock()

	id, grace := cur.id, cur.view.grace
	d.log.Info("pod gone; draining worker", "pod", key, "id", id, "why", why, "grace", grace)
	if err := d.d.Registry.Drain(id); err != nil && !errors.Is(err, worker.ErrDraining) {
		d.forgetGate(id)
		if !errors.Is(err, worker.ErrNotFound) {
			d.log.Warn("drain worker", "id", id, "err", err)
		}
		return
	}
	d.drains.Go(func() {
		defer d.forgetGate(id)
		wctx, cancel := context.WithTimeout(ctx, grace)
		err := d.d.Registry.WaitIdle(wctx, id)
		cancel()
		if w, ok := d.d.Registry.Get(id); ok && err != nil && ctx.Err() == nil {
			d.log.Warn("drain timed out; removing worker with requests in flight", "id", id, "in_flight", w.Load())
		}
		if err := d.d.Registry.Remove(id); err != nil && !errors.Is(err, worker.ErrNotFound) {
			d.log.Warn("remove worker", "id", id, "err", err)
			return
		}
		d.log.Info("worker removed", "pod", key, "id", id)
	})
}

func (d *Discovery) forgetGate(id string) {
	d.mu.Lock()
	delete(d.gated, id)
	d.mu.Unlock()
}

// Served lists the worker ids discovery currently serves, sorted (for tests and diagnostics).
func (d *Discovery) Served() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]string, 0, len(d.served))
	for _, s := range d.served {
		out = append(out, s.id)
	}
	slices.Sort(out)
	return out
}

// Refused counts the pods that match a selector but are not served, for a reason logged as a warning
// (unknown model, refused by detection, ambiguous role, bad annotation, address taken).
func (d *Discovery) Refused() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.refusals)
}

// withPlace returns labels with the placement labels of the pod's old view replaced by its new ones.
func withPlace(labels, old, place map[string]string) map[string]string {
	out := maps.Clone(labels)
	for k := range old {
		delete(out, k)
	}
	if len(place) > 0 && out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, place)
	return out
}
