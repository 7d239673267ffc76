package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicegw/sluice/internal/sim"
)

// ScenarioDP measures rank-aware placement on a data-parallel-attention fleet: 2 SGLang prefill
// engines x 4 ranks (each rank its own prefix cache) and 2 decode engines, shared-prefix multi-turn
// conversations, cache_aware placement. "rank-aware" is the default: placement picks a (worker,
// rank) and the legs carry rank hints. "rank-blind" (--dp-aware=false) picks only the engine and lets
// SGLang place by bootstrap_room % dp_size, which scatters a conversation's turns over the ranks.
func ScenarioDP(ctx context.Context, o ScenarioOptions) (*ScenarioResult, error) {
	s := newScenarioRun("dp", o)
	wl := WorkloadConfig{Kind: WorkloadPrefix, Prefixes: 16, PrefixTokens: 1024, PromptTokens: 64, MaxTokens: 32, Turns: 4, Conversations: 64}
	const prefillEngines, ranks, cacheTokens = 2, 4, 4 * 8192 // 8,192 cached tokens per rank
	rate, dur, warm := 16.0, 60*time.Second, 5*time.Second
	if o.Short {
		dur, warm = 2*time.Second, 0
	}
	s.note("%d prefill engines x %d data-parallel ranks (prefix cache %d tokens per rank), 2 decode engines, SGLang PD, cache_aware; %d system prompts x %d tokens, %d conversations x %d turns, user turn %d tokens, max_tokens %d; %.0f req/s for %s after %s warmup, streaming",
		prefillEngines, ranks, cacheTokens/ranks, wl.Prefixes, wl.PrefixTokens, wl.Conversations, wl.Turns, wl.PromptTokens, wl.MaxTokens, rate, dur, warm)
	s.res.Table = [][]string{{"placement", "served", "TTFT p50 ms", "TTFT p99 ms", "prefill cache hit rate", "requests per rank", "errors"}}
	for _, v := range []struct {
		name  string
		flags []string
	}{{"rank-aware", nil}, {"rank-blind", []string{"--dp-aware=false"}}} {
		pc, err := sim.StartCluster(ctx, sim.ClusterConfig{Prefill: prefillEngines, Protocol: sim.ProtocolSGLang, Mode: sim.ModeRealistic,
			Engine: sim.Config{DPSize: ranks, PrefixCacheTokens: cacheTokens}, Logger: o.Logger})
		if err != nil {
			return s.res, err
		}
		dc, err := sim.StartCluster(ctx, sim.ClusterConfig{Decode: 2, Protocol: sim.ProtocolSGLang, Mode: sim.ModeRealistic, Logger: o.Logger})
		if err != nil {
			pc.Close()
			return s.res, err
		}
		flags := []string{"--pd-disaggregation", "--disable-health-check", "--policy", "cache_aware", "--disable-retries"}
		for _, e := range pc.Engines {
			flags = append(flags, "--prefill", e.URL(), strconv.Itoa(e.BootstrapPort()))
		}
		for _, e := range dc.Engines {
			flags = append(flags, "--decode", e.URL())
		}
		g, err := startGatewayInProcess(ctx, append(flags, v.flags...), o.Logger)
		if err != nil {
			pc.Close()
			dc.Close()
			return s.res, err
		}
		cfg := Config{URL: g.url, Model: "sim-model", Rate: rate, Duration: dur, Warmup: warm, Stream: true, Seed: 11, Workload: wl}
		res, err := s.load(ctx, v.name, cfg, nil, nil)
		var hit, prompt int64
		var perRank []int
		var conflicts int64
		for _, e := range pc.Engines {
			st := e.Stats()
			conflicts += st.RankConflicts
			for _, r := range st.Ranks {
				hit += r.PrefixCacheHitTokens
				prompt += r.PromptTokens
				perRank = append(perRank, int(r.Requests))
			}
		}
		_ = g.close()
		pc.Close()
		dc.Close()
		if err != nil {
			return s.res, err
		}
		hitRate := float64(hit) / float64(max(prompt, 1))
		s.res.Runs[len(s.res.Runs)-1].Extra = map[string]any{"cache_hit_rate": round3(hitRate), "rank_requests": perRank,
			"prompt_tokens": prompt, "cache_hit_tokens": hit, "rank_conflicts": conflicts}
		sum := res.Summary
		s.res.Table = append(s.res.Table, []string{v.name, strconv.Itoa(sum.Succeeded), fms(sum.TTFT.P50), fms(sum.TTFT.P99),
			fpct(hitRate), fmt.Sprint(perRank), strconv.Itoa(sum.Failed + sum.Dropped)})
	}
	s.note("cache hit rate = prompt tokens the prefill ranks served from their prefix caches / prompt tokens, whole run (warmup included), from the simulator's per-rank counters")
	return s.res, nil
}
