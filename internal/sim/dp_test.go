package sim

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// postWith is post with extra request headers.
func postWith(t *testing.T, c *http.Client, url, body string, hdr http.Header) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// withFields adds top-level JSON fields (raw JSON values) to a JSON object body.
func withFields(body string, kv ...string) string {
	var b strings.Builder
	b.WriteString(strings.TrimSuffix(body, "}"))
	for i := 0; i+1 < len(kv); i += 2 {
		b.WriteString(`,"` + kv[i] + `":` + kv[i+1])
	}
	b.WriteString("}")
	return b.String()
}

// rankRequests is how many samples each rank of e has run.
func rankRequests(e *Engine) []int64 {
	st := e.Stats()
	out := make([]int64, len(st.Ranks))
	for i, r := range st.Ranks {
		out[i] = r.Requests
	}
	return out
}

func onlyRank(counts []int64, rank int) bool {
	for i, n := range counts {
		if (i == rank) != (n == 1) || n > 1 {
			return false
		}
	}
	return true
}

func TestDPRankChoice(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Mode: ModeInstant, DPSize: 4})
	c := testClient(t)
	const body = `{"model":"sim-model","messages":[{"role":"user","content":"which rank"}],"max_tokens":2}`
	hdr := func(v string) http.Header { return http.Header{"X-Data-Parallel-Rank": {v}} }
	tests := []struct {
		name     string
		path     string
		body     string
		hdr      http.Header
		wantRank int // -1: an error
		status   int
		wantMsg  string
		wantType string
	}{
		{name: "routed_dp_rank", path: "/v1/chat/completions", body: withFields(body, "routed_dp_rank", "2"), wantRank: 2, status: 200},
		{name: "deprecated data_parallel_rank", path: "/v1/chat/completions", body: withFields(body, "data_parallel_rank", "3"), wantRank: 3, status: 200},
		{name: "routed_dp_rank wins over the alias", path: "/v1/chat/completions", body: withFields(body, "routed_dp_rank", "1", "data_parallel_rank", "3"), wantRank: 1, status: 200},
		{name: "null hint is none", path: "/v1/chat/completions", body: withFields(body, "routed_dp_rank", "null", "data_parallel_rank", "0"), wantRank: 0, status: 200},
		{name: "header overrides the body", path: "/v1/chat/completions", body: withFields(body, "routed_dp_rank", "1"), hdr: hdr("3"), wantRank: 3, status: 200},
		{name: "completions read the header too", path: "/v1/completions", body: `{"prompt":"which rank","max_tokens":1}`, hdr: hdr("2"), wantRank: 2, status: 200},
		{name: "generate reads the body", path: "/generate", body: `{"text":"which rank","sampling_params":{"max_new_tokens":1},"routed_dp_rank":1}`, wantRank: 1, status: 200},
		{name: "out of range", path: "/v1/chat/completions", body: withFields(body, "routed_dp_rank", "4"), wantRank: -1, status: 400,
			wantMsg: "routed_dp_rank=4 out of range [0, 4)", wantType: "BadRequestError"},
		{name: "negative", path: "/v1/chat/completions", body: withFields(body, "data_parallel_rank", "-1"), wantRank: -1, status: 400,
			wantMsg: "routed_dp_rank=-1 out of range [0, 4)", wantType: "BadRequestError"},
		{name: "header not an integer", path: "/v1/chat/completions", body: body, hdr: hdr("two"), wantRank: -1, status: 400,
			wantMsg: "Invalid X-Data-Parallel-Rank header: must be an integer, got 'two'", wantType: "400"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.ResetStats()
			status, resp := postWith(t, c, e.URL()+tt.path, tt.body, tt.hdr)
			if status != tt.status {
				t.Fatalf("status %d, want %d: %s", status, tt.status, resp)
			}
			if tt.wantRank < 0 {
				if eb := decodeJSON[sglangErr](t, resp); eb.Message != tt.wantMsg || eb.Type != tt.wantType || eb.Code != tt.status {
					t.Errorf("error %s, want message %q type %q", resp, tt.wantMsg, tt.wantType)
				}
				if got := rankRequests(e); got[0]+got[1]+got[2]+got[3] != 0 {
					t.Errorf("a refused request ran: %v", got)
				}
				return
			}
			if got := rankRequests(e); !onlyRank(got, tt.wantRank) {
				t.Errorf("ranks ran %v, want only rank %d", got, tt.wantRank)
			}
		})
	}

	t.Run("round robin without a hint", func(t *testing.T) {
		e.ResetStats()
		for i := 0; i < 8; i++ {
			if status, resp := post(t, c, e.URL()+"/v1/chat/completions", body); status != 200 {
				t.Fatalf("%d %s", status, resp)
			}
		}
		for rank, n := range rankRequests(e) {
			if n != 2 {
				t.Errorf("rank %d ran %d requests, want 2 (round robin)", rank, n)
			}
		}
	})

	t.Run("without DP", func(t *testing.T) {
		one := startEngine(t, Config{Mode: ModeInstant})
		if status, resp := post(t, c, one.URL()+"/v1/chat/completions", withFields(body, "routed_dp_rank", "0")); status != 200 {
			t.Errorf("rank 0 without DP: %d %s", status, resp)
		}
		status, resp := post(t, c, one.URL()+"/v1/chat/completions", withFields(body, "routed_dp_rank", "1"))
		if eb := decodeJSON[sglangErr](t, resp); status != 400 || eb.Message != "routed_dp_rank=1 out of range [0, 1)" {
			t.Errorf("rank 1 without DP: %d %s", status, resp)
		}
	})
}

