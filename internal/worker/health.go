package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Prober checks one worker's health. It returns nil when healthy. It must
// honour ctx, which carries the probe timeout.
type Prober interface {
	Probe(ctx context.Context, w *Worker) error
}

// ProberFunc adapts a function to Prober.
type ProberFunc func(ctx context.Context, w *Worker) error

// Probe calls f.
func (f ProberFunc) Probe(ctx context.Context, w *Worker) error { return f(ctx, w) }

// HTTPProber probes GET {worker URL}{Endpoint}; any 2xx is healthy. It
// handles http:// and https:// workers; grpc:// workers need another Prober.
type HTTPProber struct {
	// Client; nil means http.DefaultClient.
	Client *http.Client
	// Endpoint path; empty means "/health".
	Endpoint string
}

// Probe implements Prober.
func (p HTTPProber) Probe(ctx context.Context, w *Worker) error {
	u := w.URL()
	if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		return fmt.Errorf("http prober: unsupported worker URL %q", u)
	}
	ep := p.Endpoint
	if ep == "" {
		ep = "/health"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+ep, nil)
	if err != nil {
		return err
	}
	if k := w.APIKey(); k != "" {
		req.Header.Set("Authorization", "Bearer "+k)
	}
	c := p.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	// Drain a little so the connection can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("health probe %s: status %d", u+ep, resp.StatusCode)
	}
	return nil
}

// HealthConfig configures the health checker. Zero fields take the defaults
// of DefaultHealthConfig (the Rust gateway's defaults).
type HealthConfig struct {
	Interval         time.Duration // between rounds (60s)
	Timeout          time.Duration // per probe (5s)
	SuccessThreshold int           // consecutive successes to become Ready (2)
	FailureThreshold int           // consecutive failures to become NotReady (3)
	Endpoint         string        // probe path for HTTPProber ("/health")
	Concurrency      int           // probes in flight at once (16)
	// Disabled turns probing off: Run only waits for its context, and
	// CheckNow marks a Pending worker Ready without probing.
	Disabled bool
	// KeepBreakerOpen leaves an open circuit breaker open until its timeout
	// even when probes pass. By default (false) a passing probe of a Ready
	// worker turns its open breaker half-open (Breaker.ProbeSucceeded), so a
	// restarted engine gets traffic as soon as it is seen serving.
	KeepBreakerOpen bool
	// PendingInterval and PendingMaxInterval pace the probes of workers that
	// have never been ready (an engine still loading when it was registered):
	// the first after PendingInterval (1s), then twice as long each time up
	// to PendingMaxInterval (2s, at most Interval), so a late engine serves
	// within seconds instead of waiting SuccessThreshold rounds of Interval.
	PendingInterval    time.Duration
	PendingMaxInterval time.Duration
}

// DefaultHealthConfig returns the default health check configuration.
func DefaultHealthConfig() HealthConfig {
	return HealthConfig{
		Interval:           60 * time.Second,
		Timeout:            5 * time.Second,
		SuccessThreshold:   2,
		FailureThreshold:   3,
		Endpoint:           "/health",
		Concurrency:        16,
		PendingInterval:    time.Second,
		PendingMaxInterval: 2 * time.Second,
	}
}

