package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/bench/baseline"
)

// The overhead scenario: what sluice costs per request and per relayed frame against what the
// alternatives cost on the same upstream under the same load, in interleaved rounds so that the
// machine's other work spreads over every target alike.
//
// Upstreams: the frame server (baseline.Frames, an instant engine that streams its tokens back to
// back or spaced like tokens) for single-leg proxies, and an instant SGLang prefill + decode pair
// (sluice-sim) for the PD ones, and the same pair speaking only SGLang's scheduler gRPC (issue #35).
// Targets: the frame server called directly, nginx proxy_pass, httputil.ReverseProxy, sluice in
// regular mode, the bare two-leg PD proxy, sluice in PD mode, and sluice in PD mode over the engines'
// gRPC, where the gateway renders, tokenizes and detokenizes (a byte-level tokenizer: the engine's
// output ids are its text's bytes).
// Per-frame CPU comes from two stream lengths at the same arrival rate: (CPU per request at n2
// frames - at n1 frames) / (n2 - n1).

// overheadTarget is one way of reaching an upstream.
type overheadTarget struct {
	name  string
	url   string
	pd    bool         // reaches the PD pair (else the frame server)
	pids  func() []int // processes whose CPU and memory are the proxy's; nil = not measured
	close func() error
}

// overheadLoad is one load every applicable target gets.
type overheadLoad struct {
	name   string
	rate   float64 // open loop
	conc   int     // closed loop
	stream bool
	frames int // output tokens: stream frames, or the JSON answer's length
	gapUS  int // stream frames spaced this far apart (0: back to back)
	// regular and pd say which targets get the load: those in front of the frame server, those in
	// front of the PD pair.
	regular, pd bool
}

// overheadParams are the scenario's sizes (full or short).
type overheadParams struct {
	dur, warm          time.Duration
	rounds             int
	rate               float64 // JSON, open loop
	pdRate             float64 // PD JSON, open loop: the machine cannot run 2,000 PD req/s beside its engines
	conc               int     // JSON, closed loop
	spacedRate, b2bRat float64
	n1, n2             int
	gapUS              int
	streams            int // memory: concurrent open streams
}

// Target names.
const (
	tDirect = "direct"
	tNginx  = "nginx"
	tRP     = "reverseproxy"
	tSluice = "sluice"
	tBarePD = "bare-pd"
	tPD     = "sluice-pd"
	// tPDSeats is sluice-pd with decode seats on, bounds that never bind: what the pair gate costs.
	tPDSeats = "sluice-pd-seats"
	// tPDGRPC is sluice-pd in front of the pair speaking its engine gRPC: what the text layer costs.
	tPDGRPC = "sluice-pd-grpc"
)

// ScenarioOverhead measures what the gateway adds to requests and to streamed frames, against nginx,
// the standard library's reverse proxy and a bare two-leg PD proxy, and the gateway memory each open
// stream holds.
func ScenarioOverhead(ctx context.Context, o ScenarioOptions) (*ScenarioResult, error) {
	s := newScenarioRun("overhead", o)
	p := newOverheadParams(o)
	p.record(s.res.Measurements)

	targets, cleanup, err := startOverheadTargets(ctx, s, p)
	defer cleanup()
	if err != nil {
		return s.res, err
	}

	loads := []overheadLoad{
		{name: "json-open", rate: p.rate, frames: 8, regular: true},
		{name: "pd-json-open", rate: p.pdRate, frames: 8, pd: true},
		{name: "json-closed", conc: p.conc, frames: 8, regular: true, pd: true},
		{name: "spaced-" + strconv.Itoa(p.n1), rate: p.spacedRate, stream: true, frames: p.n1, gapUS: p.gapUS, regular: true},
		{name: "spaced-" + strconv.Itoa(p.n2), rate: p.spacedRate, stream: true, frames: p.n2, gapUS: p.gapUS, regular: true},
		{name: "b2b-" + strconv.Itoa(p.n1), rate: p.b2bRat, stream: true, frames: p.n1, regular: true, pd: true},
		{name: "b2b-" + strconv.Itoa(p.n2), rate: p.b2bRat, stream: true, frames: p.n2, regular: true, pd: true},
	}
	timed := loads
	if o.PairedOnly {
		timed = nil // the report still names them: their rows and goals read "-"
	}
	// cells[load][target] holds one cell per round.
	cells := map[string]map[string][]overheadCell{}
	for round := range p.rounds {
		if err := runOverheadRound(ctx, s, p, round, timed, targets, cells); err != nil {
			return s.res, err
		}
		if err := runPairedCells(ctx, s, p, round, targets, cells); err != nil {
			return s.res, err
		}
	}
	mem := map[string]streamMemory{}
	if !o.PairedOnly {
		mem = measureOverheadMemory(ctx, s, p, targets)
	}
	s.overheadTables(p, loads, targets, cells, mem)
	return s.res, nil
}

