package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicegw/sluice/internal/sim"
	"github.com/sluicegw/sluice/internal/worker"
)

// The topology scenario of issue #37: does pairing a decode with a close prefill pay off when a KV
// transfer across racks or zones costs what it does on real fabrics, and does the gateway keep its
// promises under load (pairs by distance, read from its own sluice_pd_pairs_total)? A realistic SGLang
// PD fleet over two zones, per zone 2 prefill and 2 decode engines placed so that every distance
// occurs (topoPlaces); the simulated decode engines wait the transfer delay of the level they differ
// at from their prefill. Four gateway variants on fresh engines, the same seeded Poisson requests:
// penalties 0 (blind: the topology is known, for the metric, but weighs nothing), the default
// penalties, the default penalties with --pd-topology-forbid zone, and that rule with penalties 0 (the
// rule alone: were it not honoured, pairs would cross zones as blind's do).
//
// Transfer delays (assumptions, stated in the result): the KV of one 2,048-token prompt of a
// Llama-3.1-8B-class model in bf16 is 2 (K, V) x 32 layers x 8 KV heads x 128 dims x 2 bytes = 128 KiB
// per token, 256 MiB per prompt. Moved by RDMA at 400 Gb/s within a rack (one ConnectX-7 per GPU,
// ~5 ms), through a spine that leaves ~100 Gb/s per flow between racks (~21 ms), and over TCP between
// zones at ~10 Gb/s per connection plus a round trip (~216 ms; no RDMA between availability zones).
// Within a node (NVLink) the simulator adds nothing. Prompts are all 2,048 tokens, so one delay per
// level is right for every request.

const (
	topoPromptTokens = 2048
	topoMaxTokens    = 64
	topoSeed         = 37
	topoRackDelay    = 5 * time.Millisecond
	topoZoneDelay    = 21 * time.Millisecond
	topoCrossDelay   = 216 * time.Millisecond
	topoPrefill      = 4 // 2 per zone
	topoDecode       = 4
	// topoPolicy balances load without cache affinity, on both legs: the prompts are unique, and
	// cache_aware's pick among equally loaded decode partners follows its prefix tree, not their place
	// or load (two short runs of the blind variant under it crossed zones in 52% and 0% of pairs).
	topoPolicy = "power_of_two"
)

// topoPlaces are the engines' places, in the cluster's order (prefill 0-3, decode 0-3). Per zone:
// prefill P0 shares a node with decode D0 and a rack with D1; prefill P1 is on another rack. So P0's
// closest partner is on its node, P1's in its zone, and every pair across the zones crosses them.
var topoPlaces = []sim.Topology{
	{Zone: "a", Rack: "a1", Node: "a1n1"}, {Zone: "a", Rack: "a2", Node: "a2n1"},
	{Zone: "b", Rack: "b1", Node: "b1n1"}, {Zone: "b", Rack: "b2", Node: "b2n1"},
	{Zone: "a", Rack: "a1", Node: "a1n1"}, {Zone: "a", Rack: "a1", Node: "a1n2"},
	{Zone: "b", Rack: "b1", Node: "b1n1"}, {Zone: "b", Rack: "b1", Node: "b1n2"},
}

// topoVariant is one gateway configuration of the scenario.
type topoVariant struct {
	name, desc string
	flags      []string
}

var topoVariants = []topoVariant{
	{"blind", "penalty 0 at every level (--pd-topology-penalty rack=0,zone=0,cross_zone=0)", []string{"--pd-topology-penalty", "rack=0,zone=0,cross_zone=0"}},
	{"penalties", "the default penalties (rack=2,zone=8,cross_zone=32 in-flight requests)", nil},
	{"forbid-zone", "the default penalties and --pd-topology-forbid zone", []string{"--pd-topology-forbid", "zone"}},
	{"forbid-zone-only", "penalty 0 and --pd-topology-forbid zone: only the rule keeps pairs in their zone",
		[]string{"--pd-topology-penalty", "rack=0,zone=0,cross_zone=0", "--pd-topology-forbid", "zone"}},
}

