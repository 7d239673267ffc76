package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicegw/sluice/internal/capacity"
	"github.com/sluicegw/sluice/internal/sim"
)

// The capacity scenario of issue #27: one gateway in front of a 2 prefill + 2 decode simulator fleet,
// load ramped 0.3x → 2x → 2x with shorter outputs → 0.5x of the fleet's nominal rate, so the right
// number of prefill and of decode workers moves, and the right P:D ratio with it. Each second the
// gateway's recommendation (internal/capacity) is recorded against the truth: the need the model's
// formulas give for the simulator's own parameters (prefill tokens per second, ITL base and per-
// sequence growth) and the offered rate, prompt and output. The check is therefore of the
// measurement, smoothing and hysteresis (does the gateway find the engines' parameters and the load
// from what it sees, fast enough, without flapping), not of the queueing model itself.

const (
	capPrompt   = 1024 // tokens: 128 ms of prefill at the simulator's 8000 tokens/s
	capLong     = 200  // output tokens before the change
	capShort    = 60   // after it
	capNominal  = 10.0 // req/s called 1x: the 2 prefill workers 64% busy
	capSLOTTFT  = time.Second
	capSLOITL   = 25 * time.Millisecond
	capSettle   = 30 * time.Second // the bound on tracking after a change
	capAdmitted = "--prefill-max-inflight-requests-per-worker 2 --prefill-queue-size 16 --prefill-queue-timeout-secs 1"
)

type capPhase struct {
	name   string
	scale  float64
	output int
}

// capSample is one second of the run.
type capSample struct {
	t                  float64 // seconds since the first phase began
	phase              int
	recP, recD         int
	truthP, truthD     int
	targetP, targetD   int
	arrivals, prefillR float64
}

