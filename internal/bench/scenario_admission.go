package bench

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicegw/sluice/internal/sim"
)

// The scenarios of issue #14's admission features: token budgets (tokens), priority bands (priority),
// early rejection (early-rejection) and adaptive limits (adaptive). Each starts a realistic 2 prefill +
// 2 decode SGLang-style cluster per variant, so no variant inherits another's caches or queues, and
// reports figures of the same run side by side: on a shared machine only those ratios mean anything.

const (
	admPrefill, admDecode = 2, 2
	highPriority          = "10"
)

// admissionCluster starts the cluster and a gateway with the PD flags plus extra.
func (s *scenarioRun) admissionCluster(ctx context.Context, eng sim.Config, extra ...string) (*sim.Cluster, *gateway, error) {
	return s.admissionClusterOf(ctx, admPrefill, admDecode, eng, extra...)
}

// admissionClusterOf is admissionCluster with prefill and decode engines of its own count.
func (s *scenarioRun) admissionClusterOf(ctx context.Context, prefill, decode int, eng sim.Config, extra ...string) (*sim.Cluster, *gateway, error) {
	c, err := sim.StartCluster(ctx, sim.ClusterConfig{Prefill: prefill, Decode: decode, Mode: sim.ModeRealistic, Engine: eng, Logger: s.o.Logger})
	if err != nil {
		return nil, nil, err
	}
	flags := append(append(pdFlags(c), "--policy", "power_of_two", "--disable-retries"), extra...)
	g, err := startGatewayInProcess(ctx, flags, s.o.Logger)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, g, nil
}

// classRecords returns the records of one class ("" = all).
func classRecords(res *Result, class string) []Record {
	if class == "" {
		return res.Records
	}
	var out []Record
	for _, r := range res.Records {
		if r.Class == class {
			out = append(out, r)
		}
	}
	return out
}

// classSummary summarises one class of a run over the run's window.
func classSummary(res *Result, class string, slo time.Duration) Summary {
	return Summarize(slices.Clone(classRecords(res, class)), 0, time.Duration(res.Summary.DurationSec*float64(time.Second)), slo)
}

// classResult is a copy of res restricted to one class, for plots.
func classResult(res *Result, class, label string, slo time.Duration) *Result {
	recs := classRecords(res, class)
	return &Result{Label: label, Params: res.Params, Records: recs, Summary: classSummary(res, class, slo)}
}

// rejected counts the admission 429s of a summary and lists their codes.
func rejected(sum Summary) (int, map[string]int) {
	n, codes := 0, map[string]int{}
	for code, k := range sum.ErrorsByCode {
		if code == "pd_prefill_queue_full" || code == "pd_prefill_queue_timeout" {
			n += k
			codes[code] = k
		}
	}
	return n, codes
}

func (s *scenarioRun) plot(file string, results []*Result) {
	if len(results) == 0 {
		return
	}
	path := filepath.Join(s.o.OutDir, file)
	f, err := os.Create(path)
	if err != nil {
		s.note("plot %s: %v", file, err)
		return
	}
	defer f.Close()
	if err := WriteCompareSVG(f, results); err != nil {
		s.note("plot %s: %v", file, err)
		return
	}
	s.res.Measurements["plot_"+strings.TrimSuffix(file, ".svg")] = path
}