// Normalized fills zero fields with defaults and rejects negative ones.
func (c HealthConfig) Normalized() (HealthConfig, error) {
	d := DefaultHealthConfig()
	var errs []error
	dur := func(name string, v *time.Duration, def time.Duration) {
		switch {
		case *v < 0:
			errs = append(errs, fmt.Errorf("health %s %v must be positive", name, *v))
		case *v == 0:
			*v = def
		}
	}
	num := func(name string, v *int, def int) {
		switch {
		case *v < 0:
			errs = append(errs, fmt.Errorf("health %s %d must be >= 1", name, *v))
		case *v == 0:
			*v = def
		}
	}
	dur("interval", &c.Interval, d.Interval)
	dur("timeout", &c.Timeout, d.Timeout)
	dur("pending interval", &c.PendingInterval, d.PendingInterval)
	dur("pending max interval", &c.PendingMaxInterval, d.PendingMaxInterval)
	c.PendingMaxInterval = max(min(c.PendingMaxInterval, c.Interval), c.PendingInterval)
	num("success threshold", &c.SuccessThreshold, d.SuccessThreshold)
	num("failure threshold", &c.FailureThreshold, d.FailureThreshold)
	num("concurrency", &c.Concurrency, d.Concurrency)
	if c.Endpoint == "" {
		c.Endpoint = d.Endpoint
	} else if !strings.HasPrefix(c.Endpoint, "/") {
		errs = append(errs, fmt.Errorf("health endpoint %q must start with /", c.Endpoint))
	}
	return c, errors.Join(errs...)
}

// HealthChecker probes registered workers and moves them between Pending,
// Ready and NotReady. Draining workers are left alone.
type HealthChecker struct {
	reg    *Registry
	probe  Prober
	cfg    HealthConfig
	logger *slog.Logger

	// redetect asks a worker's engine again what it is (see SetRedetect); nil means never.
	redetect Redetector

	mu        sync.Mutex
	counters  map[*Worker]*healthCounters
	pending   map[*Worker]*pendingPace // fast probing of workers never ready yet
	detecting map[*Worker]bool         // a detection in flight, so two probes never run it at once
	detectErr map[*Worker]string       // the last detection failure logged, to log each once
	wasReady  map[*Worker]bool         // made ready at least once by this checker
}

type healthCounters struct{ successes, failures int }

// pendingPace is when a pending worker is probed next, and the wait after that.
type pendingPace struct {
	next  time.Time
	delay time.Duration
}

// Redetector asks w's engine what it is, after a probe passed, when w.Spec().DetectPending is set
// (the engine never answered detection) or w is NotReady (it may have come back as another kind).
// It returns the worker to go on with: w itself (its spec updated in place or unchanged), or the
// worker that replaced it under the same id when what the engine says changed. An error keeps the
// worker from becoming ready on this probe.
type Redetector func(ctx context.Context, w *Worker) (*Worker, error)

