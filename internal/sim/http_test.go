package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// startEngine starts an engine on a free loopback port and closes it when the test ends.
func startEngine(t *testing.T, cfg Config) *Engine {
	t.Helper()
	e, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// testClient is an HTTP client whose idle connections are closed when the test ends (goleak).
func testClient(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func post(t *testing.T, c *http.Client, url, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
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

func get(t *testing.T, c *http.Client, url string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
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

// sseEvents splits an SSE body into its data payloads.
func sseEvents(t *testing.T, body []byte) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "data: ") {
			out = append(out, strings.TrimPrefix(line, "data: "))
		} else if line != "" {
			t.Errorf("unexpected SSE line %q", line)
		}
	}
	return out
}

func decodeJSON[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

func TestHTTPErrors(t *testing.T) {
	t.Parallel()
	sg := startEngine(t, Config{Mode: ModeInstant})
	vl := startEngine(t, Config{Mode: ModeInstant, Protocol: ProtocolVLLM})
	c := testClient(t)
	tests := []struct {
		name      string
		e         *Engine
		path      string
		body      string
		want      int
		wantBody  string // exact, when set
		wantType  string // SGLang ErrorResponse / vLLM ErrorInfo type
		wantParam string
	}{
		{name: "sglang malformed JSON", e: sg, path: "/v1/chat/completions", body: `{"messages": [`, want: 400, wantType: "Bad Request"},
		{name: "sglang no messages", e: sg, path: "/v1/chat/completions", body: `{"model":"sim-model"}`, want: 400, wantType: "Bad Request"},
		{name: "sglang unknown model", e: sg, path: "/v1/chat/completions", body: `{"model":"nope","messages":[{"role":"user","content":"hi"}]}`, want: 404, wantType: "404"},
		{name: "sglang negative max_new_tokens", e: sg, path: "/generate", body: `{"text":"hi","sampling_params":{"max_new_tokens":-1}}`, want: 400,
			wantBody: `{"error":{"message":"max_new_tokens must be at least 0, got -1."}}`},
		{name: "sglang missing text", e: sg, path: "/generate", body: `{}`, want: 400, wantType: "Bad Request"},
		{name: "sglang n=0 is one sample", e: sg, path: "/v1/completions", body: `{"prompt":"hi","n":0}`, want: 200},
		{name: "sglang unknown fields accepted", e: sg, path: "/v1/completions", body: `{"prompt":"hi","frobnicate":{"x":[1,2]},"top_k":3}`, want: 200},
		{name: "vllm malformed JSON", e: vl, path: "/v1/completions", body: `{"prompt":`, want: 400, wantType: "BadRequestError"},
		{name: "vllm unknown model", e: vl, path: "/v1/completions", body: `{"model":"nope","prompt":"hi"}`, want: 404, wantType: "NotFoundError", wantParam: "model"},
		{name: "vllm n=0", e: vl, path: "/v1/completions", body: `{"prompt":"hi","n":0}`, want: 400, wantType: "BadRequestError"},
		{name: "vllm has no /generate", e: vl, path: "/generate", body: `{"text":"hi"}`, want: 404, wantBody: `{"detail":"Not Found"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := post(t, c, tt.e.URL()+tt.path, tt.body)
			if status != tt.want {
				t.Fatalf("status %d, want %d: %s", status, tt.want, body)
			}
			if tt.wantBody != "" && string(body) != tt.wantBody {
				t.Errorf("body %s, want %s", body, tt.wantBody)
			}
			if tt.wantType == "" {
				return
			}
			if tt.e.cfg.Protocol == ProtocolVLLM {
				eb := decodeJSON[vllmErr](t, body)
				if eb.Error.Type != tt.wantType || eb.Error.Code != tt.want || eb.Error.Message == "" || (eb.Error.Param == nil) != (tt.wantParam == "") ||
					(eb.Error.Param != nil && *eb.Error.Param != tt.wantParam) {
					t.Errorf("error body %s: want type %q, code %d, param %q", body, tt.wantType, tt.want, tt.wantParam)
				}
				return
			}
			eb := decodeJSON[sglangErr](t, body)
			if eb.Object != "error" || eb.Type != tt.wantType || eb.Code != tt.want || eb.Message == "" || eb.Param != nil {
				t.Errorf("error body %s: want object error, type %q, code %d, param null", body, tt.wantType, tt.want)
			}
		})
	}
}

func TestGenerateNative(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Mode: ModeInstant, Seed: 3})
	c := testClient(t)
	type meta struct {
		ID               string         `json:"id"`
		PromptTokens     int            `json:"prompt_tokens"`
		CompletionTokens int            `json:"completion_tokens"`
		CachedTokens     *int           `json:"cached_tokens"`
		FinishReason     map[string]any `json:"finish_reason"`
	}
	type result struct {
		Text     string `json:"text"`
		MetaInfo meta   `json:"meta_info"`
		Index    *int   `json:"index"`
	}

	status, body := post(t, c, e.URL()+"/generate", `{"text":"the quick brown fox","sampling_params":{"max_new_tokens":5,"temperature":0.7}}`)
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	r := decodeJSON[result](t, body)
	if r.MetaInfo.PromptTokens != 6 || r.MetaInfo.CompletionTokens != 5 || r.MetaInfo.CachedTokens == nil ||
		r.MetaInfo.FinishReason["type"] != "length" || countTokens(r.Text) != 5 || r.MetaInfo.ID == "" {
		t.Errorf("generate: %s", body)
	}

	// Batch: a text array answers with an array.
	status, body = post(t, c, e.URL()+"/generate", `{"text":["a b","c d e"],"sampling_params":{"max_new_tokens":2}}`)
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	batch := decodeJSON[[]result](t, body)
	if len(batch) != 2 || batch[0].MetaInfo.PromptTokens != 2 || batch[1].MetaInfo.PromptTokens != 3 {
		t.Errorf("batch: %s", body)
	}

	// Streaming: cumulative text, final finish_reason, [DONE].
	status, body = post(t, c, e.URL()+"/generate", `{"text":"the quick brown fox","sampling_params":{"max_new_tokens":5,"temperature":0.7},"stream":true}`)
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	ev := sseEvents(t, body)
	if len(ev) != 7 || ev[6] != "[DONE]" {
		t.Fatalf("events %q: want 5 tokens, a final chunk and [DONE]", ev)
	}
	last := decodeJSON[result](t, []byte(ev[5]))
	if last.Text != r.Text || last.MetaInfo.FinishReason["type"] != "length" {
		t.Errorf("final stream chunk %s, want text %q", ev[5], r.Text)
	}
	for i, e := range ev[:5] {
		chunk := decodeJSON[result](t, []byte(e))
		if chunk.MetaInfo.FinishReason != nil || !strings.HasPrefix(r.Text, chunk.Text) || chunk.MetaInfo.CompletionTokens != i+1 {
			t.Errorf("chunk %d %s: want a cumulative prefix of %q", i, e, r.Text)
		}
	}
}

func TestOpenAIShapes(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Mode: ModeInstant, Models: []string{"m1", "m2"}})
	c := testClient(t)

	status, body := post(t, c, e.URL()+"/v1/chat/completions",
		`{"model":"m2","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hello"}]}],"max_tokens":3,"n":2}`)
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	var chat map[string]any
	if err := json.Unmarshal(body, &chat); err != nil {
		t.Fatal(err)
	}
	keys := func(m map[string]any) []string {
		var k []string
		for key := range m {
			k = append(k, key)
		}
		return k
	}
	wantKeys := []string{"id", "object", "created", "model", "choices", "usage"}
	if diff := cmp.Diff(wantKeys, keys(chat), sortStrings); diff != "" {
		t.Errorf("chat response keys (-want +got):\n%s", diff)
	}
	if chat["object"] != "chat.completion" || chat["model"] != "m2" {
		t.Errorf("chat: %s", body)
	}
	choices := chat["choices"].([]any)
	if len(choices) != 2 {
		t.Fatalf("choices: %s", body)
	}
	for i, ch := range choices {
		m := ch.(map[string]any)
		if diff := cmp.Diff([]string{"index", "message", "logprobs", "finish_reason"}, keys(m), sortStrings); diff != "" {
			t.Errorf("choice keys (-want +got):\n%s", diff)
		}
		if m["index"] != float64(i) || m["logprobs"] != nil || m["finish_reason"] != "length" ||
			m["message"].(map[string]any)["role"] != "assistant" {
			t.Errorf("choice %d: %v", i, m)
		}
	}
	usage := chat["usage"].(map[string]any)
	if usage["completion_tokens"] != float64(6) || usage["total_tokens"] != usage["prompt_tokens"].(float64)+6 {
		t.Errorf("usage: %v", usage)
	}

	// Streaming chat with usage: role first, content, finish, usage chunk with empty choices, [DONE].
	status, body = post(t, c, e.URL()+"/v1/chat/completions",
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`)
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	ev := sseEvents(t, body)
	if len(ev) != 7 || ev[6] != "[DONE]" {
		t.Fatalf("events %q", ev)
	}
	type chunk struct {
		Object  string `json:"object"`
		Choices []struct {
			Delta        map[string]any `json:"delta"`
			FinishReason *string        `json:"finish_reason"`
		} `json:"choices"`
		Usage *struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	first := decodeJSON[chunk](t, []byte(ev[0]))
	if first.Object != "chat.completion.chunk" || first.Choices[0].Delta["role"] != "assistant" {
		t.Errorf("first chunk %s: want the role", ev[0])
	}
	fin := decodeJSON[chunk](t, []byte(ev[4]))
	if fin.Choices[0].FinishReason == nil || *fin.Choices[0].FinishReason != "length" {
		t.Errorf("finish chunk %s", ev[4])
	}
	u := decodeJSON[chunk](t, []byte(ev[5]))
	if len(u.Choices) != 0 || u.Usage == nil || u.Usage.CompletionTokens != 3 {
		t.Errorf("usage chunk %s", ev[5])
	}

	status, body = get(t, c, e.URL()+"/v1/models")
	models := decodeJSON[struct {
		Object string `json:"object"`
		Data   []struct {
			ID, Object string
		} `json:"data"`
	}](t, body)
	if status != 200 || models.Object != "list" || len(models.Data) != 2 || models.Data[1].ID != "m2" || models.Data[0].Object != "model" {
		t.Errorf("models: %d %s", status, body)
	}
}

