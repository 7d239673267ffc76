package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sluicegw/sluice/internal/sim"
)

// overheadTarget is one way of reaching the instant simulator.
type overheadTarget struct {
	name  string
	url   string
	pids  func() []int // processes whose CPU is the proxy's cost; nil = not measured
	close func() error
}

// ScenarioOverhead measures what the gateway adds to requests: the same load sent directly to an
// instant simulator, through nginx, through sluice in regular mode and through sluice in PD mode.
func ScenarioOverhead(ctx context.Context, o ScenarioOptions) (*ScenarioResult, error) {
	s := newScenarioRun("overhead", o)
	dur, warm, rate, conc := 15*time.Second, 2*time.Second, 2000.0, 64
	if o.Short {
		dur, warm, rate, conc = time.Second, 200*time.Millisecond, 300, 16
	}
	s.res.Measurements["rate"] = rate
	s.res.Measurements["concurrency"] = conc

	// The engines: one regular (direct, nginx, sluice regular), 2 prefill + 1 decode (sluice PD).
	var regularURL string
	var prefill [][2]string // url, bootstrap port
	var decodeURL string
	var closeSim func() error
	var sluiceBin string
	if o.InProcess {
		c, err := sim.StartCluster(ctx, sim.ClusterConfig{Prefill: 2, Decode: 1, Regular: 1, Mode: sim.ModeInstant, Logger: o.Logger})
		if err != nil {
			return s.res, err
		}
		closeSim = c.Close
		for _, e := range c.ByRole(sim.RolePrefill) {
			prefill = append(prefill, [2]string{e.URL(), strconv.Itoa(e.BootstrapPort())})
		}
		decodeURL = c.ByRole(sim.RoleDecode)[0].URL()
		regularURL = c.ByRole(sim.RoleRegular)[0].URL()
		s.note("in-process: gateway, simulators and load generator share one process; CPU per request not measured")
	} else {
		bins, cleanup, err := overheadBinaries(ctx, o)
		defer cleanup()
		if err != nil {
			return s.res, err
		}
		sluiceBin = bins[0]
		sp, err := startSimProcess(bins[1], []string{"--prefill", "2", "--decode", "1", "--regular", "1", "--mode", "instant"}, 4, o.Log)
		if err != nil {
			return s.res, err
		}
		closeSim = sp.proc.stop
		for _, e := range sp.byRole("prefill") {
			prefill = append(prefill, [2]string{e.url, strconv.Itoa(e.bootstrapPort)})
		}
		decodeURL = sp.byRole("decode")[0].url
		regularURL = sp.byRole("regular")[0].url
		s.note("gateway, nginx and simulators run as separate processes; CPU from /proc/<pid>/stat utime+stime")
	}
	defer func() { _ = closeSim() }()

	common := []string{"--disable-health-check", "--policy", "round_robin"}
	pdFlags := append([]string{"--pd-disaggregation"}, common...)
	for _, p := range prefill {
		pdFlags = append(pdFlags, "--prefill", p[0], p[1])
	}
	pdFlags = append(pdFlags, "--decode", decodeURL)

	startGW := func(flags []string) (*overheadTarget, error) {
		var g *gateway
		var err error
		if o.InProcess {
			g, err = startGatewayInProcess(ctx, flags, o.Logger)
		} else {
			g, err = startGatewayProcess(ctx, sluiceBin, flags, o.Log)
		}
		if err != nil {
			return nil, err
		}
		t := &overheadTarget{url: g.url, close: g.close}
		if g.proc != nil {
			t.pids = func() []int { return []int{g.proc.pid()} }
		}
		return t, nil
	}
	targets := []func() (*overheadTarget, error){
		func() (*overheadTarget, error) {
			return &overheadTarget{name: "direct", url: regularURL, close: func() error { return nil }}, nil
		},
		func() (*overheadTarget, error) {
			if o.NoNginx {
				return nil, errSkip("nginx skipped (--no-nginx)")
			}
			bin, err := findNginx(o.InstallNginx, o.Log)
			if err != nil {
				return nil, errSkip("nginx baseline skipped: " + err.Error())
			}
			n, err := startNginx(ctx, bin, strings.TrimPrefix(regularURL, "http://"), 2, o.Log)
			if err != nil {
				return nil, errSkip("nginx baseline skipped: " + err.Error())
			}
			return &overheadTarget{name: "nginx", url: n.url, pids: n.pids, close: n.close}, nil
		},
		func() (*overheadTarget, error) {
			t, err := startGW(append([]string{"--worker-urls", regularURL}, common...))
			if t != nil {
				t.name = "sluice-regular"
			}
			return t, err
		},
		func() (*overheadTarget, error) {
			t, err := startGW(pdFlags)
			if t != nil {
				t.name = "sluice-pd"
			}
			return t, err
		},
	}
	type load struct {
		name   string
		rate   float64
		conc   int
		stream bool
	}
	loads := []load{{"open", rate, 0, false}, {"open-stream", rate, 0, true}, {"closed", 0, conc, false}}
	type cell struct {
		res    *Result
		cpu1k  float64 // CPU seconds per 1,000 requests; <0 = not measured
		target string
	}
	results := map[string]map[string]cell{} // load -> target -> cell
	var order []string
	for _, mk := range targets {
		t, err := mk()
		var skip errSkip
		if errors.As(err, &skip) {
			s.note("%s", string(skip))
			continue
		}
		if err != nil {
			return s.res, err
		}
		order = append(order, t.name)
		for _, l := range loads {
			cfg := Config{URL: t.url, Model: "sim-model", Rate: l.rate, Concurrency: l.conc, Duration: dur, Warmup: warm,
				Stream: l.stream, Seed: 1, Workload: WorkloadConfig{Kind: WorkloadFixed, PromptTokens: 64, MaxTokens: 8}}
			cpu0 := -1.0
			if t.pids != nil {
				cpu0 = cpuOf(t.pids())
			}
			res, err := s.load(ctx, t.name+"-"+l.name, cfg, nil, nil)
			if err != nil {
				_ = t.close()
				return s.res, err
			}
			c := cell{res: res, cpu1k: -1, target: t.name}
			if t.pids != nil && res.TotalSent > 0 {
				c.cpu1k = (cpuOf(t.pids()) - cpu0) / float64(res.TotalSent) * 1000
				s.res.Runs[len(s.res.Runs)-1].Extra = map[string]any{"cpu_sec_per_1k_requests": c.cpu1k}
			}
			if results[l.name] == nil {
				results[l.name] = map[string]cell{}
			}
			results[l.name][t.name] = c
		}
		if err := t.close(); err != nil {
			s.note("%s: close: %v", t.name, err)
		}
	}

	s.res.Table = [][]string{{"load", "target", "req/s", "p50 ms", "p99 ms", "added p50 ms", "added p99 ms", "throughput vs direct", "proxy CPU s / 1k req", "errors"}}
	for _, l := range loads {
		base, hasBase := results[l.name]["direct"]
		for _, name := range order {
			c, ok := results[l.name][name]
			if !ok {
				continue
			}
			lat := c.res.Summary.E2E
			if l.stream {
				lat = c.res.Summary.TTFT
			}
			row := []string{l.name, name, fmt.Sprintf("%.0f", c.res.Summary.RequestsPerSec), fms(lat.P50), fms(lat.P99), "-", "-", "-", "-",
				strconv.Itoa(c.res.Summary.Failed + c.res.Summary.Dropped)}
			if hasBase && name != "direct" {
				bl := base.res.Summary.E2E
				if l.stream {
					bl = base.res.Summary.TTFT
				}
				row[5], row[6] = fms(lat.P50-bl.P50), fms(lat.P99-bl.P99)
				if l.conc > 0 && base.res.Summary.RequestsPerSec > 0 {
					row[7] = fmt.Sprintf("%.2f", c.res.Summary.RequestsPerSec/base.res.Summary.RequestsPerSec)
				}
			}
			if c.cpu1k >= 0 {
				row[8] = fmt.Sprintf("%.3f", c.cpu1k)
			}
			s.res.Table = append(s.res.Table, row)
		}
	}
	s.note("latency is end-to-end for non-streaming loads and TTFT for streaming; added = target - direct")
	s.note("load generator, simulator and proxy share the machine (%d CPUs): closed-loop throughput is the whole machine's", numCPU())
	return s.res, nil
}

// errSkip marks an optional part of a scenario that could not run.
type errSkip string

func (e errSkip) Error() string { return string(e) }

// overheadBinaries returns the gateway and simulator binaries, building missing ones from the module.
// cleanup removes what was built; it is never nil.
func overheadBinaries(ctx context.Context, o ScenarioOptions) (bins [2]string, cleanup func(), err error) {
	bins, cleanup = [2]string{o.SluiceBin, o.SimBin}, func() {}
	if bins[0] != "" && bins[1] != "" {
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
	for i, name := range []string{"sluice", "sluice-sim"} {
		if bins[i] != "" {
			continue
		}
		fmt.Fprintf(o.Log, "overhead: building ./cmd/%s\n", name)
		if bins[i], err = buildBinary(ctx, root, name, dir, o.Log); err != nil {
			return bins, cleanup, err
		}
	}
	return bins, cleanup, nil
}