// ScenarioTokens: mixed prompt lengths (90% of 256 tokens, 10% of 16,000) at 1.5x the prefill capacity,
// with a per-worker request limit and with a per-worker token budget, at the same offered load. It
// reports the short requests' TTFT and goodput, and how much work the engines held.
func ScenarioTokens(ctx context.Context, o ScenarioOptions) (*ScenarioResult, error) {
	s := newScenarioRun("tokens", o)
	const short, long, maxTokens = 256, 16000, 16
	eng := sim.DefaultConfig()
	mean := 0.9*short + 0.1*long
	capacity := admPrefill * eng.PrefillTokensPerSec / mean
	rate := 1.5 * capacity
	dur, warm, slo := 60*time.Second, 5*time.Second, 2*time.Second
	if o.Short {
		dur, warm = 3*time.Second, 0
	}
	s.res.Measurements["capacity_req_per_sec"] = round3(capacity)
	s.res.Measurements["rate"] = round3(rate)
	s.note("capacity from the model: %d prefill engines x %.0f tokens/s / %.0f mean prompt tokens (90%% x %d + 10%% x %d) = %.2f req/s; offered %.2f req/s (1.5x) for %s after %s warm-up, streaming, max_tokens %d, TTFT SLO %s",
		admPrefill, eng.PrefillTokensPerSec, mean, short, long, capacity, rate, dur, warm, maxTokens, slo)
	queues := []struct {
		name, desc string
		flags      []string
	}{
		{"q8", "queue 8, timeout 2 s", []string{"--prefill-queue-size", "8", "--prefill-queue-timeout-secs", "2"}},
		{"q4", "queue 4, timeout 1 s", []string{"--prefill-queue-size", "4", "--prefill-queue-timeout-secs", "1"}},
	}
	if o.Short {
		queues = queues[1:]
	}
	variants := []struct {
		name, desc string
		flags      []string
	}{
		{"limit-2", "request limit 2", []string{"--prefill-max-inflight-requests-per-worker", "2"}},
		{"limit-4", "request limit 4", []string{"--prefill-max-inflight-requests-per-worker", "4"}},
		{"tokens-4096", "token budget 4,096", []string{"--prefill-max-inflight-tokens-per-worker", "4096"}},
	}
	s.res.Table = [][]string{{"queue", "per worker", "short served", "short TTFT p50 ms", "short TTFT p99 ms", "short goodput", "long served", "long TTFT p99 ms",
		"goodput (all)", "rejected", "mean tokens held (sluice)", "mean engine prefill queue"}}
	var shortPlots []*Result
	p99 := map[string]float64{}
	for _, q := range queues {
		for _, v := range variants {
			label := q.name + "-" + v.name
			c, g, err := s.admissionCluster(ctx, sim.Config{}, append(slices.Clone(q.flags), v.flags...)...)
			if err != nil {
				return s.res, err
			}
			var mu sync.Mutex
			var tokens, engineQ []float64
			observe := func(time.Duration) {
				st := g.app.Admission.Status()
				var held int64
				for _, n := range st.InflightTokens {
					held += n
				}
				n := 0
				for _, e := range c.ByRole(sim.RolePrefill) {
					es := e.Stats()
					n += es.Queued + es.PrefillQueue
				}
				mu.Lock()
				tokens, engineQ = append(tokens, float64(held)), append(engineQ, float64(n))
				mu.Unlock()
			}
			cfg := Config{URL: g.url, Model: "sim-model", Rate: rate, Duration: dur, Warmup: warm, Stream: true, Seed: 21, SLOTTFT: slo,
				Workload: WorkloadConfig{Kind: WorkloadClasses, Classes: []ClassConfig{
					{Name: "short", Share: 0.9, PromptTokens: short, MaxTokens: maxTokens},
					{Name: "long", Share: 0.1, PromptTokens: long, MaxTokens: maxTokens},
				}}}
			res, err := s.load(ctx, label, cfg, observe, nil)
			_ = g.close()
			c.Close()
			if err != nil {
				return s.res, err
			}
			mu.Lock()
			meanTokens, meanQ := mean0(tokens), mean0(engineQ)
			mu.Unlock()
			ss, ls := classSummary(res, "short", slo), classSummary(res, "long", slo)
			n, codes := rejected(res.Summary)
			p99[label] = ss.TTFT.P99
			s.res.Runs[len(s.res.Runs)-1].Extra = map[string]any{"short": ss, "long": ls, "mean_tokens_held": round3(meanTokens), "mean_engine_prefill_queue": round3(meanQ)}
			s.res.Table = append(s.res.Table, []string{q.desc, v.desc, strconv.Itoa(ss.Succeeded), fms(ss.TTFT.P50), fms(ss.TTFT.P99), fpct(ss.Goodput),
				strconv.Itoa(ls.Succeeded), fms(ls.TTFT.P99), fpct(res.Summary.Goodput),
				fmt.Sprintf("%d %s", n, countsString(codes)), fmt.Sprintf("%.0f", meanTokens), fmt.Sprintf("%.1f", meanQ)})
			shortPlots = append(shortPlots, classResult(res, "short", label+" (short requests)", slo))
		}
	}
	for _, q := range queues {
		for _, r := range []string{"limit-2", "limit-4"} {
			if t := p99[q.name+"-tokens-4096"]; t > 0 {
				s.res.Measurements["short_p99_ratio_"+q.name+"_"+r+"_over_tokens"] = round3(p99[q.name+"-"+r] / t)
			}
		}
	}
	s.plot("tokens-short-ttft.svg", shortPlots)
	s.note("tokens held = estimated prompt tokens of the slots sluice holds, summed over prefill workers and averaged over the run's seconds; engine prefill queue = requests waiting for the engines' prefill compute, summed, averaged")
	return s.res, nil
}

