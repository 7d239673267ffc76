package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicegw/sluice/internal/sim"
)

// The decode-bound scenario of issue #21: when decode is the bottleneck, every prefill finishes fast,
// prefill admission never triggers, and the backlog hides inside the decode engine. Per protocol
// (SGLang bootstrap, vLLM NIXL), 2 fast prefill engines and 1 decode engine with a running window of 8
// serve three phases, each on a fresh cluster and gateway, with the decode gate off and on.

const (
	dbPrefill      = 2
	dbWindow       = 8
	dbPrompt       = 256
	dbOutput       = 128
	dbLongPrompt   = 4096 // the prefill-bound phase
	dbShortOutput  = 16
	dbSLO          = 2 * time.Second
	dbAdmission    = "--prefill-max-inflight-requests-per-worker 4 --prefill-queue-size 32 --prefill-queue-timeout-secs 5"
	dbGateFlagsDef = "--decode-max-inflight-requests-per-worker 9 --prefill-queue-size 12 --prefill-queue-timeout-secs 1.5"
)

// DefaultDecodeGateFlags are the gateway flags of the scenario's "on" runs, added after the admission
// flags (so a repeated flag overrides them): a decode seat per request of the window plus one (a seat is
// held from the pair's choice, so while a seated request prefills and transfers its KV the engine has a
// free place; the extra seat fills it: measured, 8 seats left goodput at 44.8%, 9 gave 45.8-46.1% with the
// engine's waiting queue at most 1), and a queue sized
// to the SLO (12 waiters drain in about 12 / 7.2 req/s ≈ 1.7 s; a wait longer than 1.5 s leaves no room
// for the prefill and first token inside the 2 s SLO, so it is a 429 instead: measured, a 2 s timeout
// put the admitted TTFT p99 at 2.03 s).
func DefaultDecodeGateFlags() []string { return strings.Fields(dbGateFlagsDef) }

// decodeCapacity is the requests per second one decode engine with a full running window of window
// sequences finishes: the first output token comes from the prefill, each further one takes
// ITLBase + ITLPerSeq x window (the simulator's model, sim package doc).
func decodeCapacity(eng sim.Config, window, output int) (perSec float64, itl time.Duration) {
	itl = eng.ITLBase + time.Duration(window)*eng.ITLPerSeq
	return float64(window) / (float64(output-1) * itl.Seconds()), itl
}

// dbPhase is one load shape of the scenario.
type dbPhase struct {
	name           string
	desc           string
	rate           float64
	prompt, output int
}

// dbCounts are what a run's engines and gateway counted.
type dbCounts struct {
	bootstrapTimeouts int64 // decode waits whose KV never came, prefills whose decode never connected
	maxDecodeWaiting  int   // largest waiting queue the decode engine reported during the run
}

