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

type errorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	} `json:"error"`
}

func TestHTTPErrors(t *testing.T) {
	e := startEngine(t, Config{Mode: ModeInstant})
	c := testClient(t)
	tests := []struct {
		name     string
		path     string
		body     string
		want     int
		wantCode string
	}{
		{name: "malformed JSON", path: "/v1/chat/completions", body: `{"messages": [`, want: 400, wantCode: "invalid_request"},
		{name: "no messages", path: "/v1/chat/completions", body: `{"model":"sim-model"}`, want: 400, wantCode: "invalid_request"},
		{name: "unknown model", path: "/v1/chat/completions", body: `{"model":"nope","messages":[{"role":"user","content":"hi"}]}`, want: 404, wantCode: "model_not_found"},
		{name: "bad n", path: "/v1/completions", body: `{"prompt":"hi","n":0}`, want: 400, wantCode: "invalid_request"},
		{name: "negative max_tokens", path: "/generate", body: `{"text":"hi","sampling_params":{"max_new_tokens":-1}}`, want: 400, wantCode: "invalid_request"},
		{name: "missing text", path: "/generate", body: `{}`, want: 400, wantCode: "invalid_request"},
		{name: "unknown fields accepted", path: "/v1/completions", body: `{"prompt":"hi","frobnicate":{"x":[1,2]},"top_k":3}`, want: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := post(t, c, e.URL()+tt.path, tt.body)
			if status != tt.want {
				t.Fatalf("status %d, want %d: %s", status, tt.want, body)
			}
			if tt.wantCode == "" {
				return
			}
			eb := decodeJSON[errorBody](t, body)
			if eb.Error.Code != tt.wantCode || eb.Error.Message == "" || eb.Error.Type == "" || eb.Error.Param != nil {
				t.Errorf("error body %s: want code %q, a message and a type, param null", body, tt.wantCode)
			}
		})
	}
}

func TestGenerateNative(t *testing.T) {
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

func TestInfoEndpoints(t *testing.T) {
	e := startEngine(t, Config{Role: RolePrefill, Mode: ModeInstant})
	c := testClient(t)
	status, body := get(t, c, e.URL()+"/get_server_info")
	info := decodeJSON[map[string]any](t, body)
	if status != 200 || info["role"] != "prefill" || info["protocol"] != "sglang" || info["disaggregation_mode"] != "prefill" ||
		info["bootstrap_port"] != float64(e.BootstrapPort()) || e.BootstrapPort() == 0 {
		t.Errorf("server info %d: %s", status, body)
	}
	if status, body := get(t, c, e.URL()+"/get_model_info"); status != 200 || !bytes.Contains(body, []byte(`"model_path":"sim-model"`)) {
		t.Errorf("model info %d: %s", status, body)
	}
	if status, body := get(t, c, e.URL()+"/v1/loads"); status != 200 || !bytes.Contains(body, []byte(`"num_running_reqs":0`)) {
		t.Errorf("loads %d: %s", status, body)
	}
	if status, _ := get(t, c, e.URL()+"/health"); status != 200 {
		t.Errorf("health %d", status)
	}
	if status, body := get(t, c, e.URL()+"/health_generate"); status != 200 {
		t.Errorf("health_generate %d: %s", status, body)
	}
	if status, _ := post(t, c, e.URL()+"/flush_cache", ""); status != 200 {
		t.Errorf("flush_cache %d", status)
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