// ScenarioPriority: two priority bands at 2x overload (30% of the requests high, 70% low), with bands and
// without, and an unloaded run of the same configuration for the baseline TTFT.
func ScenarioPriority(ctx context.Context, o ScenarioOptions) (*ScenarioResult, error) {
	s := newScenarioRun("priority", o)
	const prompt, maxTokens = 1024, 32
	eng := sim.DefaultConfig()
	capacity := admPrefill * eng.PrefillTokensPerSec / prompt
	dur, warm, slo := 40*time.Second, 5*time.Second, 2*time.Second
	if o.Short {
		dur, warm = 3*time.Second, 0
	}
	admission := []string{"--prefill-max-inflight-requests-per-worker", "2", "--prefill-queue-size", "64", "--prefill-queue-timeout-secs", "5"}
	bands := []string{"--prefill-priority-bands", "low:0,high:10", "--prefill-priority-aging-secs", "10"}
	classes := []ClassConfig{
		{Name: "high", Share: 0.3, PromptTokens: prompt, MaxTokens: maxTokens, Header: map[string]string{"X-Sluice-Priority": highPriority}},
		{Name: "low", Share: 0.7, PromptTokens: prompt, MaxTokens: maxTokens},
	}
	s.note("capacity from the model: %d x %.0f tokens/s / %d-token prompts = %.1f req/s; 30%% of requests carry X-Sluice-Priority: %s; streaming, max_tokens %d, TTFT SLO %s; admission limit 2 per worker (1 in the last variant), queue 64, timeout 5 s; bands low:0,high:10, aging 10 s",
		admPrefill, eng.PrefillTokensPerSec, prompt, capacity, highPriority, maxTokens, slo)
	limit1 := []string{"--prefill-max-inflight-requests-per-worker", "1", "--prefill-queue-size", "64", "--prefill-queue-timeout-secs", "5"}
	variants := []struct {
		name  string
		load  float64
		flags []string
	}{
		{"unloaded", 0.25, append(slices.Clone(admission), bands...)},
		{"fifo-2x", 2, admission},
		{"bands-2x", 2, append(slices.Clone(admission), bands...)},
		{"bands-2x-limit-1", 2, append(limit1, bands...)},
	}
	if o.Short {
		variants = variants[:3]
	}
	s.res.Table = [][]string{{"variant", "offered req/s", "class", "served", "TTFT p50 ms", "TTFT p99 ms", "goodput", "rejected"}}
	var plots []*Result
	p99 := map[string]float64{}
	for _, v := range variants {
		c, g, err := s.admissionCluster(ctx, sim.Config{}, v.flags...)
		if err != nil {
			return s.res, err
		}
		rate := v.load * capacity
		cfg := Config{URL: g.url, Model: "sim-model", Rate: rate, Duration: dur, Warmup: warm, Stream: true, Seed: 31, SLOTTFT: slo,
			Workload: WorkloadConfig{Kind: WorkloadClasses, Classes: classes}}
		res, err := s.load(ctx, v.name, cfg, nil, nil)
		_ = g.close()
		c.Close()
		if err != nil {
			return s.res, err
		}
		extra := map[string]any{}
		if v.name == "unloaded" {
			p99["unloaded"] = res.Summary.TTFT.P99
		}
		for _, class := range []string{"high", "low"} {
			cs := classSummary(res, class, slo)
			extra[class] = cs
			n, _ := rejected(cs)
			p99[v.name+"/"+class] = cs.TTFT.P99
			s.res.Table = append(s.res.Table, []string{v.name, fmt.Sprintf("%.1f", rate), class, fmt.Sprintf("%d of %d", cs.Succeeded, cs.Requests),
				fms(cs.TTFT.P50), fms(cs.TTFT.P99), fpct(cs.Goodput), fmt.Sprintf("%d (%s)", n, fpct(float64(n)/float64(max(cs.Requests, 1))))})
			if v.name != "unloaded" || class == "high" {
				plots = append(plots, classResult(res, class, v.name+" "+class, slo))
			}
		}
		s.res.Runs[len(s.res.Runs)-1].Extra = extra
	}
	// The baseline is the unloaded run's p99 over both classes (they are alike without load, and two
	// classes give twice the samples of a tail estimate).
	if base := p99["unloaded"]; base > 0 {
		s.res.Measurements["unloaded_ttft_p99_ms"] = base
		for _, v := range variants[1:] {
			s.res.Measurements["high_p99_over_unloaded_"+v.name] = round3(p99[v.name+"/high"] / base)
		}
	}
	s.plot("priority-ttft.svg", plots)
	return s.res, nil
}

