package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// EngineLoad is a worker's load as its engine last reported it to the
// [LoadMonitor].
type EngineLoad struct {
	// Running and Waiting are the engine's running and waiting requests
	// (for a prefill engine, waiting includes the requests queued for
	// prefill compute, as SGLang's own load report counts them).
	Running, Waiting int
	// KVUsage is the fraction of the KV cache in use, 0..1.
	KVUsage float64
	// At is when the report arrived.
	At time.Time
	// GatewayLoad is the worker's gateway load ([Worker.Load]) when the
	// report arrived: requests the gateway sent (or saw finish) since are
	// the difference with the current Load.
	GatewayLoad int64
}

// EngineLoad returns the engine's last reported load (a rank view: its
// engine's); ok is false when there is none (never polled, or the last poll
// failed).
func (w *Worker) EngineLoad() (l EngineLoad, ok bool) {
	p := w.Engine().engineLoad.Load()
	if p == nil {
		return EngineLoad{}, false
	}
	return *p, true
}

// EstimatedEngineLoad is the engine's queue as best known now: running +
// waiting as last reported, corrected by the requests the gateway sent or saw
// finish there since the report; without a report, the gateway's own
// in-flight count. It is what the least_load policy compares. A rank view
// answers for its whole engine: the report's totals are what every engine
// gives, per-rank loads only SGLang's.
func (w *Worker) EstimatedEngineLoad() int64 {
	e := w.Engine()
	p := e.engineLoad.Load()
	if p == nil {
		return w.load.Load()
	}
	return max(int64(p.Running+p.Waiting)+e.load.Load()-p.GatewayLoad, 0)
}

// Overloaded reports whether the engine's last report had more than
// maxWaiting requests waiting. A worker without a report is not overloaded:
// an engine whose load is unknown is judged by health checks, not here.
func (w *Worker) Overloaded(maxWaiting int) bool {
	p := w.Engine().engineLoad.Load()
	return p != nil && p.Waiting > maxWaiting
}

// LoadFetcher reads one worker's load from its engine; it must honour ctx,
// which carries the fetch timeout.
type LoadFetcher interface {
	FetchLoad(ctx context.Context, w *Worker) (EngineLoad, error)
}

// LoadFetcherFunc adapts a function to LoadFetcher.
type LoadFetcherFunc func(ctx context.Context, w *Worker) (EngineLoad, error)

// FetchLoad calls f.
func (f LoadFetcherFunc) FetchLoad(ctx context.Context, w *Worker) (EngineLoad, error) {
	return f(ctx, w)
}

// LoadMonitorConfig configures a LoadMonitor.
type LoadMonitorConfig struct {
	// Interval between polling rounds; must be positive.
	Interval time.Duration
	// Timeout of one fetch; default min(Interval, 5s).
	Timeout time.Duration
	// Concurrency bounds the fetches in flight at once; default 16.
	Concurrency int
	// OnResult, when set, is called after each fetch with its outcome (for
	// metrics); it must not block.
	OnResult func(w *Worker, l EngineLoad, err error)
	// OnRound, when set, is called after each round (e.g. to let admission
	// heads re-select once overloaded engines report less); it must not
	// block.
	OnRound func()
}

// LoadMonitor polls every registered worker's engine for its load and
// stores the result on the worker ([Worker.EngineLoad]), atomically, for
// placement (least_load) and admission (overload) to read without I/O.
//
// It owns its goroutines: [LoadMonitor.Run] starts at most Concurrency
// fetches at a time and returns only after all of them have finished, once
// its context is done.
type LoadMonitor struct {
	reg    *Registry
	fetch  LoadFetcher
	cfg    LoadMonitorConfig
	logger *slog.Logger
	now    func() time.Time
}

// NewLoadMonitor returns a monitor over reg. A nil logger discards.
func NewLoadMonitor(reg *Registry, fetch LoadFetcher, cfg LoadMonitorConfig, logger *slog.Logger) (*LoadMonitor, error) {
	var errs []error
	if fetch == nil {
		errs = append(errs, errors.New("load monitor: a fetcher is required"))
	}
	if cfg.Interval <= 0 {
		errs = append(errs, fmt.Errorf("load monitor: interval %v must be positive", cfg.Interval))
	}
	switch {
	case cfg.Timeout < 0:
		errs = append(errs, fmt.Errorf("load monitor: timeout %v must not be negative", cfg.Timeout))
	case cfg.Timeout == 0:
		cfg.Timeout = min(cfg.Interval, 5*time.Second)
	}
	switch {
	case cfg.Concurrency < 0:
		errs = append(errs, fmt.Errorf("load monitor: concurrency %d must not be negative", cfg.Concurrency))
	case cfg.Concurrency == 0:
		cfg.Concurrency = 16
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &LoadMonitor{reg: reg, fetch: fetch, cfg: cfg, logger: logger, now: time.Now}, nil
}

// Interval returns the polling interval.
func (m *LoadMonitor) Interval() time.Duration { return m.cfg.Interval }

// Run polls every worker at once and then every Interval, until ctx is done.
// It returns after all its fetches have finished.
func (m *LoadMonitor) Run(ctx context.Context) {
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	for {
		m.Poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Poll runs one round: it fetches every registered worker's load with
// bounded concurrency and waits for every fetch.
func (m *LoadMonitor) Poll(ctx context.Context) {
	sem := make(chan struct{}, m.cfg.Concurrency)
	var wg sync.WaitGroup
	for _, w := range m.reg.Snapshot().All() {
		select {
		case <-ctx.Done():
		case sem <- struct{}{}:
			wg.Go(func() {
				defer func() { <-sem }()
				m.pollOne(ctx, w)
			})
			continue
		}
		break
	}
	wg.Wait()
	if ctx.Err() == nil && m.cfg.OnRound != nil {
		m.cfg.OnRound()
	}
}

func (m *LoadMonitor) pollOne(ctx context.Context, w *Worker) {
	fctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	gw := w.Load()
	l, err := m.fetch.FetchLoad(fctx, w)
	cancel()
	if ctx.Err() != nil {
		return // shutting down: not the engine's failure
	}
	if err != nil {
		// Unknown load: placement falls back to the gateway's own count and
		// admission does not treat the engine as overloaded.
		w.engineLoad.Store(nil)
		m.logger.Debug("engine load poll failed", "url", w.URL(), "err", err)
	} else {
		l.At, l.GatewayLoad = m.now(), gw
		w.engineLoad.Store(&l)
	}
	if m.cfg.OnResult != nil {
		m.cfg.OnResult(w, l, err)
	}
}