// ScenarioDecodeBound runs the decode-bound scenario (see the constants above).
func ScenarioDecodeBound(ctx context.Context, o ScenarioOptions) (*ScenarioResult, error) {
	s := newScenarioRun("decode-bound", o)
	eng := sim.DefaultConfig()
	capacity, itl := decodeCapacity(eng, dbWindow, dbOutput)
	prefillCap := dbPrefill * eng.PrefillTokensPerSec / dbLongPrompt
	_, itlShort := decodeCapacity(eng, dbWindow, dbShortOutput)
	dur := 40 * time.Second
	if o.Short {
		dur = 3 * time.Second
	}
	phases := []dbPhase{
		{"decode-2x", "decode-bound, 2x the decode's capacity", 2 * capacity, dbPrompt, dbOutput},
		{"prefill-2x", "prefill-bound, 2x the prefill's capacity", 2 * prefillCap, dbLongPrompt, dbShortOutput},
		{"decode-0.7x", "0.7x the decode's capacity", 0.7 * capacity, dbPrompt, dbOutput},
	}
	gate := o.DecodeGateFlags
	if gate == nil {
		gate = DefaultDecodeGateFlags()
	}
	s.res.Measurements["decode_capacity_req_per_sec"] = round3(capacity)
	s.res.Measurements["prefill_capacity_long_req_per_sec"] = round3(prefillCap)
	s.note("decode capacity from the model: a window of %d sequences, inter-token latency %s + %d x %s = %s, %d output tokens of which the prefill makes the first: %d / (%d x %s) = %.2f req/s",
		dbWindow, eng.ITLBase, dbWindow, eng.ITLPerSeq, itl, dbOutput, dbWindow, dbOutput-1, itl, capacity)
	s.note("prefill capacity in the prefill-bound phase: %d engines x %.0f tokens/s / %d-token prompts = %.2f req/s (decode then needs %d x %s per request: not the bottleneck)",
		dbPrefill, eng.PrefillTokensPerSec, dbLongPrompt, prefillCap, dbShortOutput-1, itlShort)
	s.note("each run: a fresh cluster (%d prefill engines, 1 decode engine with --max-running-requests %d) and gateway; streaming chats, open loop for %s, TTFT SLO %s; admission %q; feature on adds %q",
		dbPrefill, dbWindow, dur, dbSLO, dbAdmission, strings.Join(gate, " "))
	s.res.Table = [][]string{{"protocol", "phase", "decode gate", "offered req/s", "served", "TTFT p50 ms", "TTFT p99 ms", "goodput",
		"429s by code", "5xx", "bootstrap timeouts", "max decode waiting", "req/s", "output tok/s"}}
	plots := map[string][]*Result{}
	for _, proto := range []sim.Protocol{sim.ProtocolSGLang, sim.ProtocolVLLM} {
		for _, ph := range phases {
			for _, on := range []bool{false, true} {
				variant := "off"
				flags := strings.Fields(dbAdmission)
				if on {
					variant, flags = "on", append(flags, gate...)
				}
				label := string(proto) + "-" + ph.name + "-" + variant
				res, counts, err := s.decodeBoundRun(ctx, label, proto, ph, dur, flags)
				if err != nil {
					if ctx.Err() != nil {
						return s.res, err
					}
					// A gateway without the gate's flags: the "on" runs fail cleanly, the others go on.
					s.note("%s: not run: %v", label, err)
					s.res.Table = append(s.res.Table, []string{string(proto), ph.name, variant, fmt.Sprintf("%.1f", ph.rate), "not run", "", "", "", "", "", "", "", "", ""})
					continue
				}
				sum := res.Summary
				codes := map[string]int{}
				for code, n := range sum.ErrorsByCode {
					if strings.HasPrefix(code, "pd_") {
						codes[code] = n
					}
				}
				fivexx := 0
				for st, n := range sum.ErrorsByStatus {
					if strings.HasPrefix(st, "5") {
						fivexx += n
					}
				}
				s.res.Runs[len(s.res.Runs)-1].Extra = map[string]any{"protocol": string(proto), "phase": ph.name, "gate": variant,
					"rejections": codes, "5xx": fivexx, "bootstrap_timeouts": counts.bootstrapTimeouts, "max_decode_waiting": counts.maxDecodeWaiting}
				s.res.Table = append(s.res.Table, []string{string(proto), ph.name, variant, fmt.Sprintf("%.1f", ph.rate),
					fmt.Sprintf("%d of %d", sum.Succeeded, sum.Requests), fms(sum.TTFT.P50), fms(sum.TTFT.P99), fpct(sum.Goodput),
					countsOrNone(codes), strconv.Itoa(fivexx), strconv.FormatInt(counts.bootstrapTimeouts, 10),
					strconv.Itoa(counts.maxDecodeWaiting), fmt.Sprintf("%.2f", sum.RequestsPerSec), fmt.Sprintf("%.0f", sum.OutputTokensPerSec)})
				key := string(proto) + "_" + ph.name + "_" + variant
				s.res.Measurements["goodput_"+key] = round3(sum.Goodput)
				s.res.Measurements["ttft_p99_ms_"+key] = sum.TTFT.P99
				s.res.Measurements["req_per_sec_"+key] = sum.RequestsPerSec
				plots[ph.name] = append(plots[ph.name], res)
			}
		}
	}
	for _, ph := range phases {
		s.plot("decode-bound-"+ph.name+"-ttft.svg", plots[ph.name])
	}
	s.note("goodput = share of all requests served with TTFT <= %s; 429s by code are the gateway's admission rejections; bootstrap timeouts are the engines' (SGLang: a decode's KV that never came, a prefill whose decode never pre-allocated; vLLM NIXL has none: its prefill answers at once); max decode waiting is the decode engine's own reported waiting queue (SGLang /v1/loads num_waiting_reqs, vLLM vllm:num_requests_waiting), sampled each second", dbSLO)
	return s.res, nil
}

