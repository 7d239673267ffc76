package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicegw/sluice/internal/sim"
)

// ScenarioReplicas compares ways to run three gateway replicas in front of one 2+2 PD cluster when the
// traffic is skewed (80% of it on one replica, 10% on each other): every replica enforcing the limit N on
// its own, every replica enforcing N/3 (the manual split), and the fleet sharing N through cluster
// admission (--admission-peers). One gateway with limit N taking all the traffic is the reference. Each
// variant runs the same closed-loop load (throughput at saturation) and the same open-loop load (goodput
// and TTFT below capacity) on fresh engines, one after the other in this process, and reports the engines'
// own peak of concurrent prefills.
func ScenarioReplicas(ctx context.Context, o ScenarioOptions) (*ScenarioResult, error) {
	s := newScenarioRun("replicas", o)
	const limit, promptTokens, maxTokens, prefillEngines = 6, 1024, 16, 2
	eng := sim.DefaultConfig()
	capacity := prefillEngines * eng.PrefillTokensPerSec / promptTokens
	rate := 0.8 * capacity
	clients := 30
	dur, warm, slo := 20*time.Second, 2*time.Second, 2*time.Second
	if o.Short {
		dur, warm = 3*time.Second, 0
	}
	s.res.Measurements["limit_per_worker"] = limit
	s.res.Measurements["capacity_req_per_sec"] = round3(capacity)
	s.note("2 prefill + 2 decode realistic SGLang engines (prefill %.0f tokens/s, one prompt of %d tokens: ~%.0f ms); limit N = %d per prefill worker; closed loop: %d clients for %s (after %s warmup); open loop: %.1f req/s (0.8 x the prefill capacity %.1f req/s) for %s, streaming, max_tokens %d, TTFT SLO %s; traffic split 80/10/10 over three replicas",
		eng.PrefillTokensPerSec, promptTokens, 1000*float64(promptTokens)/eng.PrefillTokensPerSec, limit, clients, dur, warm, rate, capacity, dur, maxTokens, slo)

	variants := []replicaVariant{
		{"one", "one gateway, limit N", 1, limit, nil},
		{"each-n", "3 replicas, each limit N", 3, limit, nil},
		{"split", "3 replicas, each limit N/3", 3, max(limit/3, 1), nil},
		{"cluster", "3 replicas, cluster admission N", 3, limit, []string{}},
		{"cluster-fast", "3 replicas, cluster admission N, exchange 0.1 s", 3, limit,
			[]string{"--admission-exchange-period-secs", "0.1", "--admission-lease-secs", "1"}},
	}
	s.res.Table = [][]string{{"variant", "engine peak (N=" + strconv.Itoa(limit) + ")", "closed loop req/s", "vs one gateway", "open loop goodput", "TTFT p50 ms", "TTFT p99 ms", "TTFT p99 ms, busy replica", "rejected", "load avg"}}
	var ref float64
	for _, v := range variants {
		row, tput, err := s.replicasVariant(ctx, v, clients, rate, dur, warm, slo,
			WorkloadConfig{Kind: WorkloadFixed, PromptTokens: promptTokens, MaxTokens: maxTokens})
		if err != nil {
			return s.res, err
		}
		if ref == 0 {
			ref = tput
		}
		row[3] = fmt.Sprintf("%.2f", tput/max(ref, 1e-9))
		s.res.Measurements[v.key+"_throughput_ratio"] = round3(tput / max(ref, 1e-9))
		s.res.Table = append(s.res.Table, row)
	}
	s.note("engine peak = the largest prefill_peak_concurrent of the prefill engines (/sim/stats: requests before their first token), sampled each second during both loads; vs one gateway = closed-loop successful req/s over the one-gateway variant's, same run")
	s.note("cluster admission with the default exchange period (0.25 s) and lease (2 s), and with 0.1 s / 1 s; the replicas talk over loopback; load avg = /proc/loadavg (1 min) at the end of the variant, on a 2-core machine shared with other jobs")
	return s.res, nil
}

// replicaVariant is one way to run the replicas: cluster is nil for per-replica limits, else the extra
// cluster admission flags (--admission-peers is added).
type replicaVariant struct {
	key, name       string
	replicas, limit int
	cluster         []string
}