// ScenarioEarlyRejection: 2x overload with a queue long enough that rejections are timeouts; clients
// either wait for the timeout, or are rejected at once when the predicted wait exceeds it, or send
// their own deadline (X-Sluice-Deadline-Ms) that early rejection honours.
func ScenarioEarlyRejection(ctx context.Context, o ScenarioOptions) (*ScenarioResult, error) {
	s := newScenarioRun("early-rejection", o)
	const prompt, maxTokens = 1024, 32
	eng := sim.DefaultConfig()
	capacity := admPrefill * eng.PrefillTokensPerSec / prompt
	rate := 2 * capacity
	dur, warm, slo := 40*time.Second, 5*time.Second, 2500*time.Millisecond
	if o.Short {
		dur, warm = 3*time.Second, 0
	}
	base := []string{"--prefill-max-inflight-requests-per-worker", "2", "--prefill-queue-size", "512", "--prefill-queue-timeout-secs", "5"}
	s.note("capacity %.1f req/s, offered %.1f req/s (2x) for %s after %s warm-up; 1,024-token prompts, streaming, max_tokens %d; admission limit 2, queue 512 (never full: rejections are timeouts), timeout 5 s; goodput = share of all requests served with TTFT <= %s",
		capacity, rate, dur, warm, maxTokens, slo)
	variants := []struct {
		name   string
		flags  []string
		header map[string]string
	}{
		{"wait-for-timeout", base, nil},
		{"early-rejection", append(slices.Clone(base), "--prefill-early-rejection"), nil},
		{"early-rejection-deadline-2s", append(slices.Clone(base), "--prefill-early-rejection"), map[string]string{"X-Sluice-Deadline-Ms": "2000"}},
	}
	s.res.Table = [][]string{{"variant", "served", "TTFT p99 ms (served)", "goodput", "429s", "mean time to 429 ms", "p99 time to 429 ms", "429 codes", "early (predicted) rejections"}}
	var plots []*Result
	var labels []string
	var to429 [][]float64
	mean429 := map[string]float64{}
	for _, v := range variants {
		c, g, err := s.admissionCluster(ctx, sim.Config{}, v.flags...)
		if err != nil {
			return s.res, err
		}
		cfg := Config{URL: g.url, Model: "sim-model", Rate: rate, Duration: dur, Warmup: warm, Stream: true, Seed: 41, SLOTTFT: slo,
			Header: v.header, Workload: WorkloadConfig{Kind: WorkloadFixed, PromptTokens: prompt, MaxTokens: maxTokens}}
		res, err := s.load(ctx, v.name, cfg, nil, nil)
		predicted := g.app.Admission.Status().Rejections["predicted_timeout"]
		_ = g.close()
		c.Close()
		if err != nil {
			return s.res, err
		}
		var times []float64
		for _, r := range res.Records {
			if r.Status == 429 {
				times = append(times, r.E2EMS)
			}
		}
		labels, to429 = append(labels, v.name), append(to429, slices.Clone(times))
		d := NewDist(times)
		mean429[v.name] = d.Mean
		n, codes := rejected(res.Summary)
		s.res.Runs[len(s.res.Runs)-1].Extra = map[string]any{"time_to_429": d, "predicted_timeout_rejections": predicted}
		s.res.Table = append(s.res.Table, []string{v.name, strconv.Itoa(res.Summary.Succeeded), fms(res.Summary.TTFT.P99), fpct(res.Summary.Goodput),
			strconv.Itoa(n), fms(d.Mean), fms(d.P99), countsString(codes), strconv.FormatUint(predicted, 10)})
		plots = append(plots, res)
	}
	if m := mean429["early-rejection"]; m > 0 {
		s.res.Measurements["time_to_429_wait_over_early"] = round3(mean429["wait-for-timeout"] / m)
	}
	s.plot("early-rejection.svg", plots)
	if f, err := os.Create(filepath.Join(s.o.OutDir, "early-rejection-429.svg")); err == nil {
		if err := WriteCDFSVG(f, "Time to a 429 (ms, log scale)", labels, to429); err != nil {
			s.note("plot: %v", err)
		}
		f.Close()
	}
	return s.res, nil
}