// ScenarioCapacity runs the capacity scenario (see the constants above).
func ScenarioCapacity(ctx context.Context, o ScenarioOptions) (*ScenarioResult, error) {
	s := newScenarioRun("capacity", o)
	eng := sim.DefaultConfig()
	phaseDur := 50 * time.Second
	if o.Short {
		phaseDur = 3 * time.Second
	}
	phases := []capPhase{{"0.3x", 0.3, capLong}, {"2x", 2, capLong}, {"2x-short", 2, capShort}, {"0.5x", 0.5, capShort}}

	pc, err := sim.StartCluster(ctx, sim.ClusterConfig{Prefill: 2, Decode: 2, Mode: sim.ModeRealistic, Logger: s.o.Logger})
	if err != nil {
		return s.res, err
	}
	defer pc.Close()
	args := []string{"--pd-disaggregation", "--disable-health-check", "--slo-ttft", fmt.Sprint(capSLOTTFT.Seconds()),
		"--slo-itl", fmt.Sprint(capSLOITL.Seconds())}
	for _, e := range pc.ByRole(sim.RolePrefill) {
		args = append(args, "--prefill", e.URL(), strconv.Itoa(e.BootstrapPort()))
	}
	for _, e := range pc.ByRole(sim.RoleDecode) {
		args = append(args, "--decode", e.URL())
	}
	g, err := startGatewayInProcess(ctx, append(args, strings.Fields(capAdmitted)...), s.o.Logger)
	if err != nil {
		return s.res, err
	}
	defer func() { _ = g.close() }()

	s.note("fleet: 2 prefill + 2 decode simulated SGLang engines (prefill %.0f tokens/s one at a time, ITL %s + %s x batch); gateway --slo-ttft %s --slo-itl %s, admission %q",
		eng.PrefillTokensPerSec, eng.ITLBase, eng.ITLPerSeq, capSLOTTFT, capSLOITL, capAdmitted)
	s.note("truth = capacity.PrefillNeed / DecodeNeed on the simulator's parameters and the offered load; 1x = %.0f req/s of %d-token prompts; each phase %s", capNominal, capPrompt, phaseDur)

	var mu sync.Mutex
	var samples []capSample
	start := time.Now()
	for i, ph := range phases {
		rate := capNominal * ph.scale
		truthP := capacity.PrefillNeed(rate, capPrompt, eng.PrefillTokensPerSec, capSLOTTFT)
		truthD := capacity.DecodeNeed(rate, float64(ph.output), eng.ITLBase, eng.ITLPerSeq, capSLOITL, 0)
		observe := func(time.Duration) {
			smp := capSample{t: time.Since(start).Seconds(), phase: i, truthP: truthP, truthD: truthD}
			for _, r := range g.app.Capacity.Snapshot() {
				if r.Model != "sim-model" {
					continue
				}
				if r.Role == capacity.RolePrefill {
					smp.recP, smp.targetP = r.Recommended, r.Target
					smp.arrivals, smp.prefillR = r.Inputs.ArrivalRate, r.Inputs.PrefillRate
				} else {
					smp.recD, smp.targetD = r.Recommended, r.Target
				}
			}
			mu.Lock()
			samples = append(samples, smp)
			mu.Unlock()
		}
		cfg := Config{URL: g.url, Model: "sim-model", Rate: rate, Duration: phaseDur, Stream: true, Seed: int64(270 + i), SLOTTFT: capSLOTTFT,
			Workload: WorkloadConfig{Kind: WorkloadFixed, PromptTokens: capPrompt, MaxTokens: ph.output}}
		if _, err := s.load(ctx, "capacity-"+ph.name, cfg, observe, map[string]any{"truth_prefill": truthP, "truth_decode": truthD}); err != nil {
			return s.res, err
		}
	}

	s.res.Table = [][]string{{"phase", "offered req/s", "output tokens", "truth P", "truth D", "recommended P after 30 s", "recommended D after 30 s",
		"within ±1", "P reversals", "D reversals"}}
	allOK := true
	for i, ph := range phases {
		mu.Lock()
		var in []capSample
		for _, smp := range samples {
			if smp.phase == i {
				in = append(in, smp)
			}
		}
		mu.Unlock()
		if len(in) == 0 {
			continue
		}
		t0 := in[0].t
		ok := true
		rangeP, rangeD := [2]int{math.MaxInt, 0}, [2]int{math.MaxInt, 0}
		var recP, recD []int
		for _, smp := range in {
			recP, recD = append(recP, smp.recP), append(recD, smp.recD)
			if smp.t-t0 < capSettle.Seconds() {
				continue
			}
			rangeP = [2]int{min(rangeP[0], smp.recP), max(rangeP[1], smp.recP)}
			rangeD = [2]int{min(rangeD[0], smp.recD), max(rangeD[1], smp.recD)}
			if abs(smp.recP-smp.truthP) > 1 || abs(smp.recD-smp.truthD) > 1 {
				ok = false
			}
		}
		revP, revD := reversals(recP), reversals(recD)
		if o.Short {
			ok = true // a few seconds cannot settle: the smoke run checks the plumbing only
		} else if revP > 1 || revD > 1 {
			ok = false
		}
		allOK = allOK && ok
		s.res.Table = append(s.res.Table, []string{ph.name, fmt.Sprintf("%.1f", capNominal*ph.scale), strconv.Itoa(ph.output),
			strconv.Itoa(in[0].truthP), strconv.Itoa(in[0].truthD), spanString(rangeP), spanString(rangeD), strconv.FormatBool(ok),
			strconv.Itoa(revP), strconv.Itoa(revD)})
		s.res.Measurements["within_1_"+ph.name] = b2f(ok)
		s.res.Measurements["reversals_prefill_"+ph.name] = float64(revP)
		s.res.Measurements["reversals_decode_"+ph.name] = float64(revD)
	}
	s.res.Measurements["tracks"] = b2f(allOK)
	if n := len(samples); n > 0 {
		last := samples[n-1]
		s.note("last sample: arrivals %.2f req/s, prefill %.0f tokens per busy worker-second (engine: %.0f)", last.arrivals, last.prefillR, eng.PrefillTokensPerSec)
	}
	s.note("tracks within ±1 worker per role after %s of each change, reversing at most once per phase: %v", capSettle, allOK)
	s.plotCapacity("capacity-recommendation.svg", phases, samples)
	return s.res, nil
}