// topoForbidding are the variants that forbid pairs across zones.
var topoForbidding = []string{"forbid-zone", "forbid-zone-only"}

// topoDistances are the distances reported, closest first (worker.Distance's names).
var topoDistances = []string{
	worker.DistanceNode.String(), worker.DistanceRack.String(), worker.DistanceZone.String(),
	worker.DistanceCrossZone.String(), worker.DistanceUnknown.String(),
}

// topoLoads are the offered loads as fractions of the fleet's prefill capacity (the short form runs
// the first only).
func topoLoads(short bool) []float64 {
	if short {
		return []float64{0.5}
	}
	return []float64{0.5, 0.85}
}

// ScenarioTopology runs the topology scenario (see the constants above).
func ScenarioTopology(ctx context.Context, o ScenarioOptions) (*ScenarioResult, error) {
	s := newScenarioRun("topology", o)
	eng := sim.DefaultConfig()
	capacity := topoPrefill * eng.PrefillTokensPerSec / topoPromptTokens
	dur, warm := 60*time.Second, 10*time.Second
	if o.Short {
		dur, warm = 3*time.Second, 0
	}
	s.res.Measurements["prefill_capacity_req_per_sec"] = round3(capacity)
	s.topoSetupNotes(capacity, dur, warm)
	head := []string{"load", "variant", "served", "TTFT p50 ms", "TTFT p90 ms", "TTFT p99 ms", "TTFT mean ms", "req/s"}
	for _, d := range topoDistances {
		head = append(head, "pairs "+d)
	}
	s.res.Table = [][]string{append(head, "cross-zone share", "delayed transfers (engines)", "errors")}
	for _, load := range topoLoads(o.Short) {
		rate := load * capacity
		var plotted []*Result
		for _, v := range topoVariants {
			res, err := s.topoVariantRun(ctx, v, load, rate, dur, warm)
			if err != nil {
				return s.res, fmt.Errorf("%s at %.2fx: %w", v.name, load, err)
			}
			plotted = append(plotted, res)
		}
		s.plot(fmt.Sprintf("topology-%gx-ttft.svg", load), plotted)
		s.topoChecks(load)
	}
	return s.res, nil
}

// topoSetupNotes states the fleet, the delays and where they come from, and the load.
func (s *scenarioRun) topoSetupNotes(capacity float64, dur, warm time.Duration) {
	var places []string
	for i, p := range topoPlaces {
		role := "P"
		if i >= topoPrefill {
			role, i = "D", i-topoPrefill
		}
		places = append(places, fmt.Sprintf("%s%d %s/%s/%s", role, i, p.Zone, p.Rack, p.Node))
	}
	s.note("fleet: realistic SGLang simulators, %d prefill + %d decode over two zones (zone/rack/node): %s; the gateway is told the same places (--worker-topology); prefill and decode policy %s (load only: the prompts are unique, and cache_aware's pick among equally loaded decodes follows its prefix tree, which made blind's cross-zone share swing between 0 and 52%% in two short runs)",
		topoPrefill, topoDecode, strings.Join(places, ", "), topoPolicy)
	s.note("KV-transfer delay a decode engine adds for its prefill's level (assumed): same node 0 (NVLink), same rack %s, same zone %s, across zones %s: a %d-token prompt's KV of a Llama-3.1-8B-class model in bf16 is 128 KiB/token = 256 MiB, at 400 Gb/s RDMA within a rack, ~100 Gb/s per flow through the spine between racks, ~10 Gb/s TCP per connection plus a round trip between zones. The simulator does not model links shared by concurrent transfers, which would make the far levels slower still",
		topoRackDelay, topoZoneDelay, topoCrossDelay, topoPromptTokens)
	s.note("load: open-loop Poisson, %d-token unique prompts, max_tokens %d, streaming chats, at fractions of the prefill capacity %d x %.0f tokens/s / %d = %.2f req/s, for %s after %s warm-up; the same seeded requests (seed %d) for every variant, fresh engines and gateway per run",
		topoPromptTokens, topoMaxTokens, topoPrefill, sim.DefaultConfig().PrefillTokensPerSec, topoPromptTokens, capacity, dur, warm, topoSeed)
	s.note("pairs by distance are the gateway's own sluice_pd_pairs_total, scraped from its /metrics after the run (warm-up included); delayed transfers are the decode engines' own count of KV transfers that paid a delay (every pair not on one node), a cross-check of the metric")
}