// replicasVariant runs one variant on fresh engines and returns its table row and closed-loop throughput.
func (s *scenarioRun) replicasVariant(ctx context.Context, v replicaVariant, clients int, rate float64,
	dur, warm, slo time.Duration, wl WorkloadConfig) ([]string, float64, error) {
	c, err := sim.StartCluster(ctx, sim.ClusterConfig{Prefill: 2, Decode: 2, Mode: sim.ModeRealistic, Logger: s.o.Logger})
	if err != nil {
		return nil, 0, err
	}
	defer c.Close()
	gws, err := startReplicaGateways(ctx, c, v.replicas, v.limit, v.cluster, s.o)
	for _, g := range gws {
		defer g.close()
	}
	if err != nil {
		return nil, 0, err
	}
	var mu sync.Mutex
	peak := int64(0)
	observe := func(time.Duration) {
		for _, e := range c.ByRole(sim.RolePrefill) {
			p := e.Stats().PrefillPeak
			mu.Lock()
			peak = max(peak, p)
			mu.Unlock()
		}
	}
	for _, e := range c.ByRole(sim.RolePrefill) {
		e.ResetStats()
	}
	split := func(total float64) []float64 {
		if len(gws) == 1 {
			return []float64{total}
		}
		return []float64{0.8 * total, 0.1 * total, 0.1 * total}
	}
	closed, err := s.splitLoad(ctx, v.key+"-closed", gws, func(i int) Config {
		n := max(int(split(float64(clients))[i]+0.5), 1)
		return Config{Model: "sim-model", Concurrency: n, Duration: dur, Warmup: warm, Stream: true, Seed: int64(7 + i), Workload: wl}
	}, observe, slo)
	if err != nil {
		return nil, 0, err
	}
	open, err := s.splitLoad(ctx, v.key+"-open", gws, func(i int) Config {
		return Config{Model: "sim-model", Rate: split(rate)[i], Duration: dur, Warmup: warm, Stream: true, Seed: int64(17 + i), SLOTTFT: slo, Workload: wl}
	}, observe, slo)
	if err != nil {
		return nil, 0, err
	}
	mu.Lock()
	p := peak
	mu.Unlock()
	if v.cluster != nil {
		ex := map[string]int64{}
		fallbacks, changes := 0, int64(0)
		for _, g := range gws {
			st := g.app.ClusterStatus()
			for k, n := range st.Exchanges {
				ex[k] += n
			}
			changes += st.CoordinatorChanges
			if st.Fallback {
				fallbacks++
			}
		}
		s.res.Measurements[v.key+"_exchanges"] = ex
		s.note("%s: exchanges by result %v, coordinator changes %d, replicas in fallback at the end %d", v.name, ex, changes, fallbacks)
	}
	rejected := 0
	for code, n := range open.all.ErrorsByCode {
		if strings.HasPrefix(code, "pd_prefill_queue_") {
			rejected += n
		}
	}
	for code, n := range closed.all.ErrorsByCode {
		if strings.HasPrefix(code, "pd_prefill_queue_") {
			rejected += n
		}
	}
	s.res.Measurements[v.key+"_engine_peak"] = p
	s.res.Measurements[v.key+"_closed_req_per_sec"] = round3(closed.all.RequestsPerSec)
	s.res.Measurements[v.key+"_open_goodput"] = round3(open.all.Goodput)
	row := []string{v.name, strconv.FormatInt(p, 10), fmt.Sprintf("%.2f", closed.all.RequestsPerSec), "", fpct(open.all.Goodput),
		fms(open.all.TTFT.P50), fms(open.all.TTFT.P99), fms(open.busy.TTFT.P99), strconv.Itoa(rejected), loadAvg()}
	return row, closed.all.RequestsPerSec, nil
}

type splitSummary struct{ all, busy Summary }

// splitLoad runs one load per gateway at once (cfg(i) for gateway i) and summarises them together, and the
// first (busy) gateway's alone.
func (s *scenarioRun) splitLoad(ctx context.Context, label string, gws []*gateway, cfg func(i int) Config, observe func(time.Duration), slo time.Duration) (splitSummary, error) {
	results := make([]*Result, len(gws))
	errs := make([]error, len(gws))
	var wg sync.WaitGroup
	for i, g := range gws {
		c := cfg(i)
		c.URL = g.url
		var obs func(time.Duration)
		if i == 0 {
			obs = observe
		}
		c.Label = label
		if len(gws) > 1 {
			c.Label = fmt.Sprintf("%s-r%d", label, i)
		}
		fmt.Fprintf(s.o.Log, "%s: run %s\n", s.res.Name, c.Label)
		wg.Go(func() {
			results[i], errs[i] = Run(ctx, c, Options{Progress: s.o.Progress, Observe: obs})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return splitSummary{}, fmt.Errorf("%s: %w", label, err)
	}
	for _, r := range results { // recorded one by one: the scenario's runs are not guarded
		if err := s.record(r.Label, r, nil); err != nil {
			return splitSummary{}, err
		}
	}
	var recs []Record
	dropped := 0
	for _, r := range results {
		recs = append(recs, r.Records...)
		dropped += r.Summary.Dropped
	}
	window := time.Duration(results[0].Summary.DurationSec * float64(time.Second))
	return splitSummary{all: Summarize(recs, dropped, window, slo), busy: results[0].Summary}, nil
}

// startReplicaGateways starts n in-process gateways over the cluster's engines; with cluster flags (even
// none) they share the limit through --admission-peers (fixed loopback ports) and are ready once every one
// follows the same coordinator and holds a grant.
func startReplicaGateways(ctx context.Context, c *sim.Cluster, n, limit int, cluster []string, o ScenarioOptions) ([]*gateway, error) {
	coordinate := cluster != nil
	base := append(pdFlags(c), "--policy", "power_of_two", "--disable-retries",
		"--prefill-max-inflight-requests-per-worker", strconv.Itoa(limit), "--prefill-queue-size", "256", "--prefill-queue-timeout-secs", "10")
	ports := make([]int, n)
	var peers []string
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
		peers = append(peers, "http://127.0.0.1:"+strconv.Itoa(p))
	}
	var gws []*gateway
	for _, p := range ports {
		flags := append(append([]string{}, base...), "--port", strconv.Itoa(p))
		if coordinate {
			flags = append(append(flags, "--admission-peers", strings.Join(peers, ",")), cluster...)
		}
		g, err := startGatewayInProcess(ctx, flags, o.Logger)
		if err != nil {
			return gws, err
		}
		gws = append(gws, g)
	}
	if !coordinate {
		return gws, nil
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		coord, ok := "", true
		for _, g := range gws {
			st := g.app.ClusterStatus()
			if st.Coordinator == "" || st.LeaseAge < 0 || st.Fallback || (coord != "" && st.Coordinator != coord) {
				ok = false
			}
			coord = st.Coordinator
		}
		if ok {
			return gws, nil
		}
		if time.Now().After(deadline) {
			return gws, errors.New("replicas: cluster admission did not converge within 20s")
		}
		select {
		case <-ctx.Done():
			return gws, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// loadAvg is the 1-minute load average, or "?".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "?"
}
