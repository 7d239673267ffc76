package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
)

// streamOnce sends one streamed chat request with a unique prompt of about words words and returns
// the worker that answered (X-Sluice-Worker).
func streamOnce(ctx context.Context, t *testing.T, url string, seq, words int) string {
	return streamHeader(ctx, t, url, seq, words).Get("X-Sluice-Worker")
}

// streamHeader is streamOnce returning the response's header.
func streamHeader(ctx context.Context, t *testing.T, url string, seq, words int) http.Header {
	t.Helper()
	prompt := fmt.Sprintf("request %d: %s", seq, strings.Repeat("lorem ipsum dolor sit amet ", words/5))
	body := fmt.Sprintf(`{"model":"sim-model","max_tokens":2,"stream":true,"messages":[{"role":"user","content":%q}]}`, prompt)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return http.Header{}
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("status %d, read error %v", resp.StatusCode, err)
	}
	return resp.Header
}

// loopbackHost skips the test when host (a loopback address other than 127.0.0.1) cannot be bound.
func loopbackHost(t *testing.T, host string) {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Skipf("loopback address %s unusable here: %v", host, err)
	}
	ln.Close()
}

// TestPredictedLatencyPrefersFasterEngine: two regular engines, one prefilling 80x faster than the
// other. With --policy predicted_latency the gateway learns each worker's TTFT from the streams it
// relays; after the cold start most traffic goes to the fast engine, and the prediction and its
// error are exported per worker. The requests go one at a time, so every pick sees two idle
// engines: least_load (the cold start's fallback) would send them all to the first candidate, the
// slow engine (its URL sorts first; engine load polling is off, so no stale report tips the tie),
// and only the learned models can tell the two apart.
func TestPredictedLatencyPrefersFasterEngine(t *testing.T) {
	t.Parallel()
	engine := func(host string, speed float64) *sim.Engine {
		loopbackHost(t, host)
		return startCluster(t, sim.ClusterConfig{Regular: 1, Protocol: sim.ProtocolSGLang,
			Engine: sim.Config{Host: host, PrefillTokensPerSec: speed, ITLBase: 1}}).Engines[0]
	}
	slow, fast := engine("127.0.0.1", 5000), engine("127.0.0.2", 400000)
	gw := startGateway(t, app.Options{}, "--policy", "predicted_latency", "--engine-load-interval-secs", "0",
		"--worker-urls", slow.URL(), fast.URL())
	run := func(n int) map[string]int {
		got := map[string]int{}
		for i := range n {
			got[streamOnce(t.Context(), t, gw.URL, i, 100+(i%7)*60)]++
		}
		return got
	}
	run(40) // warm-up: both cold models get their samples
	got := run(100)
	t.Logf("after warm-up: fast %d, slow %d", got[fast.URL()], got[slow.URL()])
	if got[fast.URL()] < 80 {
		t.Errorf("after warm-up the fast engine took %d of 100 requests (slow %d), want at least 80", got[fast.URL()], got[slow.URL()])
	}
	_, body := get(t, gw.URL+"/metrics")
	for _, want := range []string{
		fmt.Sprintf(`sluice_predicted_ttft_seconds_count{worker=%q}`, fast.URL()),
		fmt.Sprintf(`sluice_predicted_ttft_error_seconds_count{worker=%q}`, fast.URL()),
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestPredictedLatencyPDPrefill: in PD mode as the prefill policy, the model of each prefill worker
// learns the whole TTFT its pick led to (prefill, KV handoff, the decode's first token): after the
// cold start most prompts go to the faster of two prefill engines, and the prediction is exported
// under the prefill worker.
func TestPredictedLatencyPDPrefill(t *testing.T) {
	t.Parallel()
	loopbackHost(t, "127.0.0.2")
	prefill := func(host string, speed float64) *sim.Engine {
		return startCluster(t, sim.ClusterConfig{Prefill: 1, Protocol: sim.ProtocolSGLang,
			Engine: sim.Config{Host: host, PrefillTokensPerSec: speed, ITLBase: 1}}).Engines[0]
	}
	slow, fast := prefill("127.0.0.1", 5000), prefill("127.0.0.2", 400000)
	decode := startCluster(t, sim.ClusterConfig{Decode: 1, Protocol: sim.ProtocolSGLang, Engine: sim.Config{ITLBase: 1}}).Engines[0]
	gw := startGateway(t, app.Options{}, "--pd-disaggregation", "--prefill-policy", "predicted_latency", "--decode-policy", "round_robin",
		"--engine-load-interval-secs", "0", "--prefill", slow.URL(), strconv.Itoa(slow.BootstrapPort()),
		"--prefill", fast.URL(), strconv.Itoa(fast.BootstrapPort()), "--decode", decode.URL())
	got := map[string]int{}
	for i := range 140 {
		h := streamHeader(t.Context(), t, gw.URL, i, 100+(i%7)*60)
		if i >= 40 { // after the warm-up
			got[h.Get("X-Sluice-Prefill-Worker")]++
		}
	}
	t.Logf("after warm-up: fast %d, slow %d", got[fast.URL()], got[slow.URL()])
	if got[fast.URL()] < 80 {
		t.Errorf("after warm-up the fast prefill took %d of 100 requests (slow %d), want at least 80", got[fast.URL()], got[slow.URL()])
	}
	_, body := get(t, gw.URL+"/metrics")
	if want := fmt.Sprintf(`sluice_predicted_ttft_seconds_count{worker=%q}`, fast.URL()); !strings.Contains(string(body), want) {
		t.Errorf("/metrics lacks %s", want)
	}
}

// TestPredictedLatencyITLSLO: with --predicted-itl-slo-secs the gateway learns each engine's
// inter-token latency from the streams too, and prefers the engine predicted within the SLO even
// though the other reaches the first token sooner: the fast-prefill engine here decodes at 50 ms per
// token, over the 20 ms SLO, so most requests go to the slow-prefill engine that decodes in 1 ms.
func TestPredictedLatencyITLSLO(t *testing.T) {
	t.Parallel()
	loopbackHost(t, "127.0.0.2")
	engine := func(host string, speed float64, itl time.Duration) *sim.Engine {
		return startCluster(t, sim.ClusterConfig{Regular: 1, Protocol: sim.ProtocolSGLang,
			Engine: sim.Config{Host: host, PrefillTokensPerSec: speed, ITLBase: itl}}).Engines[0]
	}
	// The fast-prefill engine sorts first: least_load's ties (the cold start) go to it, so only the ITL
	// model can move the traffic.
	fastPrefill, fastDecode := engine("127.0.0.1", 400000, 50*time.Millisecond), engine("127.0.0.2", 5000, time.Millisecond)
	gw := startGateway(t, app.Options{}, "--policy", "predicted_latency", "--predicted-itl-slo-secs", "0.02",
		"--engine-load-interval-secs", "0", "--worker-urls", fastPrefill.URL(), fastDecode.URL())
	got := map[string]int{}
	for i := range 100 {
		w := streamOnce(t.Context(), t, gw.URL, i, 100+(i%7)*60)
		if i >= 40 { // after the warm-up
			got[w]++
		}
	}
	t.Logf("after warm-up: fast decode %d, fast prefill %d", got[fastDecode.URL()], got[fastPrefill.URL()])
	if got[fastDecode.URL()] < 48 {
		t.Errorf("after warm-up the engine within the ITL SLO took %d of 60 requests (the other %d), want at least 48",
			got[fastDecode.URL()], got[fastPrefill.URL()])
	}
}

// TestPredictedLatencyEarlyRejection: with --prefill-early-rejection, the TTFT predicted_latency
// predicts is part of the wait a client's X-Sluice-Deadline-Ms bounds. Once the slow prefill engine's
// model is warm, a long prompt it would take ~300 ms to prefill is refused at once (429
// pd_prefill_queue_timeout, counted as predicted_timeout) when its client gives it 30 ms, though a
// slot is free; with 30 s it is served. Admission alone would admit both: nothing waits.
func TestPredictedLatencyEarlyRejection(t *testing.T) {
	t.Parallel()
	prefill := startCluster(t, sim.ClusterConfig{Prefill: 1, Protocol: sim.ProtocolSGLang,
		Engine: sim.Config{PrefillTokensPerSec: 5000, ITLBase: 1}}).Engines[0]
	decode := startCluster(t, sim.ClusterConfig{Decode: 1, Protocol: sim.ProtocolSGLang, Engine: sim.Config{ITLBase: 1}}).Engines[0]
	gw := startGateway(t, app.Options{}, "--pd-disaggregation", "--prefill-policy", "predicted_latency", "--decode-policy", "round_robin",
		"--engine-load-interval-secs", "0", "--prefill-early-rejection", "--prefill-max-inflight-requests-per-worker", "4",
		"--prefill-queue-size", "8", "--prefill", prefill.URL(), strconv.Itoa(prefill.BootstrapPort()), "--decode", decode.URL())
	for i := range 30 { // warm-up: the model gets its samples, prompts of 100..460 words
		streamOnce(t.Context(), t, gw.URL, i, 100+(i%7)*60)
	}
	long := func(deadline string) *http.Response {
		prompt := "a long one: " + strings.Repeat("lorem ipsum dolor sit amet ", 240) // ~1,200 words
		body := fmt.Sprintf(`{"model":"sim-model","max_tokens":2,"messages":[{"role":"user","content":%q}]}`, prompt)
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Sluice-Deadline-Ms", deadline)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	if resp := long("30"); resp.StatusCode != http.StatusTooManyRequests {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("deadline 30 ms: %d %s, want 429", resp.StatusCode, b)
	} else if e := decodeError(t, resp); e.Error.Code != "pd_prefill_queue_timeout" {
		t.Errorf("deadline 30 ms: code %q, want pd_prefill_queue_timeout", e.Error.Code)
	}
	if resp := long("30000"); resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Errorf("deadline 30 s: %d %s, want 200", resp.StatusCode, b)
	}
	if rej := scrape(t, gw.URL, "sluice_pd_prefill_admission_rejections_total"); rej["queue=sim-model,reason=predicted_timeout"] != 1 {
		t.Errorf("rejections %v, want one predicted_timeout", rej)
	}
}

// TestPredictedLatencyScoresPDPairs: with predicted_latency as both PD policies the pair is scored as
// one. Each of two zones holds a prefill and a decode engine, all equally fast; a KV transfer across
// zones costs 60 ms. Three clients keep both prefill workers busy. Scored apart, each decode worker's own
// model sees same-zone and cross-zone partners alike and cannot tell which prefill it is paired with,
// so 12-27 of 100 pairs crossed zones in runs here (6 once); scored as a pair, the chosen prefill worker's model knows what
// a cross-zone partner adds and keeps the pair in its zone. Topology penalties are 0, so only the
// prediction decides; sluice_pd_pairs_total shows the pairs by distance. (The unit test
// TestPredictedLatencyScoresPairs checks the scoring itself without timing.)
func TestPredictedLatencyScoresPDPairs(t *testing.T) {
	t.Parallel()
	delays := sim.TransferDelays{CrossZone: 60 * time.Millisecond}
	c := startCluster(t, sim.ClusterConfig{Prefill: 2, Decode: 2, Protocol: sim.ProtocolSGLang,
		Topologies: []sim.Topology{{Zone: "a"}, {Zone: "b"}, {Zone: "a"}, {Zone: "b"}},
		Engine:     sim.Config{PrefillTokensPerSec: 20000, ITLBase: time.Millisecond, TransferDelays: delays}})
	args := append(topoArgs(c, map[int]string{0: "zone=a", 1: "zone=b", 2: "zone=a", 3: "zone=b"}), "--pd-disaggregation",
		"--prefill-policy", "predicted_latency", "--decode-policy", "predicted_latency",
		"--pd-topology-penalty", "rack=0,zone=0,cross_zone=0", "--engine-load-interval-secs", "0")
	gw := startGateway(t, app.Options{}, args...)
	run := func(n int) {
		var wg sync.WaitGroup
		for w := range 3 {
			wg.Go(func() {
				for i := w; i < n; i += 3 {
					streamHeader(t.Context(), t, gw.URL, i, 300)
				}
			})
		}
		wg.Wait()
	}
	run(80) // warm-up: every model gets its samples, pairs of both distances included
	before := scrape(t, gw.URL, "sluice_pd_pairs_total")
	run(100)
	after := scrape(t, gw.URL, "sluice_pd_pairs_total")
	cross := after["distance=cross_zone,revision="] - before["distance=cross_zone,revision="]
	inZone := after["distance=zone,revision="] - before["distance=zone,revision="]
	t.Logf("after warm-up: %v in zone, %v across zones", inZone, cross)
	if inZone+cross != 100 || cross > 10 {
		t.Errorf("after warm-up %v of %v pairs crossed zones, want at most 10", cross, inZone+cross)
	}
}