func abs(n int) int { return max(n, -n) }

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func spanString(r [2]int) string {
	if r[0] == math.MaxInt {
		return "-"
	}
	if r[0] == r[1] {
		return strconv.Itoa(r[0])
	}
	return fmt.Sprintf("%d..%d", r[0], r[1])
}

// reversals counts the changes of direction of a series (up then down, or down then up): one
// overshoot and its correction is one.
func reversals(xs []int) int {
	n, dir := 0, 0
	for i := 1; i < len(xs); i++ {
		d := xs[i] - xs[i-1]
		if d == 0 {
			continue
		}
		s := 1
		if d < 0 {
			s = -1
		}
		if dir != 0 && s != dir {
			n++
		}
		dir = s
	}
	return n
}

// plotCapacity writes recommendation against truth over time, one panel per role.
func (s *scenarioRun) plotCapacity(file string, phases []capPhase, samples []capSample) {
	f, err := os.Create(filepath.Join(s.o.OutDir, file))
	if err != nil {
		s.note("plot %s: %v", file, err)
		return
	}
	defer f.Close()
	if _, err := f.WriteString(capacitySVG(phases, samples)); err != nil {
		s.note("plot %s: %v", file, err)
	}
}

// capacitySVG draws two step charts (prefill, decode): truth dashed, recommendation solid, phase
// boundaries as vertical lines.
func capacitySVG(phases []capPhase, samples []capSample) string {
	const w, h, pad, gap = 900.0, 260.0, 50.0, 30.0
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`, w, 2*h+gap+20)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>`)
	tmax, ymax := 1.0, 1
	for _, smp := range samples {
		tmax = math.Max(tmax, smp.t)
		ymax = max(ymax, smp.recP, smp.recD, smp.truthP, smp.truthD)
	}
	ymax++
	for panel, role := range []string{"prefill", "decode"} {
		y0 := 10 + float64(panel)*(h+gap)
		px := func(t float64) float64 { return pad + (w-2*pad)*t/tmax }
		py := func(v int) float64 { return y0 + h - pad/2 - (h-pad)*float64(v)/float64(ymax) }
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">%s workers: recommended (solid) vs truth (dashed)</text>`, pad, y0+12, role)
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="black"/>`, pad, py(0), w-pad, py(0))
		for v := 0; v <= ymax; v++ {
			fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end">%d</text>`, pad-6, py(v)+4, v)
		}
		last := -1
		for _, smp := range samples {
			if smp.phase != last {
				last = smp.phase
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#bbb"/><text x="%.1f" y="%.1f" fill="#666">%s</text>`,
					px(smp.t), py(ymax), px(smp.t), py(0), px(smp.t)+3, py(ymax)+12, phases[smp.phase].name)
			}
		}
		line := func(get func(capSample) int, style string) {
			var pts []string
			for i, smp := range samples {
				if i > 0 {
					pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(smp.t), py(get(samples[i-1]))))
				}
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(smp.t), py(get(smp))))
			}
			fmt.Fprintf(&b, `<polyline fill="none" %s points="%s"/>`, style, strings.Join(pts, " "))
		}
		if role == "prefill" {
			line(func(c capSample) int { return c.truthP }, `stroke="#888" stroke-dasharray="6 4" stroke-width="2"`)
			line(func(c capSample) int { return c.recP }, `stroke="#1f77b4" stroke-width="2"`)
		} else {
			line(func(c capSample) int { return c.truthD }, `stroke="#888" stroke-dasharray="6 4" stroke-width="2"`)
			line(func(c capSample) int { return c.recD }, `stroke="#d62728" stroke-width="2"`)
		}
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end">seconds: %.0f</text>`, w-pad, py(0)+16, tmax)
	}
	b.WriteString(`</svg>`)
	return b.String()
}