// topoVariantRun runs one variant at one load on a fresh fleet and gateway and adds its row.
func (s *scenarioRun) topoVariantRun(ctx context.Context, v topoVariant, load, rate float64, dur, warm time.Duration) (*Result, error) {
	cc := sim.ClusterConfig{Prefill: topoPrefill, Decode: topoDecode, Protocol: sim.ProtocolSGLang, Mode: sim.ModeRealistic,
		Topologies: topoPlaces, Logger: s.o.Logger,
		Engine: sim.Config{TransferDelays: sim.TransferDelays{Rack: topoRackDelay, Zone: topoZoneDelay, CrossZone: topoCrossDelay}}}
	c, err := sim.StartCluster(ctx, cc)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	flags := append(pdFlags(c), "--policy", topoPolicy)
	for i, e := range c.Engines {
		p := topoPlaces[i]
		flags = append(flags, "--worker-topology", fmt.Sprintf("%s=zone=%s,rack=%s,node=%s", e.URL(), p.Zone, p.Rack, p.Node))
	}
	g, err := startGatewayInProcess(ctx, append(flags, v.flags...), s.o.Logger)
	if err != nil {
		return nil, err
	}
	defer func() { _ = g.close() }()
	label := fmt.Sprintf("%s-%gx", v.name, load)
	cfg := Config{URL: g.url, Model: "sim-model", Rate: rate, Duration: dur, Warmup: warm, Stream: true, Seed: topoSeed,
		Workload: WorkloadConfig{Kind: WorkloadFixed, PromptTokens: topoPromptTokens, MaxTokens: topoMaxTokens}}
	res, err := s.load(ctx, label, cfg, nil, nil)
	if err != nil {
		return nil, err
	}
	pairs, err := scrapePairs(ctx, g.url+"/metrics")
	if err != nil {
		return nil, fmt.Errorf("%s: gateway metrics: %w", label, err)
	}
	var delayed int64
	for _, e := range c.ByRole(sim.RoleDecode) {
		delayed += e.Stats().RemoteTransfers
	}
	s.topoRow(v, load, rate, res.Summary, pairs, delayed)
	return res, nil
}

// topoRow adds one run's row and measurements.
func (s *scenarioRun) topoRow(v topoVariant, load, rate float64, sum Summary, pairs map[string]int64, delayed int64) {
	total := int64(0)
	row := []string{fmt.Sprintf("%.2fx (%.1f req/s)", load, rate), v.name, strconv.Itoa(sum.Succeeded), fms(sum.TTFT.P50), fms(sum.TTFT.P90),
		fms(sum.TTFT.P99), fms(sum.TTFT.Mean), fmt.Sprintf("%.2f", sum.RequestsPerSec)}
	for _, d := range topoDistances {
		row = append(row, strconv.FormatInt(pairs[d], 10))
		total += pairs[d]
	}
	share := float64(pairs[worker.DistanceCrossZone.String()]) / float64(max(total, 1))
	row = append(row, fpct(share), strconv.FormatInt(delayed, 10), strconv.Itoa(sum.Failed+sum.Dropped))
	s.res.Table = append(s.res.Table, row)
	s.res.Runs[len(s.res.Runs)-1].Extra = map[string]any{"variant": v.name, "load": load, "pairs": pairs, "delayed_transfers": delayed}
	key := fmt.Sprintf("%s_%gx_", v.name, load)
	s.res.Measurements[key+"ttft_p50_ms"] = sum.TTFT.P50
	s.res.Measurements[key+"ttft_p99_ms"] = sum.TTFT.P99
	s.res.Measurements[key+"ttft_mean_ms"] = sum.TTFT.Mean
	s.res.Measurements[key+"req_per_sec"] = sum.RequestsPerSec
	s.res.Measurements[key+"pairs"] = pairs
	s.res.Measurements[key+"cross_zone_share"] = round3(share)
}