func TestDPPrefixCachePerRank(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{DPSize: 2, PrefillTokensPerSec: 1e7, ITLBase: time.Microsecond, ITLPerSeq: time.Nanosecond})
	c := testClient(t)
	type usage struct {
		Usage struct {
			PromptTokens  int `json:"prompt_tokens"`
			PromptDetails *struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	prompt := jsonString(words(200, "shared"))
	cached := func(rank int) int {
		t.Helper()
		status, resp := post(t, c, e.URL()+"/v1/completions", `{"prompt":`+prompt+`,"max_tokens":1,"routed_dp_rank":`+strconv.Itoa(rank)+`}`)
		if status != 200 {
			t.Fatalf("%d %s", status, resp)
		}
		u := decodeJSON[usage](t, resp).Usage
		if u.PromptDetails == nil {
			return 0
		}
		return u.PromptDetails.CachedTokens
	}
	if n := cached(1); n != 0 {
		t.Fatalf("first request on rank 1 hit %d cached tokens", n)
	}
	warm := cached(1)
	if warm == 0 {
		t.Fatal("the same prompt on the same rank missed the prefix cache")
	}
	if n := cached(0); n != 0 {
		t.Errorf("the same prompt on another rank hit %d cached tokens, want a miss", n)
	}
	st := e.Stats()
	r0, r1 := st.Ranks[0], st.Ranks[1]
	if r1.Requests != 2 || r0.Requests != 1 || r1.PrefixCacheHitTokens != int64(warm) || r0.PrefixCacheHitTokens != 0 ||
		r0.PromptTokens == 0 || r1.PromptTokens != 2*r0.PromptTokens || st.PrefixCacheHitTokens != int64(warm) ||
		r0.PrefixCacheUsed == 0 || r1.PrefixCacheUsed != r0.PrefixCacheUsed {
		t.Errorf("per-rank stats %+v", st.Ranks)
	}
	// Each rank holds half the engine's KV and prefix cache.
	if r0.KVCapacityTokens != e.Config().KVCapacityTokens/2 || st.KVCapacityTokens != e.Config().KVCapacityTokens {
		t.Errorf("kv capacity per rank %d, total %d", r0.KVCapacityTokens, st.KVCapacityTokens)
	}
	// /v1/loads reports each rank's hit rate.
	_, body := get(t, c, e.URL()+"/v1/loads")
	loads := decodeJSON[struct {
		Loads []struct {
			DPRank       int     `json:"dp_rank"`
			CacheHitRate float64 `json:"cache_hit_rate"`
		} `json:"loads"`
	}](t, body).Loads
	if len(loads) != 2 || loads[0].CacheHitRate != 0 || loads[1].CacheHitRate != float64(warm)/float64(r1.PromptTokens) {
		t.Errorf("loads %s", body)
	}
}

func TestDPLoadsPerRank(t *testing.T) {
	t.Parallel()
	// A long decode pinned to rank 2 keeps that rank busy while the load routes are read.
	e := startEngine(t, Config{DPSize: 4, ITLBase: 20 * time.Millisecond, PrefillTokensPerSec: 1e7})
	c := testClient(t)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	t.Cleanup(cancel)
	wg.Go(func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.URL()+"/generate",
			strings.NewReader(`{"text":"busy","sampling_params":{"max_new_tokens":10000,"ignore_eos":true},"routed_dp_rank":2}`))
		if resp, err := c.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
	waitFor(t, "rank 2 to run the request", func() bool { return e.Stats().Ranks[2].Running == 1 })

	type load struct {
		DPRank             int   `json:"dp_rank"`
		NumRunningReqs     int   `json:"num_running_reqs"`
		NumWaitingReqs     int   `json:"num_waiting_reqs"`
		NumUsedTokens      int64 `json:"num_used_tokens"`
		MaxTotalNumTokens  int64 `json:"max_total_num_tokens"`
		MaxRunningRequests int   `json:"max_running_requests"`
	}
	type loadsResp struct {
		Loads           []load `json:"loads"`
		NumAccelerators int    `json:"num_accelerators"`
	}
	status, body := get(t, c, e.URL()+"/v1/loads")
	lr := decodeJSON[loadsResp](t, body)
	if status != 200 || len(lr.Loads) != 4 || lr.NumAccelerators != 1 {
		t.Fatalf("/v1/loads %d %s", status, body)
	}
	for i, l := range lr.Loads {
		busy := i == 2
		if l.DPRank != i || (l.NumRunningReqs == 1) != busy || (l.NumUsedTokens > 0) != busy || l.NumWaitingReqs != 0 ||
			l.MaxTotalNumTokens != e.Config().KVCapacityTokens/4 || l.MaxRunningRequests != e.Config().MaxRunningRequests/4 {
			t.Errorf("rank %d load %+v", i, l)
		}
	}
	_, body = get(t, c, e.URL()+"/v1/loads?dp_rank=2")
	if lr := decodeJSON[loadsResp](t, body); len(lr.Loads) != 1 || lr.Loads[0].DPRank != 2 || lr.Loads[0].NumRunningReqs != 1 {
		t.Errorf("/v1/loads?dp_rank=2: %s", body)
	}
	_, body = get(t, c, e.URL()+"/v1/loads?dp_rank=9")
	if lr := decodeJSON[loadsResp](t, body); len(lr.Loads) != 0 {
		t.Errorf("/v1/loads?dp_rank=9: %s, want no loads", body)
	}
	if status, body := get(t, c, e.URL()+"/v1/loads?dp_rank=x"); status != 422 {
		t.Errorf("/v1/loads?dp_rank=x: %d %s, want 422", status, body)
	}
	status, body = get(t, c, e.URL()+"/get_load")
	gl := decodeJSON[[]struct {
		DPRank  int `json:"dp_rank"`
		NumReqs int `json:"num_reqs"`
	}](t, body)
	if status != 200 || len(gl) != 4 {
		t.Fatalf("/get_load %d %s", status, body)
	}
	for i, l := range gl {
		if l.DPRank != i || (l.NumReqs == 1) != (i == 2) {
			t.Errorf("/get_load rank %d: %+v", i, l)
		}
	}
	// Prometheus: one series per rank, labelled dp_rank.
	fams := scrape(t, c, e)
	for _, m := range fams["sglang:num_running_reqs"].GetMetric() {
		var rank string
		for _, l := range m.GetLabel() {
			if l.GetName() == "dp_rank" {
				rank = l.GetValue()
			}
		}
		if want := map[bool]float64{true: 1, false: 0}[rank == "2"]; m.GetGauge().GetValue() != want || rank == "" {
			t.Errorf("sglang:num_running_reqs{dp_rank=%q} = %v", rank, m.GetGauge().GetValue())
		}
	}
	if n := len(fams["sglang:num_running_reqs"].GetMetric()); n != 4 {
		t.Errorf("%d sglang:num_running_reqs series, want 4", n)
	}
}

// TestRankAwarenessKeepsTheCache replays multi-turn conversations (each turn extends the last one's
// prompt) on a 4-rank engine, once pinning each conversation to a rank and once letting the engine
// round-robin (what a gateway that ignores ranks gets), and compares prefix cache hits and prefill time.
func TestRankAwarenessKeepsTheCache(t *testing.T) {
	t.Parallel()
	const convs, turns = 7, 6 // 7: round robin does not line up with the 4 ranks
	run := func(t *testing.T, pinned bool) (hitRate float64, ttft time.Duration) {
		var total time.Duration
		synctest.Test(t, func(t *testing.T) {
			e := newModelEngine(t, func(c *Config) { c.DPSize = 4 })
			for turn := 0; turn < turns; turn++ {
				for conv := 0; conv < convs; conv++ {
					text := words(300+64*turn, "c"+strconv.Itoa(conv))
					body := `{"prompt":` + jsonString(text) + `,"max_tokens":1}`
					if pinned {
						body = withFields(body, "routed_dp_rank", strconv.Itoa(conv%4))
					}
					job, err := e.parseJob(apiCompletion, []byte(body), nil)
					if err != nil {
						t.Fatal(err)
					}
					start := time.Now()
					rf := requestFaults{slowness: 1}
					if _, err := e.runJob(t.Context(), job, &rf, func(int, string) error { return nil }); err != nil {
						t.Fatal(err)
					}
					total += time.Since(start)
				}
			}
			st := e.Stats()
			hitRate = float64(st.PrefixCacheHitTokens) / float64(st.PromptTokens)
		})
		return hitRate, total / (convs * turns)
	}
	awareHits, awareTTFT := run(t, true)
	blindHits, blindTTFT := run(t, false)
	t.Logf("rank-aware: hit rate %.2f, mean TTFT %v; rank-blind: hit rate %.2f, mean TTFT %v", awareHits, awareTTFT, blindHits, blindTTFT)
	if awareHits < 0.6 || blindHits > awareHits/2 || blindTTFT <= awareTTFT {
		t.Errorf("rank-aware hit rate %.2f (TTFT %v) vs rank-blind %.2f (TTFT %v): want the pinned conversations to keep their cache",
			awareHits, awareTTFT, blindHits, blindTTFT)
	}
}
