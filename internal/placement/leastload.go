package placement

import "github.com/sluicegw/sluice/internal/worker"

// LeastLoad picks the candidate whose engine reports the least work: running
// + waiting requests from the worker's last load report (worker.LoadMonitor),
// corrected by the requests the gateway sent or saw finish there since, so
// that every pick between two polls does not pile onto the same worker
// ([worker.Worker.EstimatedEngineLoad]). A worker without a report counts its
// gateway in-flight requests only. Ties go to the lower reported KV usage,
// then to the first candidate. It reads atomics only and never blocks.
type LeastLoad struct{}

// Name implements Policy.
func (LeastLoad) Name() string { return PolicyLeastLoad }

// Pick implements Policy.
func (LeastLoad) Pick(cands []*worker.Worker, _ *Request) int {
	best, bestLoad, bestKV := -1, int64(0), 0.0
	for i, w := range cands {
		l := w.EstimatedEngineLoad()
		kv := 0.0
		if el, ok := w.EngineLoad(); ok {
			kv = el.KVUsage
		}
		if best < 0 || l < bestLoad || (l == bestLoad && kv < bestKV) {
			best, bestLoad, bestKV = i, l, kv
		}
	}
	return best
}
