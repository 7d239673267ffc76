package app

import (
	"context"
	"log/slog"
	"net/url"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicegw/sluice/internal/backend"
	"github.com/sluicegw/sluice/internal/kvevents"
	"github.com/sluicegw/sluice/internal/kvevents/kvspec"
	"github.com/sluicegw/sluice/internal/telemetry"
	"github.com/sluicegw/sluice/internal/worker"
)

// kvEvents follows the KV-cache events of every registered worker that has an events endpoint
// (Spec.KVEvents: --kv-events-endpoint, the admin API, the sluice.dev/kv-events annotation) into
// one block index, which kv_aware routes by. The subscribers follow the registry: onEvent only
// signals (it must not block), and run, the one goroutine of this flow, makes the manager's
// endpoint set match the registry's, so a stopped subscriber is waited for outside the registry's
// callbacks.
type kvEvents struct {
	index   *kvevents.Index
	manager *kvevents.Manager
	reg     *worker.Registry
	logger  *slog.Logger
	changed chan struct{} // capacity 1: a pending reconcile
}

func newKVEvents(prom prometheus.Registerer, reg *worker.Registry, retry time.Duration, logger *slog.Logger) (*kvEvents, error) {
	m := telemetry.NewKVEventsMetrics(prom)
	index, err := kvevents.NewIndex(kvevents.IndexConfig{Metrics: m})
	if err != nil {
		return nil, err
	}
	manager, err := kvevents.NewManager(kvevents.ManagerConfig{Index: index, RetryInterval: retry, Logger: logger, Metrics: m})
	if err != nil {
		return nil, err
	}
	return &kvEvents{index: index, manager: manager, reg: reg, logger: logger, changed: make(chan struct{}, 1)}, nil
}

// notify asks run to reconcile; it never blocks.
func (k *kvEvents) notify() {
	select {
	case k.changed <- struct{}{}:
	default:
	}
}

// run reconciles on every change until ctx ends, then stops every subscriber.
func (k *kvEvents) run(ctx context.Context) {
	defer k.manager.Close()
	k.reconcile()
	for {
		select {
		case <-ctx.Done():
			return
		case <-k.changed:
			k.reconcile()
		}
	}
}

// reconcile subscribes to exactly the registered workers' endpoints. Specs were validated when the
// worker was registered (Spec.Validate), so an error here is a bug worth a log line, not a stop.
func (k *kvEvents) reconcile() {
	var eps []kvevents.Endpoint
	for _, w := range k.reg.Snapshot().All() {
		spec := w.KVEvents()
		if spec == "" {
			if ep, ok := engineGRPCEvents(w); ok {
				eps = append(eps, ep)
			}
			continue
		}
		e, err := kvspec.Parse(w.URL(), withDP(spec, len(w.Ranks())))
		if err != nil {
			k.logger.Warn("kv events endpoint ignored", "worker", w.URL(), "err", err)
			continue
		}
		eps = append(eps, e...)
	}
	if err := k.manager.Set(eps); err != nil {
		k.logger.Warn("kv events endpoints", "err", err)
	}
}

// engineGRPCEvents is the KV event stream of a worker driven in an engine's own gRPC (SGLang's or
// vLLM's, at a grpc:// URL) with no ZeroMQ endpoint given: its SubscribeKvEvents, which an engine
// started without KV events refuses (the subscriber then stops).
func engineGRPCEvents(w *worker.Worker) (kvevents.Endpoint, bool) {
	spec := w.Spec()
	if !backend.IsGRPC(w.URL()) || (spec.Protocol != worker.ProtocolSGLang && spec.Protocol != worker.ProtocolVLLM) {
		return kvevents.Endpoint{}, false
	}
	return kvevents.Endpoint{Worker: w.URL(), Publisher: w.URL(), Engine: string(spec.Protocol)}, true
}

// withDP gives a spec without a dp parameter the engine's data-parallel size (ranks > 1), as the
// registry learnt it (SGLang's server info, --dp-size, the admin API): each rank publishes on its own
// ports.
func withDP(spec string, ranks int) string {
	if ranks <= 1 {
		return spec
	}
	u, err := url.Parse(spec)
	if err != nil || u.Query().Has("dp") {
		return spec // a bad spec is reported by the parser
	}
	if u.RawQuery != "" {
		u.RawQuery += "&"
	}
	u.RawQuery += "dp=" + strconv.Itoa(ranks)
	return u.String()
}