// ScenarioAdaptive: a steady load that the prefill engines serve comfortably until, half-way, the
// simulator's fault API slows them 3x (SlownessFactor), turning it into a 2.3x overload. Fixed limits
// and the adaptive limit run the same schedule; goodput is reported per phase.
func ScenarioAdaptive(ctx context.Context, o ScenarioOptions) (*ScenarioResult, error) {
	s := newScenarioRun("adaptive", o)
	const prompt, maxTokens, slow = 2048, 16, 3.0
	eng := sim.DefaultConfig()
	capacity := admPrefill * eng.PrefillTokensPerSec / prompt
	rate := 0.77 * capacity
	phase, warm, slo := 30*time.Second, 5*time.Second, 3*time.Second
	limits := []int{1, 2, 4, 8, 16}
	if o.Short {
		phase, warm, limits = 2*time.Second, 0, []int{2, 8}
	}
	s.note("capacity %.2f req/s before the slowdown, %.2f after; offered %.2f req/s; %s per phase after %s warm-up; %d-token prompts, streaming, max_tokens %d; slowdown: SlownessFactor %.0f on the prefill engines; queue 16, timeout 1 s (sized to the SLO); goodput = share of the phase's requests served with TTFT <= %s",
		capacity, capacity/slow, rate, phase, warm, prompt, maxTokens, slow, slo)
	type variant struct {
		name  string
		flags []string
	}
	var variants []variant
	for _, l := range limits {
		variants = append(variants, variant{"fixed-" + strconv.Itoa(l), []string{"--prefill-max-inflight-requests-per-worker", strconv.Itoa(l)}})
	}
	variants = append(variants, variant{"adaptive-1-16", []string{"--prefill-adaptive-limit", "1:16"}})
	s.res.Table = [][]string{{"variant", "goodput before", "goodput after", "TTFT p99 ms before", "TTFT p99 ms after", "limits at the end"}}
	type phaseGood struct{ before, after float64 }
	good := map[string]phaseGood{}
	var plots []*Result
	for _, v := range variants {
		flags := append([]string{"--prefill-queue-size", "16", "--prefill-queue-timeout-secs", "1"}, v.flags...)
		c, g, err := s.admissionCluster(ctx, sim.Config{}, flags...)
		if err != nil {
			return s.res, err
		}
		var once sync.Once
		var limitTrace []map[string]int
		var mu sync.Mutex
		observe := func(elapsed time.Duration) {
			if elapsed >= warm+phase {
				once.Do(func() {
					for _, e := range c.ByRole(sim.RolePrefill) {
						if err := e.SetFaults(sim.Faults{SlownessFactor: slow}); err != nil {
							s.note("%s: slowdown: %v", v.name, err)
						}
					}
				})
			}
			mu.Lock()
			limitTrace = append(limitTrace, g.app.Admission.Status().Limits)
			mu.Unlock()
		}
		cfg := Config{URL: g.url, Model: "sim-model", Rate: rate, Duration: 2 * phase, Warmup: warm, Stream: true, Seed: 51, SLOTTFT: slo,
			Workload: WorkloadConfig{Kind: WorkloadFixed, PromptTokens: prompt, MaxTokens: maxTokens}}
		res, err := s.load(ctx, v.name, cfg, observe, nil)
		final := g.app.Admission.Status().Limits
		_ = g.close()
		c.Close()
		if err != nil {
			return s.res, err
		}
		var before, after []Record
		for _, r := range res.Records {
			if r.StartMS < float64(phase.Milliseconds()) {
				before = append(before, r)
			} else {
				after = append(after, r)
			}
		}
		sb, sa := Summarize(slices.Clone(before), 0, phase, slo), Summarize(slices.Clone(after), 0, phase, slo)
		good[v.name] = phaseGood{sb.Goodput, sa.Goodput}
		if v.name == "fixed-2" || v.name == "fixed-16" || strings.HasPrefix(v.name, "adaptive") {
			plots = append(plots, &Result{Label: v.name + " after the slowdown", Records: after, Summary: sa})
		}
		mu.Lock()
		s.res.Runs[len(s.res.Runs)-1].Extra = map[string]any{"before": sb, "after": sa, "limits_per_sec": limitTrace}
		mu.Unlock()
		s.res.Table = append(s.res.Table, []string{v.name, fpct(sb.Goodput), fpct(sa.Goodput), fms(sb.TTFT.P99), fms(sa.TTFT.P99), limitsString(final)})
	}
	s.plot("adaptive-after-ttft.svg", plots)
	var bestBefore, bestAfter phaseGood
	var bestBeforeName, bestAfterName string
	for _, v := range variants {
		if !strings.HasPrefix(v.name, "fixed-") {
			continue
		}
		if g := good[v.name]; g.before > bestBefore.before {
			bestBefore.before, bestBeforeName = g.before, v.name
		}
		if g := good[v.name]; g.after > bestAfter.after {
			bestAfter.after, bestAfterName = g.after, v.name
		}
	}
	a := good["adaptive-1-16"]
	if bestBefore.before > 0 && bestAfter.after > 0 {
		s.res.Measurements["adaptive_over_best_fixed_before"] = round3(a.before / bestBefore.before)
		s.res.Measurements["adaptive_over_best_fixed_after"] = round3(a.after / bestAfter.after)
		s.note("best fixed limit before the slowdown: %s (%s); after: %s (%s); adaptive: %s and %s, i.e. %.2fx and %.2fx of the best fixed",
			bestBeforeName, fpct(bestBefore.before), bestAfterName, fpct(bestAfter.after), fpct(a.before), fpct(a.after),
			a.before/bestBefore.before, a.after/bestAfter.after)
	}
	return s.res, nil
}

func limitsString(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, strconv.Itoa(m[k]))
	}
	return strings.Join(parts, ", ")
}

func mean0(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	sum := 0.0
	for _, x := range v {
		sum += x
	}
	return sum / float64(len(v))
}