var sortStrings = cmp.Transformer("sort", func(in []string) []string {
	out := append([]string(nil), in...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
})

func TestSGLangServerInfo(t *testing.T) {
	t.Parallel()
	p := startEngine(t, Config{Role: RolePrefill, Mode: ModeInstant, DPSize: 4})
	d := startEngine(t, Config{Role: RoleDecode, Mode: ModeInstant, BootstrapPort: 9100})
	r := startEngine(t, Config{Mode: ModeInstant, ContextLength: 4096})
	c := testClient(t)
	tests := []struct {
		e        *Engine
		mode     string
		bootPort int
		dpSize   int
		lb       string
	}{
		{e: p, mode: "prefill", bootPort: p.BootstrapPort(), dpSize: 4, lb: "follow_bootstrap_room"},
		{e: d, mode: "decode", bootPort: 9100, dpSize: 1, lb: "round_robin"},
		{e: r, mode: "null", bootPort: DefaultBootstrapPort, dpSize: 1, lb: "round_robin"},
	}
	for _, tt := range tests {
		for _, path := range []string{"/get_server_info", "/server_info"} {
			status, body := get(t, c, tt.e.URL()+path)
			info := decodeJSON[map[string]any](t, body)
			if status != 200 || info["disaggregation_mode"] != tt.mode || info["disaggregation_bootstrap_port"] != float64(tt.bootPort) ||
				info["dp_size"] != float64(tt.dpSize) || info["tp_size"] != float64(tt.dpSize) || info["model_path"] != "sim-model" ||
				info["enable_dp_attention"] != (tt.dpSize > 1) || info["load_balance_method"] != tt.lb ||
				info["max_total_num_tokens"] != float64(tt.e.Config().KVCapacityTokens/int64(tt.dpSize)) ||
				len(info["internal_states"].([]any)) != tt.dpSize ||
				info["context_length"] != float64(tt.e.Config().ContextLength) || info["version"] == nil {
				t.Errorf("%s %s: %d %s", tt.mode, path, status, body)
			}
			for _, simOnly := range []string{"protocol", "role", "simulator", "mode", "bootstrap_port", "engine_id"} {
				if _, ok := info[simOnly]; ok {
					t.Errorf("%s %s reports %q, which SGLang does not", tt.mode, path, simOnly)
				}
			}
		}
	}
	if tt := tests[0]; tt.bootPort == 0 {
		t.Error("the prefill has no bootstrap port")
	}
}

func TestInfoEndpoints(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Mode: ModeInstant})
	c := testClient(t)
	if status, body := get(t, c, e.URL()+"/get_model_info"); status != 200 || !bytes.Contains(body, []byte(`"model_path":"sim-model"`)) {
		t.Errorf("model info %d: %s", status, body)
	}
	status, body := get(t, c, e.URL()+"/v1/loads")
	loads := decodeJSON[struct {
		Version string `json:"version"`
		Loads   []struct {
			DPRank         *int     `json:"dp_rank"`
			NumRunning     *int     `json:"num_running_reqs"`
			NumWaiting     *int     `json:"num_waiting_reqs"`
			TokenUsage     *float64 `json:"token_usage"`
			MaxTotalTokens int64    `json:"max_total_num_tokens"`
		} `json:"loads"`
	}](t, body)
	if status != 200 || len(loads.Loads) != 1 || loads.Loads[0].DPRank == nil || loads.Loads[0].NumRunning == nil ||
		loads.Loads[0].NumWaiting == nil || loads.Loads[0].TokenUsage == nil || loads.Loads[0].MaxTotalTokens != e.Config().KVCapacityTokens {
		t.Errorf("loads %d: %s", status, body)
	}
	status, body = get(t, c, e.URL()+"/get_load")
	old := decodeJSON[[]map[string]any](t, body)
	if status != 200 || len(old) != 1 || old[0]["num_reqs"] != float64(0) || old[0]["num_waiting_reqs"] != float64(0) || old[0]["dp_rank"] != float64(0) {
		t.Errorf("get_load %d: %s", status, body)
	}
	status, body = get(t, c, e.URL()+"/v1/models")
	models := decodeJSON[struct {
		Data []map[string]any `json:"data"`
	}](t, body)
	if status != 200 || len(models.Data) != 1 || models.Data[0]["owned_by"] != "sglang" || models.Data[0]["max_model_len"] != float64(DefaultContextLength) {
		t.Errorf("models %d: %s", status, body)
	}
	for _, path := range []string{"/version", "/nope"} {
		if status, body := get(t, c, e.URL()+path); status != 404 || string(body) != `{"detail":"Not Found"}` {
			t.Errorf("%s: %d %s, want FastAPI's 404", path, status, body)
		}
	}
	if status, _ := get(t, c, e.URL()+"/health"); status != 200 {
		t.Errorf("health %d", status)
	}
	if status, body := get(t, c, e.URL()+"/health_generate"); status != 200 {
		t.Errorf("health_generate %d: %s", status, body)
	}
	if status, _ := post(t, c, e.URL()+"/flush_cache", ""); status != 200 {
		t.Errorf("POST flush_cache %d", status)
	}
	if status, _ := get(t, c, e.URL()+"/flush_cache"); status != 200 {
		t.Errorf("GET flush_cache %d", status)
	}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, e.URL()+"/v1/completions", strings.NewReader(`{"prompt":"x"}`))
	req.Header.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	status, body = get(t, c, e.URL()+"/metrics")
	if status != 200 {
		t.Errorf("metrics: %d", status)
	}
	for _, want := range []string{"sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage", `sluice_sim_requests_total{model_name="sim-model",path="/v1/completions"} 1`,
		"sluice_sim_cache_hit_tokens_total", "sluice_sim_bootstrap_timeouts_total", "sluice_sim_recomputed_prompts_total"} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("metrics lack %q", want)
		}
	}
	_, body = get(t, c, e.URL()+"/sim/stats")
	st := decodeJSON[Stats](t, body)
	if st.LastTraceparent != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" || st.PerPath["/v1/completions"] != 1 ||
		st.RequestsSeen != 1 || st.Completed != 1 {
		t.Errorf("stats: %s", body)
	}
	if status, body := post(t, c, e.URL()+"/sim/stats/reset", ""); status != 200 || decodeJSON[Stats](t, body).RequestsSeen != 0 {
		t.Errorf("reset: %d %s", status, body)
	}
}

func TestRealisticOverHTTP(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Seed: 1})
	c := testClient(t)
	body := `{"prompt":` + jsonString(words(400, "")) + `,"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`
	for i, wantCached := range []string{"", `"cached_tokens":399`} {
		status, resp := post(t, c, e.URL()+"/v1/completions", body)
		ev := sseEvents(t, resp)
		if status != 200 || len(ev) != 6 || ev[5] != "[DONE]" {
			t.Fatalf("request %d: %d %q", i, status, ev)
		}
		if wantCached != "" && !strings.Contains(ev[4], wantCached) {
			t.Errorf("request %d usage %s, want %s", i, ev[4], wantCached)
		}
	}
	if st := e.Stats(); st.PrefixCacheHitTokens != 399 || st.Running != 0 || st.KVUsedTokens != 0 {
		t.Errorf("stats %+v", st)
	}
}
