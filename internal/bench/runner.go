package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config is one load-generator run.
type Config struct {
	Label       string        `json:"label,omitempty"`
	URL         string        `json:"url"`
	Endpoint    string        `json:"endpoint"`
	Model       string        `json:"model,omitempty"`
	APIKey      string        `json:"-"`
	Rate        float64       `json:"rate,omitempty"`        // open loop: Poisson arrivals per second
	Concurrency int           `json:"concurrency,omitempty"` // closed loop: concurrent clients
	MaxInflight int           `json:"max_inflight,omitempty"`
	Duration    time.Duration `json:"duration_ns,omitempty"` // measured window; 0 = until Requests
	Requests    int64         `json:"requests,omitempty"`    // measured requests; 0 = until Duration
	Warmup      time.Duration `json:"warmup_ns,omitempty"`
	Stream      bool          `json:"stream"`
	IgnoreEOS   bool          `json:"ignore_eos,omitempty"`
	// ExtraBody is a JSON object whose members are added to every request body (engine parameters
	// the workload does not set).
	ExtraBody string         `json:"extra_body,omitempty"`
	Workload  WorkloadConfig `json:"workload"`
	Seed      int64          `json:"seed"`
	SLOTTFT   time.Duration  `json:"slo_ttft_ns,omitempty"`
	Timeout   time.Duration  `json:"timeout_ns,omitempty"` // per request, end to end
	// Header is sent with every request (a class's own headers win).
	Header map[string]string `json:"header,omitempty"`
}

// Validate checks the run's parameters and fills defaults.
func (c *Config) Validate() error {
	if c.Endpoint == "" {
		c.Endpoint = EndpointChat
	}
	if c.MaxInflight == 0 {
		c.MaxInflight = 10000
	}
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Minute
	}
	var problems []string
	if c.URL == "" {
		problems = append(problems, "url is required")
	}
	if c.Endpoint != EndpointChat && c.Endpoint != EndpointCompletions {
		problems = append(problems, fmt.Sprintf("endpoint %q: want chat or completions", c.Endpoint))
	}
	if (c.Rate > 0) == (c.Concurrency > 0) {
		problems = append(problems, "give exactly one of rate (open loop) or concurrency (closed loop)")
	}
	if c.Rate < 0 || c.Concurrency < 0 || c.MaxInflight < 1 || c.Requests < 0 || c.Duration < 0 || c.Warmup < 0 {
		problems = append(problems, "rate, concurrency, requests and durations must be positive")
	}
	if c.Duration == 0 && c.Requests == 0 {
		problems = append(problems, "give a duration or a number of requests")
	}
	if c.ExtraBody != "" && (!json.Valid([]byte(c.ExtraBody)) || !strings.HasPrefix(strings.TrimSpace(c.ExtraBody), "{")) {
		problems = append(problems, "extra body must be a JSON object")
	}
	if err := c.Workload.validate(); err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, problems)
	}
	return nil
}

// Options are a run's injectable dependencies.
type Options struct {
	// Client sends the requests; nil builds one on NewTransport.
	Client *http.Client
	// Progress receives a line per second while the run goes; nil prints nothing.
	Progress io.Writer
	// Observe, when set, is called once per second with the elapsed time (scenarios sample metrics).
	Observe func(elapsed time.Duration)
}

// Result is a run's output: parameters, summary and raw records (what --out writes).
type Result struct {
	Label     string         `json:"label"`
	Params    Config         `json:"params"`
	StartedAt time.Time      `json:"started_at"`
	Summary   Summary        `json:"summary"`
	TotalSent int64          `json:"total_sent"`      // warmup included
	Extra     map[string]any `json:"extra,omitempty"` // scenario measurements
	Records   []Record       `json:"records"`
}

// run is the shared state of one Run.
type run struct {
	cfg    Config
	gen    *Generator
	q      *requester
	start  time.Time // schedule origin
	mstart time.Time // measurement window start (start + warmup)

	sent, done, failed, inflight, dropped atomic.Int64
	measured                              atomic.Int64 // measured arrivals (sent or dropped)

	mu       sync.Mutex
	recs     []Record
	mdropped int
	lastEnd  time.Time
	bodyPool sync.Pool
	extra    string // the members of cfg.ExtraBody, without the braces
}

// objectMembers returns the members of a JSON object, without its braces and surrounding space.
func objectMembers(obj string) string {
	obj = strings.TrimSpace(obj)
	if len(obj) < 2 {
		return ""
	}
	return strings.TrimSpace(obj[1 : len(obj)-1])
}

// appendMembers adds JSON object members (without braces) to the object in body.
func appendMembers(body []byte, members string) []byte {
	if members == "" || len(body) == 0 {
		return body
	}
	body = append(body[:len(body)-1], ',')
	body = append(body, members...)
	return append(body, '}')
}