// NewHealthChecker returns a checker over reg. A nil probe means an
// HTTPProber on cfg.Endpoint; a nil logger discards.
func NewHealthChecker(reg *Registry, probe Prober, cfg HealthConfig, logger *slog.Logger) (*HealthChecker, error) {
	cfg, err := cfg.Normalized()
	if err != nil {
		return nil, err
	}
	if probe == nil {
		probe = HTTPProber{Endpoint: cfg.Endpoint}
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &HealthChecker{reg: reg, probe: probe, cfg: cfg, logger: logger, counters: map[*Worker]*healthCounters{},
		pending: map[*Worker]*pendingPace{}, detecting: map[*Worker]bool{}, detectErr: map[*Worker]string{}, wasReady: map[*Worker]bool{}}, nil
}

// SetRedetect installs the detection a passing probe runs first where it is due (see Redetector).
// Call it before Run and before the first CheckNow.
func (c *HealthChecker) SetRedetect(fn Redetector) { c.redetect = fn }

// Config returns the normalised configuration.
func (c *HealthChecker) Config() HealthConfig { return c.cfg }

// Run probes every worker once at start and then every Interval, until ctx
// is done. It returns after all its probes have finished.
func (c *HealthChecker) Run(ctx context.Context) {
	if c.cfg.Disabled {
		<-ctx.Done()
		return
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { c.runPending(ctx) })
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		c.round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// runPending probes the workers that were never ready on their own fast pace (pendingRound) until
// ctx is done.
func (c *HealthChecker) runPending(ctx context.Context) {
	t := time.NewTicker(c.cfg.PendingInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.pendingRound(ctx)
	}
}

// fastProbedLocked reports whether w is probed on the pending pace: it has not been ready since it
// was registered (Pending, or NotReady after failing as a pending worker), or its engine never
// answered detection. A worker that was ready and failed keeps the Interval's pace.
func (c *HealthChecker) fastProbedLocked(w *Worker) bool {
	switch w.Health() {
	case HealthPending:
		return true
	case HealthNotReady:
		return !c.wasReady[w] || w.s.spec.Load().DetectPending
	}
	return false
}

// pendingRound probes each fast-probed worker whose time has come, as CheckNow does (back to back
// while it passes), and doubles its wait up to PendingMaxInterval when it is still not ready.
func (c *HealthChecker) pendingRound(ctx context.Context) {
	now := time.Now()
	var due []*Worker
	c.mu.Lock()
	for w := range c.pending {
		if w.Removed() || !c.fastProbedLocked(w) {
			delete(c.pending, w)
		}
	}
	for _, w := range c.reg.Snapshot().All() {
		if !c.fastProbedLocked(w) {
			continue
		}
		p := c.pending[w]
		if p == nil {
			p = &pendingPace{next: now, delay: c.cfg.PendingInterval}
			c.pending[w] = p
		}
		if !now.Add(c.cfg.PendingInterval / 2).Before(p.next) { // the tick's own period is not added to the pace
			due = append(due, w)
		}
	}
	c.mu.Unlock()

	c.probeEach(ctx, due, func(w *Worker) {
		// Back to back: a worker never ready has no history for the threshold to guard.
		w, _ = c.checkUntilSettled(ctx, w, true)
		c.mu.Lock()
		defer c.mu.Unlock()
		if p := c.pending[w]; p != nil {
			p.delay = min(2*p.delay, c.cfg.PendingMaxInterval)
			p.next = time.Now().Add(p.delay)
		}
	})
}

// probeEach runs probe on each worker, at most Concurrency at once, and returns when all have
// finished; once ctx is done it starts no more.
func (c *HealthChecker) probeEach(ctx context.Context, ws []*Worker, probe func(*Worker)) {
	sem := make(chan struct{}, c.cfg.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, w := range ws {
		select {
		case <-ctx.Done():
			return
		case sem <- struct{}{}:
		}
		wg.Go(func() {
			defer func() { <-sem }()
			probe(w)
		})
	}
}

// round probes all non-draining workers with bounded concurrency and waits
// for every probe.
func (c *HealthChecker) round(ctx context.Context) {
	var ws []*Worker
	for _, w := range c.reg.Snapshot().All() {
		if w.Health() != HealthDraining {
			ws = append(ws, w)
		}
	}
	c.probeEach(ctx, ws, func(w *Worker) {
		_, _ = c.checkOnce(ctx, w) // apply() has recorded the outcome
	})
	c.prune()
}

// prune forgets counters of workers no longer registered.
func (c *HealthChecker) prune() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for w := range c.counters {
		if w.Removed() {
			delete(c.counters, w)
			delete(c.detectErr, w)
			delete(c.wasReady, w)
		}
	}
}

// checkOnce probes w once and applies the result. It returns the worker the
// result was applied to (w, or the worker detection replaced it with) and the
// probe's error. A probe cut short by ctx (shutdown) is not counted, nor one
// that passed while another probe of w runs its detection.
func (c *HealthChecker) checkOnce(ctx context.Context, w *Worker) (*Worker, error) {
	pctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	err := c.probe.Probe(pctx, w)
	cancel()
	if ctx.Err() != nil {
		return w, context.Cause(ctx)
	}
	if err == nil && c.redetect != nil && (w.s.spec.Load().DetectPending || w.Health() == HealthNotReady) {
		nw, derr, ran := c.detect(ctx, w)
		switch {
		case !ran:
			return w, nil
		case ctx.Err() != nil:
			return w, context.Cause(ctx)
		case derr != nil:
			err = fmt.Errorf("engine answers health but detection failed: %w", derr)
		case nw != nil:
			w = nw // the probe passed on the same engine: it counts for the replacement
		}
	}
	c.apply(w, err)
	return w, err
}

// detect runs the Redetector on w unless another probe already does (ran false). A failure is
// logged once per distinct message: a worker refused for its role is probed every few seconds.
func (c *HealthChecker) detect(ctx context.Context, w *Worker) (nw *Worker, err error, ran bool) {
	c.mu.Lock()
	if c.detecting[w] {
		c.mu.Unlock()
		return nil, nil, false
	}
	c.detecting[w] = true
	c.mu.Unlock()

	nw, err = c.redetect(ctx, w)

	c.mu.Lock()
	delete(c.detecting, w)
	logIt := false
	if err == nil {
		delete(c.detectErr, w)
	} else if msg := err.Error(); c.detectErr[w] != msg && ctx.Err() == nil {
		c.detectErr[w], logIt = msg, true
	}
	c.mu.Unlock()
	if logIt {
		c.logger.Warn("worker answers health but is not made ready: detection failed", "id", w.ID(), "url", w.URL(), "err", err)
	}
	return nw, err, true
}

// apply updates w's counters with one probe result and changes its health
// when a threshold is crossed.
func (c *HealthChecker) apply(w *Worker, probeErr error) {
	c.mu.Lock()
	hc := c.counters[w]
	if hc == nil {
		hc = &healthCounters{}
		c.counters[w] = hc
	}
	cur := w.Health()
	next := cur
	if probeErr == nil {
		hc.failures = 0
		hc.successes++
		if cur != HealthReady && hc.successes >= c.cfg.SuccessThreshold {
			next = HealthReady
		}
		if next == HealthReady {
			c.wasReady[w] = true
		}
	} else {
		hc.successes = 0
		hc.failures++
		if cur != HealthNotReady && hc.failures >= c.cfg.FailureThreshold {
			next = HealthNotReady
		}
	}
	c.mu.Unlock()

	if probeErr != nil {
		c.logger.Debug("health probe failed", "url", w.URL(), "err", probeErr)
	}
	if next != cur && cur != HealthDraining && !w.Removed() {
		if err := c.reg.SetHealth(w.ID(), next); err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrDraining) {
			c.logger.Warn("set worker health", "url", w.URL(), "err", err)
		}
	}
	if probeErr == nil && !c.cfg.KeepBreakerOpen && w.Health() == HealthReady && w.Breaker().ProbeSucceeded() {
		// The breaker changed outside the registry: wake whoever waits for a routable worker.
		c.reg.notifyBreakerRecovered(w)
	}
}

// CheckNow probes one worker at once and returns its resulting health and
// the last probe error. A Pending worker is probed up to SuccessThreshold
// times back to back, so a healthy new worker becomes routable at once: the
// threshold guards against flapping, which needs a history the new worker
// does not have. Other workers are probed once. With Disabled, a Pending
// worker is made Ready without probing.
func (c *HealthChecker) CheckNow(ctx context.Context, id string) (Health, error) {
	w, ok := c.reg.Get(id)
	if !ok {
		return 0, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if c.cfg.Disabled {
		if w.Health() == HealthPending {
			if err := c.reg.SetHealth(id, HealthReady); err != nil {
				return w.Health(), err
			}
		}
		return w.Health(), nil
	}
	if w.Health() == HealthDraining {
		return HealthDraining, nil
	}
	w, err := c.checkUntilSettled(ctx, w, w.Health() == HealthPending)
	return w.Health(), err
}

// checkUntilSettled probes w once, or with backToBack while it passes up to
// SuccessThreshold times until it is ready (see CheckNow). It returns the
// worker it ended on (detection may have replaced w) and the last probe error.
func (c *HealthChecker) checkUntilSettled(ctx context.Context, w *Worker, backToBack bool) (*Worker, error) {
	tries := 1
	if backToBack {
		tries = c.cfg.SuccessThreshold
	}
	var err error
	for range tries {
		if w, err = c.checkOnce(ctx, w); err != nil || w.Health() == HealthReady || w.Health() == HealthDraining {
			break
		}
	}
	return w, err
}