// decodeBoundRun starts the cluster and the gateway of one run, runs the load and counts what the
// engines saw. An error before the load (the gateway refusing its flags) is returned as is.
func (s *scenarioRun) decodeBoundRun(ctx context.Context, label string, proto sim.Protocol, ph dbPhase, dur time.Duration, flags []string) (*Result, dbCounts, error) {
	var counts dbCounts
	pc, err := sim.StartCluster(ctx, sim.ClusterConfig{Prefill: dbPrefill, Protocol: proto, Mode: sim.ModeRealistic, Logger: s.o.Logger})
	if err != nil {
		return nil, counts, err
	}
	defer pc.Close()
	dc, err := sim.StartCluster(ctx, sim.ClusterConfig{Decode: 1, Protocol: proto, Mode: sim.ModeRealistic, Logger: s.o.Logger,
		Engine: sim.Config{MaxRunningRequests: dbWindow}})
	if err != nil {
		return nil, counts, err
	}
	defer dc.Close()
	args := []string{"--pd-disaggregation", "--disable-health-check"}
	for _, e := range pc.ByRole(sim.RolePrefill) {
		args = append(args, "--prefill", e.URL())
		if p := e.BootstrapPort(); p > 0 {
			args = append(args, strconv.Itoa(p))
		}
	}
	decode := dc.ByRole(sim.RoleDecode)[0]
	args = append(append(args, "--decode", decode.URL()), flags...)
	g, err := startGatewayInProcess(ctx, args, s.o.Logger)
	if err != nil {
		return nil, counts, err
	}
	defer func() { _ = g.close() }()
	var mu sync.Mutex
	observe := func(time.Duration) {
		st := decode.Stats()
		mu.Lock()
		counts.maxDecodeWaiting = max(counts.maxDecodeWaiting, st.Queued+st.PreallocQueue)
		mu.Unlock()
	}
	cfg := Config{URL: g.url, Model: "sim-model", Rate: ph.rate, Duration: dur, Stream: true, Seed: 61, SLOTTFT: dbSLO,
		Workload: WorkloadConfig{Kind: WorkloadFixed, PromptTokens: ph.prompt, MaxTokens: ph.output}}
	res, err := s.load(ctx, label, cfg, observe, nil)
	if err != nil {
		return nil, counts, fmt.Errorf("load: %w", err)
	}
	for _, e := range slices.Concat(pc.Engines, dc.Engines) {
		st := e.Stats()
		counts.bootstrapTimeouts += st.BootstrapTimeouts + st.HandshakeTimeouts
	}
	// The largest queue between samples: the engine's own high-water mark.
	counts.maxDecodeWaiting = max(counts.maxDecodeWaiting, decode.Stats().MaxQueueDepth)
	return res, counts, nil
}

func countsOrNone(m map[string]int) string {
	if len(m) == 0 {
		return "0"
	}
	return countsString(m)
}
