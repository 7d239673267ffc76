// Package discovery turns Kubernetes pods into gateway workers: it watches the pods that match the
// configured label selectors with client-go informers and keeps the worker registry in step with them.
//
// # What a pod becomes
//
//   - A pod is served (registered, or kept) only when it is Running, its Ready condition is True, it has
//     an IP and it is not terminating. A new worker goes through the same path as any other: the injected
//     [Completer] detects its protocol and models (and may refuse it), the registry adds it Pending, the
//     health checker probes it at once, and admission is woken by the registry's event.
//   - Its model comes from the pod's metadata when --model-id-from names a source and the pod has it,
//     else from the engine. A pod whose model is still unknown (no metadata, engine silent, or an engine
//     that answers "unknown") is not registered: it is retried with backoff and at every re-list, and
//     never routed to, because a worker without a model would take every model's traffic.
//   - A served pod that turns unready is marked NotReady at once, and a gate on the health prober keeps
//     it NotReady (the probes report "pod not ready") until Kubernetes calls it ready again; it is then
//     detected afresh and replaced under the same worker id, since its container may have restarted.
//   - A pod whose IP, role or model changes is replaced (Registry.Replace keeps the id).
//   - A pod that is deleted, terminating, finished, or no longer matches a selector is drained (no new
//     requests), its in-flight requests are waited for up to its termination grace period, then it is
//     removed.
//   - A pod that matches both the prefill and the decode selector, or carries an invalid
//     sglang.ai/bootstrap-port, sluice.dev/dp-size, sluice.dev/kv-connector, sluice.dev/decode-window or
//     sluice.dev/kv-role annotation, is refused with a warning (and retired if it was served). The sluice.dev
//     ones give what an engine cannot be asked: a data-parallel size it does not report, a vLLM decode's
//     KV connector, running window and KV role (kv_both, for local prefill).
//
// # From an InferencePool
//
// With Config.InferencePool, the pods are those the named InferencePool (inference.networking.k8s.io/v1,
// the Gateway API Inference Extension's pool) selects in its namespace: its spec.selector is ANDed with
// the configured selectors (in PD mode the role selectors still give each pod its role; bootstrap port
// and the other annotations are read as above) and its spec.targetPorts[0] is the engine port. A second
// informer watches that one pool; when it appears, its selector or port changes, or it goes, the pods
// are listed again under the new target and every pod and worker is reconciled: a changed port replaces
// each worker under its id, pods the pool no longer selects are drained, and a deleted pool drains all.
//
// Workers from flags and the admin API are never touched: discovery only changes workers it registered
// itself ([worker.SourceKubernetes]); if a pod's URL is already registered by another source the pod is
// left out, with a warning, until that worker goes away.
//
// # Resilience
//
// The informer lists, then watches; after a watch or list error its reflector backs off (client-go's
// exponential backoff) and lists again, and DeltaFIFO turns pods that vanished meanwhile into deletions,
// so no event is lost for good. On top of that, every Config.Resync a new informer re-lists every pod
// from the API server; once it has synced it replaces the old one and every known pod and every worker
// discovery owns is reconciled again, so anything an event missed is corrected within one period. While
// the API server is unreachable the last known state is kept: the registry is never emptied by a
// discovery failure, and health checks still guard the workers.
//
// # Concurrency Model
//
// [Discovery.Run] owns every goroutine the package starts and returns only after all of them ended:
//
//   - the informer of the current generation (and, during a re-list, of the previous one), each run by
//     one goroutine that waits for client-go's own goroutines before it returns; with an InferencePool,
//     one more informer for the pool, whose handler swaps the classifier (an atomic pointer) and wakes
//     the watch loop through a one-slot channel;
//   - Config.Workers reconciler goroutines that take pod keys from one rate-limited work queue. The
//     queue never hands the same key to two workers at once, so each pod is reconciled by one goroutine
//     at a time; a failed reconcile is re-queued with exponential backoff;
//   - one goroutine per retiring worker (drain, wait until idle or the grace period ends, remove).
//
// Event handlers only enqueue keys; all decisions are made by reconcilers reading the informer's store,
// so a burst of events for a pod costs one reconcile. One mutex guards the table of pods discovery
// serves and the prober gate; it is never held while calling the registry, the Completer, the health
// checker or the API server. Registry calls happen on reconciler goroutines; registry subscribers
// (admission's wake-up) run there, synchronously, as for any other registry writer.
package discovery