// newOverheadParams are the loads' sizes: the full run's, or --short's, with the options' overrides.
func newOverheadParams(o ScenarioOptions) overheadParams {
	p := overheadParams{dur: 10 * time.Second, warm: 2 * time.Second, rounds: 3, rate: 2000, pdRate: 1000, conc: 64,
		spacedRate: 200, b2bRat: 1000, n1: 1, n2: 51, gapUS: 2000, streams: 10000}
	if o.Rounds > 0 {
		p.rounds = o.Rounds
	}
	if o.Short {
		p = overheadParams{dur: 400 * time.Millisecond, warm: 100 * time.Millisecond, rounds: 1, rate: 300, pdRate: 200, conc: 16,
			spacedRate: 50, b2bRat: 200, n1: 1, n2: 9, gapUS: 2000, streams: 100}
	}
	if o.PDRate > 0 {
		p.pdRate = o.PDRate
	}
	if o.StreamRate > 0 {
		p.spacedRate, p.b2bRat = o.StreamRate, o.StreamRate
	}
	return p
}

// record writes the parameters a run used into its measurements.
func (p overheadParams) record(m map[string]any) {
	for k, v := range map[string]any{"rate": p.rate, "pd_rate": p.pdRate, "concurrency": p.conc, "rounds": p.rounds, "spaced_rate": p.spacedRate,
		"back_to_back_rate": p.b2bRat, "frames_n1": p.n1, "frames_n2": p.n2, "gap_us": p.gapUS} {
		m[k] = v
	}
}

// measureOverheadMemory measures the memory each open stream holds in every relay target (not the PD
// ones, nor the frame server itself); a target that fails is noted and left out.
func measureOverheadMemory(ctx context.Context, s *scenarioRun, p overheadParams, targets []*overheadTarget) map[string]streamMemory {
	mem := map[string]streamMemory{}
	for _, t := range targets {
		if t.pd || t.name == tDirect {
			continue
		}
		m, err := measureStreamMemory(ctx, t, p.streams, s.o)
		if err != nil {
			s.note("%s: memory per stream: %v", t.name, err)
			continue
		}
		mem[t.name] = m
	}
	return mem
}

// runOverheadRound runs one round of the loads on the targets each applies to, one target after
// the other in an order rotated every round, so no target always runs first (or right after another).
func runOverheadRound(ctx context.Context, s *scenarioRun, p overheadParams, round int, loads []overheadLoad,
	targets []*overheadTarget, cells map[string]map[string][]overheadCell) error {
	for _, l := range loads {
		order := slices.Clone(targets)
		if len(order) > 0 {
			k := (round + len(l.name)) % len(order)
			order = append(order[k:], order[:k]...)
		}
		for _, t := range order {
			if (t.pd && !l.pd) || (!t.pd && !l.regular) || (s.o.PDOnly && l.stream && !t.pd) {
				continue
			}
			c, err := runOverheadCell(ctx, s, p, round, l, t)
			if err != nil {
				return err
			}
			if cells[l.name] == nil {
				cells[l.name] = map[string][]overheadCell{}
			}
			cells[l.name][t.name] = append(cells[l.name][t.name], c)
		}
	}
	return nil
}

// overheadCell is one load on one target in one round.
type overheadCell struct {
	res    *Result
	cpuReq float64 // proxy CPU µs per request; <0 = not measured
}

