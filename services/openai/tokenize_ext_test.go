package openai_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	openaiv1 "github.com/sluicegw/sluice/gen/sluice/openai/v1"
	"github.com/sluicegw/sluice/gen/sluice/openai/v1/openaiv1connect"
	"github.com/sluicegw/sluice/internal/sim"
)

// byteLevel is the ByteLevel pre-tokenizer's character for byte b (GPT-2's bytes_to_unicode).
func byteLevel(b byte) string {
	n := 0
	for c := range 256 {
		printable := c >= '!' && c <= '~' || c >= 0xA1 && c <= 0xAC || c >= 0xAE
		if c == int(b) {
			if printable {
				return string(rune(c))
			}
			return string(rune(256 + n))
		}
		if !printable {
			n++
		}
	}
	return ""
}

// qwenPattern is Qwen2's split pattern, one the tokenizer implements.
const qwenPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// tinyModel writes a byte-level BPE model directory: ids 0-255 are the bytes, 256 is "he", 257 the
// special <|end|>; its chat template writes "role: content<|end|>" per message.
func tinyModel(t *testing.T) string {
	t.Helper()
	vocab := map[string]int{}
	for b := range 256 {
		vocab[byteLevel(byte(b))] = b
	}
	vocab["he"] = 256
	tj := map[string]any{
		"added_tokens": []any{map[string]any{"id": 257, "content": "<|end|>", "single_word": false, "lstrip": false,
			"rstrip": false, "normalized": false, "special": true}},
		"normalizer": map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": qwenPattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		}},
		"post_processor": map[string]any{"type": "ByteLevel"},
		"decoder":        map[string]any{"type": "ByteLevel"},
		"model":          map[string]any{"type": "BPE", "vocab": vocab, "merges": [][2]string{{"h", "e"}}},
	}
	cfg := map[string]any{
		"chat_template": "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}<|end|>{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}",
		"eos_token":     "<|end|>",
	}
	dir := t.TempDir()
	for name, v := range map[string]any{"tokenizer.json": tj, "tokenizer_config.json": cfg} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// restPost posts body to the gateway's REST path and returns the status and the JSON answer.
func restPost(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

// asJSON is a typed answer as the REST JSON it stands for (numbers as float64, as decoded).
func asJSON(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	d := json.NewDecoder(bytes.NewReader(b))
	if err := d.Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// Tokenize and Detokenize answer over Connect, gRPC and gRPC-Web, on the gateway's own port, what the
// REST surface answers: the gateway's tokenizer for a model it has one for, an engine's otherwise; an
// id outside the vocabulary is InvalidArgument naming tokens, as REST's 400 does.
func TestTokenizeRPCs(t *testing.T) {
	c, err := sim.StartCluster(t.Context(), sim.ClusterConfig{Regular: 1, Mode: sim.ModeInstant})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	a := startGateway(t, "--worker-urls", c.Engines[0].URL(), "--model-id", "sim-model", "--tokenizer-path", "tiny="+tinyModel(t))
	base := "http://" + a.Addr()
	clients := map[string]openaiv1.OpenAIServiceClient{
		"connect":  connectClient{openaiv1connect.NewOpenAIServiceClient(http.DefaultClient, base)},
		"grpc-web": connectClient{openaiv1connect.NewOpenAIServiceClient(http.DefaultClient, base, connect.WithGRPCWeb())},
		"grpc":     openaiv1.NewOpenAIServiceClient(grpcConn(t, a.Addr())),
	}
	content := structpb.NewStringValue("hello there")
	kwargs, _ := structpb.NewStruct(map[string]any{"enable_thinking": false})
	for _, tc := range []struct {
		name string
		rest string
		req  *openaiv1.TokenizeRequest
	}{
		{"prompt, gateway", `{"model":"tiny","prompt":"he said hello<|end|>","return_token_strs":true}`,
			&openaiv1.TokenizeRequest{Model: "tiny", Prompt: ptr("he said hello<|end|>"), ReturnTokenStrs: true}},
		{"chat, gateway", `{"model":"tiny","messages":[{"role":"user","content":"hello there"}],"chat_template_kwargs":{"enable_thinking":false}}`,
			&openaiv1.TokenizeRequest{Model: "tiny", Messages: []*openaiv1.ChatMessage{{Role: "user", Content: content}}, ChatTemplateKwargs: kwargs}},
		{"chat without the generation prompt, gateway", `{"model":"tiny","messages":[{"role":"user","content":"hello there"}],"add_generation_prompt":false}`,
			&openaiv1.TokenizeRequest{Model: "tiny", Messages: []*openaiv1.ChatMessage{{Role: "user", Content: content}}, AddGenerationPrompt: ptr(false)}},
		{"prompt, engine", `{"model":"sim-model","prompt":"he said hello"}`,
			&openaiv1.TokenizeRequest{Model: "sim-model", Prompt: ptr("he said hello")}},
	} {
		code, want := restPost(t, base+"/tokenize", tc.rest)
		if code != http.StatusOK || len(want["tokens"].([]any)) == 0 {
			t.Fatalf("%s: REST %d %v", tc.name, code, want)
		}
		for name, cl := range clients {
			got, err := cl.Tokenize(t.Context(), tc.req)
			if err != nil {
				t.Fatalf("%s over %s: %v", tc.name, name, err)
			}
			g := asJSON(t, map[string]any{"count": got.Count, "tokens": got.Tokens})
			if got.MaxModelLen != 0 {
				g["max_model_len"] = float64(got.MaxModelLen)
			}
			if tc.req.ReturnTokenStrs {
				g["token_strs"] = asJSON(t, map[string]any{"s": got.TokenStrs})["s"]
			} else if _, ok := want["token_strs"]; ok {
				g["token_strs"] = want["token_strs"] // null on REST when not asked for
			}
			if d := cmp.Diff(want, g); d != "" {
				t.Errorf("%s over %s (-REST +typed):\n%s", tc.name, name, d)
			}
		}
	}

	// The tiny model's ids: "he" merges, and <|end|> is its special token.
	for _, model := range []string{"tiny", "sim-model"} {
		_, tok := restPost(t, base+"/tokenize", `{"model":"`+model+`","prompt":"he said hello"}`)
		var ids []int32
		for _, id := range tok["tokens"].([]any) {
			ids = append(ids, int32(id.(float64)))
		}
		idsJSON, _ := json.Marshal(ids)
		code, want := restPost(t, base+"/detokenize", `{"model":"`+model+`","tokens":`+string(idsJSON)+`}`)
		if _, ok := want["prompt"]; !ok {
			want["prompt"] = want["text"] // SGLang's shape, which the simulated engine speaks
		}
		// The simulated engine's tokenizer is not exact: only the gateway's must give the text back.
		if code != http.StatusOK || model == "tiny" && want["prompt"] != "he said hello" {
			t.Fatalf("REST detokenize %s: %d %v", model, code, want)
		}
		for name, cl := range clients {
			got, err := cl.Detokenize(t.Context(), &openaiv1.DetokenizeRequest{Model: model, Tokens: ids})
			if err != nil || got.Prompt != want["prompt"] {
				t.Errorf("Detokenize %s over %s = %v, %v; want %q", model, name, got, err, want["prompt"])
			}
		}
	}
	if got, err := clients["grpc"].Detokenize(t.Context(), &openaiv1.DetokenizeRequest{Model: "tiny", Tokens: []int32{256, 257}}); err != nil || got.Prompt != "he<|end|>" {
		t.Errorf("Detokenize of a merge and the special token = %v, %v; want %q", got, err, "he<|end|>")
	}

	code, rest := restPost(t, base+"/detokenize", `{"model":"tiny","tokens":[104,9999]}`)
	if e, _ := rest["error"].(map[string]any); code != http.StatusBadRequest || e["param"] != "tokens" {
		t.Fatalf("REST detokenize of an unknown id: %d %v, want a 400 naming tokens", code, rest)
	}
	for name, cl := range clients {
		_, err := cl.Detokenize(t.Context(), &openaiv1.DetokenizeRequest{Model: "tiny", Tokens: []int32{104, 9999}})
		if st, _ := status.FromError(err); name == "grpc" && (st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "tokens[1]")) {
			t.Errorf("over grpc: %v, want InvalidArgument naming tokens[1]", err)
		}
		if ce := new(connect.Error); name != "grpc" && (!asConnect(err, &ce) || ce.Code() != connect.CodeInvalidArgument || !strings.Contains(ce.Message(), "tokens[1]")) {
			t.Errorf("over %s: %v, want InvalidArgument naming tokens[1]", name, err)
		}
	}
	// Neither prompt nor messages: InvalidArgument, as REST's 400 naming prompt.
	if _, err := clients["connect"].Tokenize(t.Context(), &openaiv1.TokenizeRequest{Model: "tiny"}); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("Tokenize without prompt or messages: %v, want InvalidArgument", err)
	}
}

func asConnect(err error, ce **connect.Error) bool {
	var e *connect.Error
	if errors.As(err, &e) {
		*ce = e
		return true
	}
	return false
}
