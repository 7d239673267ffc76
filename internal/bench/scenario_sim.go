package bench

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sluicegw/sluice/internal/sim"
)

// pdFlags returns the gateway flags of an SGLang PD deployment over the cluster's engines.
func pdFlags(c *sim.Cluster) []string {
	var f []string
	for _, e := range c.ByRole(sim.RolePrefill) {
		f = append(f, "--prefill", e.URL(), strconv.Itoa(e.BootstrapPort()))
	}
	for _, e := range c.ByRole(sim.RoleDecode) {
		f = append(f, "--decode", e.URL())
	}
	return append([]string{"--pd-disaggregation", "--disable-health-check"}, f...)
}

// ScenarioOverload drives a realistic 2 prefill + 2 decode cluster at about twice the prefill capacity,
// with prefill admission off and on, and reports where the queue builds up (inside the engines, or
// inside sluice) and what that does to TTFT and goodput.
func ScenarioOverload(ctx context.Context, o ScenarioOptions) (*ScenarioResult, error) {
	s := newScenarioRun("overload", o)
	const prefillEngines, promptTokens, maxTokens = 2, 1024, 64
	eng := sim.DefaultConfig()
	// Capacity: prefill is the bottleneck (one prefill at a time per engine, no cache hits: every
	// prompt is distinct); decode runs up to MaxRunningRequests sequences in parallel.
	capacity := prefillEngines * eng.PrefillTokensPerSec / promptTokens
	rate := 2 * capacity
	dur, slo := 30*time.Second, 2*time.Second
	if o.Short {
		dur = 3 * time.Second
	}
	s.res.Measurements["capacity_req_per_sec"] = round3(capacity)
	s.res.Measurements["rate"] = round3(rate)
	s.note("capacity estimated from the model: %d prefill engines x %.0f tokens/s / %d prompt tokens = %.1f req/s; offered %.1f req/s for %s, streaming, max_tokens %d, TTFT SLO %s",
		prefillEngines, eng.PrefillTokensPerSec, promptTokens, capacity, rate, dur, maxTokens, slo)

	admissionOn := []string{"--prefill-max-inflight-requests-per-worker", "4", "--prefill-queue-size", "64", "--prefill-queue-timeout-secs", "5"}
	// A queue sized to the SLO: 16 waiters drain in about 16 / capacity ≈ 1 s.
	admissionSLO := []string{"--prefill-max-inflight-requests-per-worker", "4", "--prefill-queue-size", "16", "--prefill-queue-timeout-secs", "2"}
	variants := []struct {
		name  string
		flags []string
	}{{"admission-off", nil}, {"admission-on", admissionOn}, {"admission-on-q16", admissionSLO}}
	s.res.Table = [][]string{{"variant", "served", "TTFT p50 ms (served)", "TTFT p99 ms (served)", "goodput", "rejected", "rejection codes", "max engine queue (prefill, sum)", "max sluice queue", "other errors"}}
	for _, v := range variants {
		c, err := sim.StartCluster(ctx, sim.ClusterConfig{Prefill: prefillEngines, Decode: 2, Mode: sim.ModeRealistic, Logger: o.Logger})
		if err != nil {
			return s.res, err
		}
		g, err := startGatewayInProcess(ctx, append(append(pdFlags(c), "--policy", "power_of_two", "--disable-retries"), v.flags...), o.Logger)
		if err != nil {
			c.Close()
			return s.res, err
		}
		var mu sync.Mutex
		var maxEngineQ, maxSluiceQ int
		var engineQ, sluiceQ []int
		tr := NewTransport(2)
		defer tr.CloseIdleConnections()
		hc := &http.Client{Transport: tr, Timeout: 2 * time.Second}
		observe := func(time.Duration) {
			q := 0
			for _, e := range c.ByRole(sim.RolePrefill) {
				st := e.Stats()
				q += st.Queued + st.PrefillQueue
			}
			sq := 0
			if v.flags != nil {
				if f, err := scrapeGauge(ctx, hc, g.url+"/metrics", "sluice_pd_prefill_admission_queued"); err == nil {
					sq = int(f)
				}
			}
			mu.Lock()
			maxEngineQ, maxSluiceQ = max(maxEngineQ, q), max(maxSluiceQ, sq)
			engineQ, sluiceQ = append(engineQ, q), append(sluiceQ, sq)
			mu.Unlock()
		}
		cfg := Config{URL: g.url, Model: "sim-model", Rate: rate, Duration: dur, Stream: true, Seed: 7, SLOTTFT: slo,
			Workload: WorkloadConfig{Kind: WorkloadFixed, PromptTokens: promptTokens, MaxTokens: maxTokens}}
		res, err := s.load(ctx, v.name, cfg, observe, nil)
		engineMax := 0
		for _, e := range c.ByRole(sim.RolePrefill) {
			engineMax = max(engineMax, e.Stats().MaxQueueDepth)
		}
		_ = g.close()
		c.Close()
		if err != nil {
			return s.res, err
		}
		mu.Lock()
		extra := map[string]any{"max_engine_prefill_queue": maxEngineQ, "max_sluice_queue": maxSluiceQ,
			"engine_queue_per_sec": engineQ, "sluice_queue_per_sec": sluiceQ, "engine_max_waiting_queue_depth": engineMax}
		mu.Unlock()
		s.res.Runs[len(s.res.Runs)-1].Extra = extra
		sum := res.Summary
		rejected, codes := 0, map[string]int{}
		for code, n := range sum.ErrorsByCode {
			if code == "pd_prefill_queue_full" || code == "pd_prefill_queue_timeout" {
				rejected += n
				codes[code] = n
			}
		}
		other := sum.Failed + sum.Dropped - rejected
		s.res.Table = append(s.res.Table, []string{v.name, strconv.Itoa(sum.Succeeded), fms(sum.TTFT.P50), fms(sum.TTFT.P99),
			fpct(sum.Goodput), fmt.Sprintf("%d (%s)", rejected, fpct(float64(rejected)/float64(max(sum.Requests, 1)))),
			countsString(codes), strconv.Itoa(maxEngineQ), strconv.Itoa(maxSluiceQ), strconv.Itoa(other)})
	}
	s.note("admission-on: limit 4 per prefill worker, queue 64, timeout 5s; admission-on-q16: limit 4, queue 16, timeout 2s")
	s.note("engine queue = waiting + prefill-queued requests summed over prefill engines, sampled each second; sluice queue = sluice_pd_prefill_admission_queued scraped each second")
	return s.res, nil
}