// Run executes the run described by cfg until its duration or request count is reached (whichever
// first) and every request sent has ended, or ctx ends.
func Run(ctx context.Context, cfg Config, o Options) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	gen, err := NewGenerator(cfg.Workload, cfg.Seed)
	if err != nil {
		return nil, err
	}
	hc := o.Client
	if hc == nil {
		conns := cfg.Concurrency
		if cfg.Rate > 0 {
			conns = min(cfg.MaxInflight, 4096)
		}
		tr := NewTransport(max(conns, 64))
		defer tr.CloseIdleConnections()
		hc = &http.Client{Transport: tr}
	}
	hc2 := *hc
	hc2.Timeout = cfg.Timeout
	r := &run{cfg: cfg, gen: gen, q: newRequester(&hc2, cfg.URL, cfg.Endpoint, cfg.APIKey, cfg.Stream), extra: objectMembers(cfg.ExtraBody)}
	r.bodyPool.New = func() any { b := make([]byte, 0, 1024); return &b }
	r.start = time.Now()
	r.mstart = r.start.Add(cfg.Warmup)
	startedAt := r.mstart

	stopProgress := make(chan struct{})
	var pwg sync.WaitGroup
	if o.Progress != nil || o.Observe != nil {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			r.progress(o.Progress, o.Observe, stopProgress)
		}()
	}

	if cfg.Rate > 0 {
		r.openLoop(ctx)
	} else {
		r.closedLoop(ctx)
	}
	close(stopProgress)
	pwg.Wait()

	r.mu.Lock()
	defer r.mu.Unlock()
	window := r.lastEnd.Sub(r.mstart)
	if cfg.Duration > 0 && window < cfg.Duration && ctx.Err() == nil && (cfg.Requests == 0 || r.measured.Load() < cfg.Requests) {
		window = cfg.Duration
	}
	if window < 0 {
		window = 0
	}
	res := &Result{Label: cfg.Label, Params: cfg, StartedAt: startedAt, Records: r.recs, TotalSent: r.sent.Load(),
		Summary: Summarize(r.recs, r.mdropped, window, cfg.SLOTTFT)}
	return res, ctx.Err()
}

// measuring reports whether an arrival at t is measured, and whether the run must stop issuing
// (duration or request budget reached). It reserves the measured arrival's place in the budget.
func (r *run) admit(t time.Time) (measured, stop bool) {
	if r.cfg.Duration > 0 && t.Sub(r.mstart) >= r.cfg.Duration {
		return false, true
	}
	if t.Before(r.mstart) {
		return false, false
	}
	if n := r.measured.Add(1); r.cfg.Requests > 0 && n > r.cfg.Requests {
		return false, true
	}
	return true, false
}

// openLoop issues Poisson arrivals on schedule, independently of completions.
func (r *run) openLoop(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	sched := NewPoisson(r.cfg.Rate, r.cfg.Seed)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for i := int64(0); ; i++ {
		at := r.start.Add(sched.Next())
		if d := time.Until(at); d > 0 {
			timer.Reset(d)
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
		} else if ctx.Err() != nil {
			return
		}
		measured, stop := r.admit(at)
		if stop {
			return
		}
		if r.inflight.Load() >= int64(r.cfg.MaxInflight) {
			r.dropped.Add(1)
			if measured {
				r.mu.Lock()
				r.mdropped++
				r.mu.Unlock()
			}
			continue
		}
		r.inflight.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer r.inflight.Add(-1)
			r.one(ctx, i, at, measured)
		}()
	}
}

// closedLoop runs Concurrency clients, each sending its next request when the previous one ends.
func (r *run) closedLoop(ctx context.Context) {
	var wg sync.WaitGroup
	var next atomic.Int64
	for range r.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				now := time.Now()
				measured, stop := r.admit(now)
				if stop {
					return
				}
				r.inflight.Add(1)
				r.one(ctx, next.Add(1)-1, now, measured)
				r.inflight.Add(-1)
			}
		}()
	}
	wg.Wait()
}

// one sends request i, scheduled at at, and keeps its record when measured.
func (r *run) one(ctx context.Context, i int64, at time.Time, measured bool) {
	bp := r.bodyPool.Get().(*[]byte)
	p := r.gen.Prompt(i)
	body := AppendBody((*bp)[:0], r.cfg.Endpoint, r.cfg.Model, p, r.cfg.Stream, r.cfg.IgnoreEOS)
	body = appendMembers(body, r.extra)
	rec := Record{Index: i, Class: p.Class}
	header := r.cfg.Header
	if len(p.Header) > 0 {
		header = make(map[string]string, len(r.cfg.Header)+len(p.Header))
		maps.Copy(header, r.cfg.Header)
		maps.Copy(header, p.Header)
	}
	sendAt := time.Now()
	rec.LagMS = ms(sendAt.Sub(at))
	rec.StartMS = ms(sendAt.Sub(r.mstart))
	r.sent.Add(1)
	r.q.do(ctx, body, header, &rec)
	end := time.Now()
	*bp = body[:0]
	r.bodyPool.Put(bp)
	r.done.Add(1)
	if !rec.OK() {
		r.failed.Add(1)
	}
	if !measured {
		return
	}
	r.mu.Lock()
	r.recs = append(r.recs, rec)
	if end.After(r.lastEnd) {
		r.lastEnd = end
	}
	r.mu.Unlock()
}

// progress prints a line per second (elapsed, sent, done, in flight, errors, dropped, completions/s).
func (r *run) progress(w io.Writer, observe func(time.Duration), stop <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var lastDone int64
	last := time.Now()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			elapsed := now.Sub(r.start)
			if observe != nil {
				observe(elapsed)
			}
			if w == nil {
				continue
			}
			done := r.done.Load()
			rate := float64(done-lastDone) / now.Sub(last).Seconds()
			lastDone, last = done, now
			phase := ""
			if now.Before(r.mstart) {
				phase = " (warmup)"
			}
			fmt.Fprintf(w, "%6.1fs sent=%d done=%d inflight=%d errors=%d dropped=%d rate=%.1f/s%s\n",
				elapsed.Seconds(), r.sent.Load(), done, r.inflight.Load(), r.failed.Load(), r.dropped.Load(), rate, phase)
		}
	}
}
