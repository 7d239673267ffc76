package bench

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/sluicegw/sluice/internal/bench/baseline"
	"github.com/sluicegw/sluice/internal/sim"
)

// How the overhead scenario starts what it measures, step by step: the programs, a trace sink, the
// engines (a frame server, an SGLang pair over HTTP and one in engine gRPC), then the targets in
// front of them (nginx, the Go baselines, the gateways).

// overheadStart is one start of the scenario's processes: what has started, and how to stop it.
type overheadStart struct {
	ctx     context.Context
	s       *scenarioRun
	p       overheadParams
	bins    overheadBins
	sink    *traceSink
	stops   []func() error // in start order; cleanup runs them backwards
	targets []*overheadTarget
	eng     overheadEngines
}

// overheadEngines are the upstreams the targets front.
type overheadEngines struct {
	frames, prefill, decode string
	bootstrapPort           int
	grpc                    grpcPair
}

// startOverheadTargets starts the upstreams and every target; cleanup stops them all and is never nil.
func startOverheadTargets(ctx context.Context, s *scenarioRun, p overheadParams) ([]*overheadTarget, func(), error) {
	st := &overheadStart{ctx: ctx, s: s, p: p}
	if err := st.startAll(); err != nil {
		return nil, st.cleanup, err
	}
	return st.targets, st.cleanup, nil
}

func (st *overheadStart) cleanup() {
	for i := len(st.stops) - 1; i >= 0; i-- {
		_ = st.stops[i]()
	}
}

func (st *overheadStart) startAll() error {
	o := st.s.o
	if !o.InProcess {
		bins, rm, err := overheadBinaries(st.ctx, o)
		st.stops = append(st.stops, func() error { rm(); return nil })
		if err != nil {
			return err
		}
		st.bins = bins
	}
	// Tracing on, sampled, exported to a sink, as a production gateway would run.
	sink, err := startTraceSink()
	if err != nil {
		return err
	}
	st.sink = sink
	st.stops = append(st.stops, func() error {
		st.s.note("trace sink received %d spans", sink.spans.Load())
		sink.stop()
		return nil
	})
	if o.InProcess {
		err = st.startEnginesInProcess()
	} else {
		err = st.startEngineProcesses()
	}
	if err != nil {
		return err
	}
	if !o.PDOnly || o.PairedOnly {
		if err := st.addRelayTargets(); err != nil {
			return err
		}
	}
	return st.addPDTargets()
}

// simCluster is the instant SGLang pair the PD targets front; grpc makes it speak engine gRPC only.
func (st *overheadStart) simCluster(grpc bool) sim.ClusterConfig {
	c := sim.ClusterConfig{Prefill: 1, Decode: 1, Mode: sim.ModeInstant, Logger: st.s.o.Logger}
	c.Engine.InstantOutputTokens = st.p.n2
	c.Engine.GRPC, c.Engine.EngineGRPCOnly, c.Engine.ByteTokenIDs = grpc, grpc, grpc
	return c
}

func (st *overheadStart) startEnginesInProcess() error {
	u, stop, err := serveInProcess(st.ctx, &baseline.Frames{})
	if err != nil {
		return err
	}
	st.stops = append(st.stops, stop)
	st.eng.frames = u
	c, err := sim.StartCluster(st.ctx, st.simCluster(false))
	if err != nil {
		return err
	}
	st.stops = append(st.stops, c.Close)
	pe := c.ByRole(sim.RolePrefill)[0]
	st.eng.prefill, st.eng.bootstrapPort, st.eng.decode = pe.URL(), pe.BootstrapPort(), c.ByRole(sim.RoleDecode)[0].URL()
	gc, err := sim.StartCluster(st.ctx, st.simCluster(true))
	if err != nil {
		return err
	}
	st.stops = append(st.stops, gc.Close)
	pe = gc.ByRole(sim.RolePrefill)[0]
	st.eng.grpc = grpcPair{prefill: pe.URL(), decode: gc.ByRole(sim.RoleDecode)[0].URL(), bootstrapPort: pe.BootstrapPort()}
	st.s.note("in-process: targets, engines and load generator share one process; CPU and memory not measured")
	return nil
}

func (st *overheadStart) startEngineProcesses() error {
	o := st.s.o
	c, u, err := startBaselineProcess(st.bins.baseline, []string{"frames"}, o)
	if err != nil {
		return err
	}
	st.stops = append(st.stops, c.stop)
	st.eng.frames = u
	simFlags := []string{"--prefill", "1", "--decode", "1", "--mode", "instant", "--instant-output-tokens", strconv.Itoa(st.p.n2)}
	sp, err := startSimProcess(st.bins.sim, simFlags, 2, o.Log)
	if err != nil {
		return err
	}
	st.stops = append(st.stops, sp.proc.stop)
	pe := sp.byRole("prefill")[0]
	st.eng.prefill, st.eng.bootstrapPort, st.eng.decode = pe.url, pe.bootstrapPort, sp.byRole("decode")[0].url
	gsp, err := startSimProcess(st.bins.sim, append(simFlags, "--grpc", "--grpc-engine-only", "--grpc-byte-token-ids"), 2, o.Log)
	if err != nil {
		return err
	}
	st.stops = append(st.stops, gsp.proc.stop)
	pe = gsp.byRole("prefill")[0]
	st.eng.grpc = grpcPair{prefill: pe.url, decode: gsp.byRole("decode")[0].url, bootstrapPort: pe.bootstrapPort}
	st.s.note("targets, engines and the load generator run as separate processes; CPU from /proc/<pid>/stat utime+stime")
	return nil
}