// ScenarioPrefix compares routing policies on a shared-prefix multi-turn workload over 4 realistic
// regular workers. The regime is the one cache-aware routing exists for: the prefix working set (16
// system prompts of 1,024 tokens plus the conversations) is about twice one engine's prefix cache but
// fits in the fleet's, so spreading every prefix over every worker thrashes the caches.
func ScenarioPrefix(ctx context.Context, o ScenarioOptions) (*ScenarioResult, error) {
	s := newScenarioRun("prefix", o)
	wl := WorkloadConfig{Kind: WorkloadPrefix, Prefixes: 16, PrefixTokens: 1024, PromptTokens: 64, MaxTokens: 32, Turns: 4, Conversations: 64}
	const workers, cacheTokens = 4, 8192
	rate, dur, warm := 16.0, 60*time.Second, 5*time.Second
	if o.Short {
		dur, warm = 2*time.Second, 0
	}
	s.note("%d regular workers (realistic, prefix cache %d tokens each); %d system prompts x %d tokens, %d conversations x %d turns, user turn %d tokens, max_tokens %d; %.0f req/s for %s after %s warmup, streaming",
		workers, cacheTokens, wl.Prefixes, wl.PrefixTokens, wl.Conversations, wl.Turns, wl.PromptTokens, wl.MaxTokens, rate, dur, warm)
	s.res.Table = [][]string{{"policy", "served", "TTFT p50 ms", "TTFT p99 ms", "E2E p99 ms", "cache hit rate", "requests per worker", "max/mean load", "errors"}}
	for _, policy := range []string{"round_robin", "power_of_two", "cache_aware"} {
		eng := sim.Config{PrefixCacheTokens: cacheTokens}
		c, err := sim.StartCluster(ctx, sim.ClusterConfig{Regular: workers, Mode: sim.ModeRealistic, Engine: eng, Logger: o.Logger})
		if err != nil {
			return s.res, err
		}
		flags := []string{"--disable-health-check", "--policy", policy}
		for _, e := range c.Engines {
			flags = append(flags, "--worker-urls", e.URL())
		}
		g, err := startGatewayInProcess(ctx, flags, o.Logger)
		if err != nil {
			c.Close()
			return s.res, err
		}
		cfg := Config{URL: g.url, Model: "sim-model", Rate: rate, Duration: dur, Warmup: warm, Stream: true, Seed: 11, Workload: wl}
		res, err := s.load(ctx, policy, cfg, nil, nil)
		var hit, prompt int64
		var perWorker []int
		for _, e := range c.Engines {
			st := e.Stats()
			hit += st.PrefixCacheHitTokens
			prompt += st.PromptTokens
			perWorker = append(perWorker, int(st.RequestsSeen))
		}
		_ = g.close()
		c.Close()
		if err != nil {
			return s.res, err
		}
		hitRate := float64(hit) / float64(max(prompt, 1))
		imbalance := maxOverMean(perWorker)
		s.res.Runs[len(s.res.Runs)-1].Extra = map[string]any{"cache_hit_rate": round3(hitRate), "engine_requests": perWorker,
			"prompt_tokens": prompt, "cache_hit_tokens": hit}
		sum := res.Summary
		s.res.Table = append(s.res.Table, []string{policy, strconv.Itoa(sum.Succeeded), fms(sum.TTFT.P50), fms(sum.TTFT.P99), fms(sum.E2E.P99),
			fpct(hitRate), fmt.Sprint(perWorker), fmt.Sprintf("%.2f", imbalance), strconv.Itoa(sum.Failed + sum.Dropped)})
	}
	s.note("cache hit rate = prompt tokens served from the engines' prefix caches / prompt tokens, whole run (warmup included); requests per worker from the engines' counters")
	return s.res, nil
}

func maxOverMean(v []int) float64 {
	if len(v) == 0 {
		return 0
	}
	sum := 0
	for _, x := range v {
		sum += x
	}
	if sum == 0 {
		return 0
	}
	return float64(slices.Max(v)) / (float64(sum) / float64(len(v)))
}