// topoMaxPenaltyCrossShare is what "rare" means for cross-zone pairs under the default penalties: a
// pair leaves its zone only when every decode there carries 32 more requests than one in the other.
const topoMaxPenaltyCrossShare = 0.01

// topoChecks states, for one load, the promises the gateway must keep: no pair across zones when
// they are forbidden, few with the default penalties; and what pairing by topology did to TTFT.
func (s *scenarioRun) topoChecks(load float64) {
	m := s.res.Measurements
	key := func(v, what string) string { return fmt.Sprintf("%s_%gx_%s", v, load, what) }
	pairs := func(v string) map[string]int64 { p, _ := m[key(v, "pairs")].(map[string]int64); return p }
	cross := worker.DistanceCrossZone.String()
	verdict := func(ok bool) string {
		if ok {
			return "held"
		}
		return "VIOLATED"
	}
	for _, v := range topoForbidding {
		n := pairs(v)[cross]
		m[fmt.Sprintf("%s_cross_zone_pairs_%gx", v, load)] = n
		s.note("%.2fx: %s: %d cross-zone pairs (must be 0): %s", load, v, n, verdict(n == 0))
	}
	penShare, _ := m[key("penalties", "cross_zone_share")].(float64)
	s.note("%.2fx: default penalties: %.1f%% of pairs cross zones (rare: at most %.0f%%): %s",
		load, 100*penShare, 100*topoMaxPenaltyCrossShare, verdict(penShare <= topoMaxPenaltyCrossShare))
	ttft := func(v, q string) float64 { f, _ := m[key(v, "ttft_"+q+"_ms")].(float64); return f }
	for _, v := range topoVariants[1:] {
		var parts []string
		for _, q := range []string{"p50", "p99", "mean"} {
			b, x := ttft("blind", q), ttft(v.name, q)
			parts = append(parts, fmt.Sprintf("%s %.0f vs %.0f ms (%+.1f%%)", q, x, b, 100*(x/max(b, 1e-9)-1)))
		}
		s.note("%.2fx: %s against blind: TTFT %s", load, v.name, strings.Join(parts, ", "))
	}
}

// scrapePairs reads sluice_pd_pairs_total from a gateway's /metrics: pairs formed by distance, summed
// over revisions.
func scrapePairs(ctx context.Context, url string) (map[string]int64, error) {
	hc := &http.Client{Transport: NewTransport(1), Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return parsePairs(bufio.NewScanner(resp.Body))
}

// parsePairs parses the sluice_pd_pairs_total samples of a Prometheus text exposition.
func parsePairs(sc *bufio.Scanner) (map[string]int64, error) {
	const name = "sluice_pd_pairs_total{"
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	out, seen := map[string]int64{}, false
	for sc.Scan() {
		labels, ok := strings.CutPrefix(sc.Text(), name)
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(labels, "} ")
		_, dist, found := strings.Cut(labels, `distance="`)
		dist, _, closed := strings.Cut(dist, `"`)
		n, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if !ok || !found || !closed || err != nil {
			return nil, fmt.Errorf("bad sample %q", sc.Text())
		}
		out[dist] += int64(n)
		seen = true
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !seen {
		return nil, errors.New("no sluice_pd_pairs_total samples")
	}
	return out, nil
}