func (st *overheadStart) add(t *overheadTarget) {
	st.targets = append(st.targets, t)
	st.stops = append(st.stops, t.close)
}

// addRelayTargets adds the frame relay's targets: the frame server itself, nginx, the standard
// library's reverse proxy and sluice in regular mode.
func (st *overheadStart) addRelayTargets() error {
	o := st.s.o
	st.add(&overheadTarget{name: tDirect, url: st.eng.frames, close: func() error { return nil }})
	switch {
	case o.PairedOnly: // no paired load has it
	case o.NoNginx:
		st.s.note("nginx skipped (--no-nginx)")
	default:
		st.addNginx()
	}
	rp := func() (http.Handler, error) {
		u, err := url.Parse(st.eng.frames)
		return baseline.NewReverseProxy(u), err
	}
	if err := st.addBaseline(tRP, false, []string{"reverseproxy", "--upstream", st.eng.frames}, rp); err != nil {
		return err
	}
	return st.addGateway(tSluice, false, []string{"--worker-urls", st.eng.frames})
}

// addNginx adds nginx in front of the frame server, or notes why not.
func (st *overheadStart) addNginx() {
	o := st.s.o
	bin, err := findNginx(o.InstallNginx, o.Log)
	if err != nil {
		st.s.note("nginx baseline skipped: %v", err)
		return
	}
	n, err := startNginx(st.ctx, bin, strings.TrimPrefix(st.eng.frames, "http://"), 2, o.Log)
	if err != nil {
		st.s.note("nginx baseline skipped: %v", err)
		return
	}
	st.add(&overheadTarget{name: tNginx, url: n.url, pids: n.pids, close: n.close})
}

// addPDTargets adds the bare PD proxy and the PD gateways: sluice-pd, then (unless paired-only)
// the same with decode seats and the one whose engines speak gRPC.
func (st *overheadStart) addPDTargets() error {
	o, e := st.s.o, st.eng
	if o.PDOnly {
		st.s.note("only the PD targets (--pd-only)")
	}
	bp := strconv.Itoa(e.bootstrapPort)
	bare := func() (http.Handler, error) {
		pu, err1 := url.Parse(e.prefill)
		du, err2 := url.Parse(e.decode)
		return baseline.NewPDProxy(pu, du, e.bootstrapPort), errors.Join(err1, err2)
	}
	if err := st.addBaseline(tBarePD, true, []string{"pd", "--prefill", e.prefill, "--bootstrap-port", bp, "--decode", e.decode}, bare); err != nil {
		return err
	}
	admit := []string{"--prefill-max-inflight-requests-per-worker", "1024", "--prefill-queue-size", "1024"}
	pd := append([]string{"--pd-disaggregation", "--prefill", e.prefill, bp, "--decode", e.decode}, admit...)
	if err := st.addGateway(tPD, true, pd); err != nil {
		return err
	}
	if o.PairedOnly {
		st.s.note("only the paired loads: sluice-pd and bare-pd, sluice and reverseproxy (--paired-only)")
		return nil
	}
	if err := st.addGateway(tPDSeats, true, append(pd[:len(pd):len(pd)], "--decode-max-inflight-requests-per-worker", "1024")); err != nil {
		return err
	}
	tok, err := os.MkdirTemp("", "sluice-bench-tokenizer-")
	if err != nil {
		return err
	}
	st.stops = append(st.stops, func() error { return os.RemoveAll(tok) })
	if err := sim.WriteByteTokenizer(tok); err != nil {
		return err
	}
	g := e.grpc
	return st.addGateway(tPDGRPC, true, append([]string{"--pd-disaggregation", "--prefill", g.grpcURL(g.prefill),
		strconv.Itoa(g.bootstrapPort), "--decode", g.grpcURL(g.decode), "--tokenizer-path", tok}, admit...))
}

// addBaseline adds a Go baseline: in process from h, or as `sluice-baseline args...`. The Go
// baselines run with the gateway's GC setting, so the comparison is of code, not of GOGC.
func (st *overheadStart) addBaseline(name string, pd bool, args []string, h func() (http.Handler, error)) error {
	if st.s.o.InProcess {
		hh, err := h()
		if err != nil {
			return err
		}
		u, stop, err := serveInProcess(st.ctx, hh)
		if err != nil {
			return err
		}
		st.add(&overheadTarget{name: name, url: u, pd: pd, close: stop})
		return nil
	}
	c, u, err := startBaselineProcess(st.bins.baseline, args, st.s.o)
	if err != nil {
		return err
	}
	st.add(&overheadTarget{name: name, url: u, pd: pd, pids: func() []int { return []int{c.pid()} }, close: c.stop})
	return nil
}

// addGateway adds a sluice gateway with flags, cache-aware and tracing to the sink as in production.
func (st *overheadStart) addGateway(name string, pd bool, flags []string) error {
	flags = append(flags[:len(flags):len(flags)], "--disable-health-check", "--policy", "cache_aware", "--max-connections", "0",
		"--otlp-traces-endpoint", st.sink.addr, "--trace-sample-ratio", "0.01")
	var g *gateway
	var err error
	if st.s.o.InProcess {
		g, err = startGatewayInProcess(st.ctx, flags, st.s.o.Logger)
	} else {
		g, err = startGatewayProcess(st.ctx, st.bins.sluice, flags, st.s.o.Log)
	}
	if err != nil {
		return err
	}
	t := &overheadTarget{name: name, url: g.url, pd: pd, close: g.close}
	if g.proc != nil {
		t.pids = func() []int { return []int{g.proc.pid()} }
	}
	st.add(t)
	return nil
}
