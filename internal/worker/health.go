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
}

// DefaultHealthConfig returns the default health check configuration.
func DefaultHealthConfig() HealthConfig {
	return HealthConfig{
		Interval:         60 * time.Second,
		Timeout:          5 * time.Second,
		SuccessThreshold: 2,
		FailureThreshold: 3,
		Endpoint:         "/health",
		Concurrency:      16,
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

	mu       sync.Mutex
	counters map[*Worker]*healthCounters
}

type healthCounters struct{ successes, failures int }

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
	return &HealthChecker{reg: reg, probe: probe, cfg: cfg, logger: logger, counters: map[*Worker]*healthCounters{}}, nil
}

// Config returns the normalised configuration.
func (c *HealthChecker) Config() HealthConfig { return c.cfg }

// Run probes every worker once at start and then every Interval, until ctx
// is done. It returns after all its probes have finished.
func (c *HealthChecker) Run(ctx context.Context) {
	if c.cfg.Disabled {
		<-ctx.Done()
		return
	}
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

// round probes all non-draining workers with bounded concurrency and waits
// for every probe.
func (c *HealthChecker) round(ctx context.Context) {
	sem := make(chan struct{}, c.cfg.Concurrency)
	var wg sync.WaitGroup
	for _, w := range c.reg.Snapshot().All() {
		if w.Health() == HealthDraining {
			continue
		}
		select {
		case <-ctx.Done():
		case sem <- struct{}{}:
			wg.Go(func() {
				defer func() { <-sem }()
				_ = c.checkOnce(ctx, w) // apply() has recorded the outcome
			})
			continue
		}
		break
	}
	wg.Wait()
	c.prune()
}

// prune forgets counters of workers no longer registered.
func (c *HealthChecker) prune() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for w := range c.counters {
		if w.Removed() {
			delete(c.counters, w)
		}
	}
}

// checkOnce probes w once and applies the result. It returns the probe error.
// A probe cut short by ctx (shutdown) is not counted.
func (c *HealthChecker) checkOnce(ctx context.Context, w *Worker) error {
	pctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	err := c.probe.Probe(pctx, w)
	cancel()
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	c.apply(w, err)
	return err
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
	tries := 1
	if w.Health() == HealthPending {
		tries = c.cfg.SuccessThreshold
	}
	var err error
	for range tries {
		if err = c.checkOnce(ctx, w); err != nil || w.Health() != HealthPending {
			break
		}
	}
	return w.Health(), err
}
