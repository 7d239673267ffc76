package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicegw/sluice/internal/sim"
)

// The measured truth of the capacity scenario: for each phase's load, the smallest fleet that meets
// the SLOs when actually run, found by short fixed-fleet trials through a real gateway with the
// scenario's flags. Prefill is searched with decode held generous and decode with prefill held
// generous, so each trial has one bottleneck. A trial meets its SLO when the mean of the statistic
// the model sizes for (TTFT for prefill, ITL for decode: internal/capacity/doc.go) is within the SLO
// and at most capMaxRefused of the offered requests were refused or failed: a 429 is not served.

const capMaxRefused = 0.02

// capTrial is one fixed-fleet trial.
type capTrial struct {
	p, d            int
	ttftMS, itlMS   float64 // means over the served requests
	ttftP99MS       float64
	served, refused int // refused: failed or dropped
	meets           bool
}

// capTruth is a phase's measured need per role; 0 means none met the SLO within the search.
type capTruth struct {
	p, d     int
	hiP, hiD int // the largest count tried per role
	trials   []capTrial
}

// capSearch finds the smallest n >= 1 for which try meets, from a first guess: down while the
// guess meets, up while it does not, at most budget trials and never above hi. found is false when
// no n <= hi met (n is then hi+1) or the budget ran out going up; a budget running out going down
// leaves the smallest n that met (an upper bound).
func capSearch(from, hi, budget int, try func(n int) (bool, error)) (n int, found bool, err error) {
	n = max(from, 1)
	ok, err := try(n)
	if err != nil {
		return 0, false, err
	}
	step := 1
	if ok {
		step = -1
	}
	for used := 1; ; used++ {
		next := n + step
		if (ok && next < 1) || (!ok && next > hi) || used >= budget {
			if ok {
				return n, true, nil
			}
			return n + 1, false, nil
		}
		nextOK, err := try(next)
		if err != nil {
			return 0, false, err
		}
		switch {
		case ok && !nextOK:
			return n, true, nil
		case !ok && nextOK:
			return next, true, nil
		}
		n = next
	}
}

// capTrialOptions is how long each trial runs.
type capTrialOptions struct {
	warmup, measure time.Duration
	budget          int // trials per role and phase
}

// measureTruth searches prefill then decode for one phase; formulaP/D seed the search and the
// generous count of the role not searched. A non-nil samePrefill is a phase with the same prefill
// load (rate and prompt) already measured: its prefill truth is reused.
func (s *scenarioRun) measureTruth(ctx context.Context, ph capPhase, i, formulaP, formulaD int, to capTrialOptions, samePrefill *capTruth) (capTruth, error) {
	var t capTruth
	rate := capNominal * ph.scale
	run := func(p, d int) (capTrial, error) {
		label := fmt.Sprintf("truth-%s-p%d-d%d", ph.name, p, d)
		tr, err := s.capRunTrial(ctx, label, p, d, rate, ph.output, int64(2700+10*i+p*100+d), to)
		t.trials = append(t.trials, tr)
		return tr, err
	}
	if samePrefill != nil {
		t.p, t.hiP = samePrefill.p, samePrefill.hiP
	} else {
		genD := formulaD + 2
		p, ok, err := capSearch(formulaP-2, formulaP+3, to.budget, func(n int) (bool, error) {
			t.hiP = max(t.hiP, n)
			tr, err := run(n, genD)
			return tr.meets && tr.ttftMS <= capSLOTTFT.Seconds()*1e3, err
		})
		if err != nil {
			return t, err
		}
		if ok {
			t.p = p
		}
	}
	genP := max(formulaP, t.p) + 1
	d, ok, err := capSearch(formulaD-2, formulaD+3, to.budget, func(n int) (bool, error) {
		t.hiD = max(t.hiD, n)
		tr, err := run(genP, n)
		return tr.meets && tr.itlMS <= capSLOITL.Seconds()*1e3, err
	})
	if err != nil {
		return t, err
	}
	if ok {
		t.d = d
	}
	return t, nil
}

// capRunTrial starts p prefill and d decode engines and a gateway with the scenario's flags, offers
// the phase's load, and reads the means; meets says only that few enough requests were refused (the
// caller holds the mean of its role against its SLO).
func (s *scenarioRun) capRunTrial(ctx context.Context, label string, p, d int, rate float64, output int, seed int64, to capTrialOptions) (capTrial, error) {
	tr := capTrial{p: p, d: d}
	pc, g, err := s.capFleet(ctx, p, d)
	if err != nil {
		return tr, err
	}
	defer pc.Close()
	defer func() { _ = g.close() }()
	cfg := Config{URL: g.url, Model: "sim-model", Rate: rate, Warmup: to.warmup, Duration: to.measure, Stream: true, Seed: seed,
		SLOTTFT: capSLOTTFT, Workload: WorkloadConfig{Kind: WorkloadFixed, PromptTokens: capPrompt, MaxTokens: output}}
	res, err := s.load(ctx, "capacity-"+label, cfg, nil, map[string]any{"prefill": p, "decode": d})
	if err != nil {
		return tr, err
	}
	tr = capTrialOf(p, d, res.Summary)
	s.note("trial %s: %d served, %d refused, mean TTFT %.0f ms (p99 %.0f), mean ITL %.1f ms", label, tr.served, tr.refused, tr.ttftMS, tr.ttftP99MS, tr.itlMS)
	return tr, nil
}

// capTrialOf reads a trial's summary: meets only when something was served and at most
// capMaxRefused of the offered requests were refused or failed (a 429 is not served, however fast).
func capTrialOf(p, d int, sum Summary) capTrial {
	tr := capTrial{p: p, d: d, served: sum.Succeeded, refused: sum.Failed + sum.Dropped}
	tr.ttftMS, tr.itlMS, tr.ttftP99MS = sum.TTFT.Mean, sum.ITL.Mean, sum.TTFT.P99
	tr.meets = sum.Requests > 0 && tr.served > 0 && float64(tr.refused) <= capMaxRefused*float64(sum.Requests)
	return tr
}

// capFleet starts p prefill and d decode realistic engines and a gateway in front of them with the
// scenario's flags.
func (s *scenarioRun) capFleet(ctx context.Context, p, d int) (*sim.Cluster, *gateway, error) {
	pc, err := sim.StartCluster(ctx, sim.ClusterConfig{Prefill: p, Decode: d, Mode: sim.ModeRealistic, Logger: s.o.Logger})
	if err != nil {
		return nil, nil, err
	}
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
		pc.Close()
		return nil, nil, err
	}
	return pc, g, nil
}

// truthString is a measured count, or ">hi" when none up to the largest tried met the SLO, or "-"
// when not measured.
func truthString(n, hi int) string {
	switch {
	case n > 0:
		return strconv.Itoa(n)
	case hi > 0:
		return fmt.Sprintf(">%d", hi)
	}
	return "-"
}