func runOverheadCell(ctx context.Context, s *scenarioRun, p overheadParams, round int, l overheadLoad, t *overheadTarget) (overheadCell, error) {
	cfg := Config{URL: t.url, Model: "sim-model", Rate: l.rate, Concurrency: l.conc, Duration: p.dur, Warmup: p.warm,
		Stream: l.stream, Seed: int64(round + 1), Workload: WorkloadConfig{Kind: WorkloadFixed, PromptTokens: 64, MaxTokens: l.frames}}
	if !t.pd && l.stream {
		cfg.ExtraBody = `{"bench_gap_us":` + strconv.Itoa(l.gapUS) + `}`
	}
	cpu0 := -1.0
	if t.pids != nil {
		cpu0 = cpuOf(t.pids())
	}
	label := fmt.Sprintf("r%d-%s-%s", round+1, l.name, t.name)
	res, err := s.load(ctx, label, cfg, nil, nil)
	if err != nil {
		return overheadCell{}, err
	}
	c := overheadCell{res: res, cpuReq: -1}
	if t.pids != nil && res.TotalSent > 0 {
		c.cpuReq = (cpuOf(t.pids()) - cpu0) / float64(res.TotalSent) * 1e6
		s.res.Runs[len(s.res.Runs)-1].Extra = map[string]any{"cpu_us_per_request": round3(c.cpuReq)}
	}
	if bad := res.Summary.Failed + res.Summary.Dropped; bad > 0 {
		s.note("%s: %d of %d requests failed or were dropped", label, bad, res.Summary.Requests)
	}
	return c, nil
}

// A paired load runs on a gateway and its baseline at the same time, half the load on each: whatever
// else the machine does falls on both alike, so their ratio holds still where loads run one after
// the other differ by the machine's moods (issue #33's figures).
type pairedLoad struct {
	name    string
	gateway string // the target measured
	base    string // the baseline it is measured against
	cfg     Config // one side's load, without its URL, duration, seed and label
}

// The paired loads: the PD JSON closed loop (sluice-pd and bare-pd), and streams of frames spaced
// like tokens (sluice and reverseproxy, half the spaced rate each).
const (
	pdPairedLoad     = "pd-json-paired"
	spacedPairedLoad = "spaced-paired"
)

func (p overheadParams) pairedLoads() []pairedLoad {
	return []pairedLoad{
		{name: pdPairedLoad, gateway: tPD, base: tBarePD,
			cfg: Config{Concurrency: max(p.conc/2, 1), Workload: WorkloadConfig{Kind: WorkloadFixed, PromptTokens: 64, MaxTokens: 8}}},
		{name: spacedPairedLoad, gateway: tSluice, base: tRP,
			cfg: Config{Rate: p.spacedRate / 2, Stream: true, ExtraBody: `{"bench_gap_us":` + strconv.Itoa(p.gapUS) + `}`,
				Workload: WorkloadConfig{Kind: WorkloadFixed, PromptTokens: 64, MaxTokens: p.n2}}},
	}
}

// runPairedCells runs each paired load's round whose two targets are there, and adds its cells.
func runPairedCells(ctx context.Context, s *scenarioRun, p overheadParams, round int, targets []*overheadTarget,
	cells map[string]map[string][]overheadCell) error {
	for _, l := range p.pairedLoads() {
		if err := runPaired(ctx, s, p, round, l, targets, cells); err != nil {
			return err
		}
	}
	return nil
}

func runPaired(ctx context.Context, s *scenarioRun, p overheadParams, round int, l pairedLoad, targets []*overheadTarget,
	cells map[string]map[string][]overheadCell) error {
	var pair [2]*overheadTarget
	for _, t := range targets {
		switch t.name {
		case l.gateway:
			pair[0] = t
		case l.base:
			pair[1] = t
		}
	}
	if pair[0] == nil || pair[1] == nil {
		return nil
	}
	if round%2 == 1 { // neither always starts first
		pair[0], pair[1] = pair[1], pair[0]
	}
	var out [2]overheadCell
	var errs [2]error
	var cpu0 [2]float64
	done := make(chan int, len(pair))
	for i, t := range pair {
		if t.pids != nil {
			cpu0[i] = cpuOf(t.pids())
		}
		cfg := l.cfg
		cfg.URL, cfg.Model, cfg.Duration, cfg.Warmup, cfg.Seed = t.url, "sim-model", p.dur, p.warm, int64(round+1)
		cfg.Label = fmt.Sprintf("r%d-%s-%s", round+1, l.name, t.name)
		go func() {
			out[i].res, errs[i] = Run(ctx, cfg, Options{})
			done <- i
		}()
	}
	for range pair {
		<-done
	}
	if err := errors.Join(errs[:]...); err != nil {
		return fmt.Errorf("%s: %w", l.name, err)
	}
	if cells[l.name] == nil {
		cells[l.name] = map[string][]overheadCell{}
	}
	for i, t := range pair {
		c := out[i]
		c.cpuReq = -1
		if t.pids != nil && c.res.TotalSent > 0 {
			c.cpuReq = (cpuOf(t.pids()) - cpu0[i]) / float64(c.res.TotalSent) * 1e6
		}
		label := c.res.Label
		fmt.Fprintf(s.o.Log, "%s: run %s\n", s.res.Name, label)
		if err := s.record(label, c.res, map[string]any{"cpu_us_per_request": round3(c.cpuReq)}); err != nil {
			return err
		}
		if bad := c.res.Summary.Failed + c.res.Summary.Dropped; bad > 0 {
			s.note("%s: %d of %d requests failed or were dropped", label, bad, c.res.Summary.Requests)
		}
		cells[l.name][t.name] = append(cells[l.name][t.name], c)
	}
	return nil
}

