package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/backend"
	"github.com/sluicegw/sluice/internal/config"
	"github.com/sluicegw/sluice/internal/worker"
)

// admissionSettings are the admission settings the flags set. A single band is one band, no
// priorities, and is not kept (the admin API then lists none); Aging is kept without bands, since
// bands may be set live.
func admissionSettings(c config.AdmissionConfig) admission.Settings {
	s := c.Clone()
	if len(s.Bands) < 2 {
		s.Bands = nil
	}
	return s
}

// declareDecodeWindow tells admission a decode worker's running window, per seat key: each rank view
// of a data-parallel engine (URL@rank) and the engine itself (URL, the key when ranks are not placed,
// --dp-aware=false, where the engine's window is the sum over its ranks).
func declareDecodeWindow(adm *admission.Controller, w *worker.Worker) {
	if w.Role() != worker.RoleDecode {
		return
	}
	spec := w.Spec()
	ranks := w.Ranks()
	n := max(len(ranks), 1)
	adm.SetDecodeCapacity(w.Key(), admission.DecodeCapacity{Window: spec.DecodeWindow * n, KVTokens: spec.DecodeKVTokens * int64(n)})
	for _, r := range ranks {
		adm.SetDecodeCapacity(r.Key(), admission.DecodeCapacity{Window: spec.DecodeWindow, KVTokens: spec.DecodeKVTokens})
	}
}

// warnUnboundedDecode warns when a decode worker joins (by flag, admin API or discovery) under decode
// seats auto without a known window: its engine reports none (vLLM) and none was declared, so
// admission bounds it by nothing. `sluice admission get` lists it with limit none.
func (a *App) warnUnboundedDecode(w *worker.Worker) {
	if w.Role() != worker.RoleDecode || w.Spec().DecodeWindow > 0 || !a.Admission.Settings().DecodeAuto {
		return
	}
	a.logger.Warn("decode worker has no running window: under --decode-max-inflight-requests-per-worker auto its decode seats are unbounded",
		"worker", w.URL(), "protocol", w.Spec().Protocol,
		"fix", "declare it: --decode-window N (flag workers), sluice workers add --decode-window N, or the pod annotation sluice.dev/decode-window (vLLM: its --max-num-seqs)")
}

// newLoadMonitor builds the one poller of the engines' own load reports, or nil when
// --engine-load-interval-secs is 0: every worker's engine is asked the way its protocol offers it
// (backend.Upstream.FetchLoad), with the worker's API key. The readings serve three readers: the
// worker (least_load placement and the overload check read them there), the engine-load metrics
// (sink), and admission, whose heads re-select after each round when an overload threshold is set,
// so a worker whose engine drained is used at once.
func newLoadMonitor(cfg *config.Config, reg *worker.Registry, up *backend.Upstream, adm *admission.Controller,
	sink *engineLoadSink, logger *slog.Logger) (*worker.LoadMonitor, error) {
	interval := cfg.LoadMonitorInterval()
	if interval <= 0 {
		return nil, nil
	}
	fetch := worker.LoadFetcherFunc(func(ctx context.Context, w *worker.Worker) (worker.EngineLoad, error) {
		u := *up
		u.APIKey = w.APIKey()
		l, err := u.FetchLoad(ctx, w.URL(), string(w.Protocol()))
		if err != nil {
			return worker.EngineLoad{}, err
		}
		return worker.EngineLoad{Running: l.Running, Waiting: l.Waiting, KVUsage: l.KVUsage}, nil
	})
	mc := worker.LoadMonitorConfig{Interval: interval, Timeout: min(interval, 5*time.Second), OnResult: sink.result}
	if cfg.Load.OverloadWaitingRequests >= 0 || cfg.Load.DecodeOverloadWaitingRequests >= 0 || cfg.Load.DecodeMaxKVUsage > 0 {
		mc.OnRound = adm.Wake
	}
	return worker.NewLoadMonitor(reg, fetch, mc, logger)
}

// The admission adapter's series of the features beyond the source contract.

func (a admissionMetrics) SetInflightTokens(w string, n int64) { a.m.SetInflightTokens(w, n) }

// SetLimit is not pushed: the state collector reads every worker's limit at scrape time
// (stateSample), so sluice_pd_prefill_admission_limit has one source, fixed or adaptive.
func (a admissionMetrics) SetLimit(string, int) {}

func (a admissionMetrics) SetBandQueued(b string, n int) { a.m.SetBandQueued(b, n) }
func (a admissionMetrics) ObserveBandWait(b string, d time.Duration) {
	a.m.ObserveBandWait(b, d)
}

// The admission adapter's decode seats' series, labelled by decode worker key.

func (a admissionMetrics) SetSeats(w string, n int)     { a.m.SetSeats(w, n) }
func (a admissionMetrics) SetSeatLimit(w string, n int) { a.m.SetSeatLimit(w, n) }
func (a admissionMetrics) ObserveDecodeWait(q string, d time.Duration) {
	a.m.ObserveDecodeWait(modelLabel(a.reg, q), d)
}
func (a admissionMetrics) DeleteSeatWorker(w string) { a.m.DeleteSeatWorker(w) }

var _ admission.Metrics = admissionMetrics{}

// keepBandSeries drops the per-band metric series of bands the new settings no longer have (with
// fewer than two bands, priorities are off and no band is reported).
func (a *App) keepBandSeries(set admission.Settings) {
	var names []string
	if len(set.Bands) > 1 {
		for _, b := range set.Bands {
			names = append(names, b.Name)
		}
	}
	a.Metrics.KeepBands(names)
}