// grpcPair is the PD pair that speaks only SGLang's scheduler gRPC.
type grpcPair struct {
	prefill, decode string
	bootstrapPort   int
}

// grpcURL names an engine's address as a gRPC worker.
func (grpcPair) grpcURL(u string) string { return "grpc://" + strings.TrimPrefix(u, "http://") }

// overheadBins are the programs the scenario runs as separate processes.
type overheadBins struct{ sluice, sim, baseline string }

// overheadBinaries returns the gateway, simulator and baseline binaries, building missing ones from
// the module. cleanup removes what was built; it is never nil.
func overheadBinaries(ctx context.Context, o ScenarioOptions) (overheadBins, func(), error) {
	bins := overheadBins{sluice: o.SluiceBin, sim: o.SimBin, baseline: o.BaselineBin}
	cleanup := func() {}
	if bins.sluice != "" && bins.sim != "" && bins.baseline != "" {
		return bins, cleanup, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return bins, cleanup, err
	}
	dir, err := os.MkdirTemp("", "sluice-bench-bin-")
	if err != nil {
		return bins, cleanup, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	for _, b := range []struct {
		name string
		path *string
	}{{"sluice", &bins.sluice}, {"sluice-sim", &bins.sim}, {"sluice-baseline", &bins.baseline}} {
		if *b.path != "" {
			continue
		}
		fmt.Fprintf(o.Log, "overhead: building ./cmd/%s\n", b.name)
		if *b.path, err = buildBinary(ctx, root, b.name, dir, o.Log); err != nil {
			return bins, cleanup, err
		}
	}
	return bins, cleanup, nil
}

// startBaselineProcess runs `sluice-baseline args...` with the gateway's GOGC and returns it and the
// URL it printed.
func startBaselineProcess(bin string, args []string, o ScenarioOptions) (*child, string, error) {
	c, err := startChildEnv(bin, args, []string{"GOGC=" + strconv.Itoa(gatewayGOGC)}, o.Log)
	if err != nil {
		return nil, "", err
	}
	type line struct {
		s   string
		err error
	}
	got := make(chan line, 1)
	go func() {
		s, err := c.stdout.ReadString('\n')
		got <- line{s, err}
	}()
	var l line
	select {
	case l = <-got:
	case <-time.After(20 * time.Second):
		l.err = errors.New("no address within 20s")
	}
	u, ok := strings.CutPrefix(strings.TrimSpace(l.s), "listening ")
	if l.err != nil || !ok {
		_ = c.stop()
		if l.err == nil {
			l.err = errors.New("no address line")
		}
		return nil, "", fmt.Errorf("sluice-baseline %s: %w %q", args[0], l.err, l.s)
	}
	return c, u, nil
}

// serveInProcess serves h on a free loopback port until stop.
func serveInProcess(ctx context.Context, h http.Handler) (string, func() error, error) {
	ctx, cancel := context.WithCancel(ctx)
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- baseline.Serve(ctx, "127.0.0.1:0", h, func(a string) { addr <- a }) }()
	select {
	case a := <-addr:
		return "http://" + a, func() error { cancel(); return <-done }, nil
	case err := <-done:
		cancel()
		return "", nil, err
	}
}

// gatewayGOGC is the GC target the gateway runs with; the Go baselines get it too.
const gatewayGOGC = app.DefaultGCPercent
