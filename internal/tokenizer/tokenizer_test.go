package tokenizer_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/tokenizer"
)

// The oracle tests on Qwen3's real tokenizer are in tests/tokenizer; these use a tiny byte-level BPE
// written here, to pin the rules the real vocabulary rarely shows and the errors.

// byteLevel is GPT-2's byte-to-rune table, written out again so the test does not share the code's.
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
	panic("unreachable")
}

type fixture struct {
	merges  [][2]string
	added   []map[string]any
	pattern string
	model   string
	config  map[string]any
	decoder string // JSON, ByteLevel's when empty
	post    string // JSON, ByteLevel's when empty
}

// write makes a model directory: ids 0-255 are the bytes, then each merge's result, then added tokens.
func (f fixture) write(t testing.TB) string {
	t.Helper()
	vocab := map[string]int{}
	for b := range 256 {
		vocab[byteLevel(byte(b))] = b
	}
	for _, m := range f.merges {
		vocab[m[0]+m[1]] = len(vocab)
	}
	pattern := f.pattern
	if pattern == "" {
		pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	}
	model := f.model
	if model == "" {
		model = "BPE"
	}
	tj := map[string]any{
		"added_tokens": f.added,
		"normalizer":   map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": pattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		}},
		"post_processor": orJSON(f.post, `{"type": "ByteLevel"}`),
		"decoder":        orJSON(f.decoder, `{"type": "ByteLevel"}`),
		"model":          map[string]any{"type": model, "vocab": vocab, "merges": f.merges},
	}
	dir := t.TempDir()
	writeJSON(t, filepath.Join(dir, "tokenizer.json"), tj)
	if f.config != nil {
		writeJSON(t, filepath.Join(dir, "tokenizer_config.json"), f.config)
	}
	return dir
}

func orJSON(s, def string) json.RawMessage {
	if s == "" {
		s = def
	}
	return json.RawMessage(s)
}

func writeJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestEncodeMergesLowestRankLeftmostFirst(t *testing.T) {
	t.Parallel()
	// "aa" has rank 0, "ab" rank 1: "aab" merges the first pair; "aaa" merges leftmost on the tie.
	dir := fixture{merges: [][2]string{{"a", "a"}, {"a", "b"}, {"aa", "a"}}}.write(t)
	tk, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	aa, ab, aaa := 256, 257, 258
	tests := []struct {
		text string
		want []int
	}{
		{"aab", []int{aa, 'b'}},
		{"aaa", []int{aaa}},
		{"aaaa", []int{aa, aa}}, // both "a a" pairs (rank 0) merge before "aa a" (rank 2)
		{"ab", []int{ab}},
		{"ba", []int{'b', 'a'}},
		{"a b", []int{'a', int(' '), 'b'}}, // " b" is one piece; no merge joins ' ' and 'b'
	}
	for range 2 { // the second pass reads the word cache
		for _, tc := range tests {
			if got := tk.Encode(tc.text); !slices.Equal(got, tc.want) {
				t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
			}
		}
	}
}

func TestEncodeAddedTokensLeftmostLongest(t *testing.T) {
	t.Parallel()
	dir := fixture{added: []map[string]any{
		{"id": 300, "content": "<a>", "special": true},
		{"id": 301, "content": "<a>b", "special": false},
	}}.write(t)
	tk, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tk.Encode("x<a>bc<a><a"), []int{'x', 301, 'c', 300, '<', 'a'}; !slices.Equal(got, want) {
		t.Errorf("Encode = %v, want %v", got, want)
	}
}

func TestLoadRejectsWhatItDoesNotImplement(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		f       fixture
		wantErr string
	}{
		{"unigram", fixture{model: "Unigram"}, `model.type "Unigram"`},
		{"other pattern", fixture{pattern: `\p{N}{1,4}`}, "split pattern"},
		// DeepSeek V3's first split is implemented only as the first of its three.
		{"part of a family", fixture{pattern: `\p{N}{1,3}`}, "split pattern"},
		{"no decoder", fixture{decoder: "null"}, "decoder"},
		{"other decoder", fixture{decoder: `{"type": "Metaspace"}`}, "decoder"},
		{"bos and pair", fixture{post: `{"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A"}}, {"Sequence": {"id": "B"}}]}`}, "TemplateProcessing"},
		{"other post processor", fixture{post: `{"type": "BertProcessing"}`}, "post_processor"},
		{"lstrip", fixture{added: []map[string]any{{"id": 300, "content": "<m>", "lstrip": true}}}, "lstrip"},
		{"template", fixture{config: map[string]any{"chat_template": "{% if %}"}}, "chat_template"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := tokenizer.Load(tc.f.write(t))
			if !errors.Is(err, tokenizer.ErrUnsupported) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Load: %v, want ErrUnsupported mentioning %q", err, tc.wantErr)
			}
		})
	}
	if _, err := tokenizer.Load(filepath.Join(t.TempDir(), "absent")); !errors.Is(err, tokenizer.ErrRead) {
		t.Errorf("Load(absent dir): %v, want ErrRead", err)
	}
}

func TestRenderChat(t *testing.T) {
	t.Parallel()
	tmpl := `{% for m in messages %}[{{ m.role }}:{{ m.content }}{% if m.tool_calls %}{{ m.tool_calls[0].function.arguments | tojson }}{% endif %}]{% endfor %}` +
		`{% if tools %}{{ tools | tojson }}{% endif %}{% if add_generation_prompt %}>{{ eos_token }}{% endif %}`
	dir := fixture{config: map[string]any{"chat_template": tmpl, "eos_token": map[string]any{"content": "</s>"}}}.write(t)
	tk, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		messages string
		tools    string
		gen      bool
		want     string
		wantErr  error
	}{
		{"parts joined, null content, gen prompt", `[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},{"role":"assistant","content":null}]`, "", true, "[user:a\nb][assistant:]></s>", nil},
		{"arguments parsed, keys in order", `[{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":"{\"z\":1,\"a\":[2.5,\"<&>\"]}"}}]}]`, `[{"z":{"b":1,"a":2}}]`, false, `[assistant:{"z": 1, "a": [2.5, "<&>"]}][{"z": {"b": 1, "a": 2}}]`, nil},
		{"image part", `[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]`, "", false, "", tokenizer.ErrBadChat},
		{"no role", `[{"content":"x"}]`, "", false, "", tokenizer.ErrBadChat},
		{"empty", `[]`, "", false, "", tokenizer.ErrBadChat},
		{"not JSON", `[{`, "", false, "", tokenizer.ErrBadChat},
		{"bad arguments", `[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{"}}]}]`, "", false, "", tokenizer.ErrBadChat},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := tk.RenderChat(tokenizer.Chat{Messages: json.RawMessage(tc.messages), Tools: json.RawMessage(tc.tools), AddGenerationPrompt: tc.gen})
			if !errors.Is(err, tc.wantErr) || got != tc.want {
				t.Errorf("RenderChat = %q, %v; want %q, %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
	noTmpl, err := tokenizer.Load(fixture{}.write(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := noTmpl.RenderChat(tokenizer.Chat{Messages: json.RawMessage(`[{"role":"user","content":"x"}]`)}); !errors.Is(err, tokenizer.ErrNoTemplate) {
		t.Errorf("RenderChat without a template: %v, want ErrNoTemplate", err)
	}
}

func equalIDs(u []uint32, ids []int) bool {
	if len(u) != len(ids) {
		return false
	}
	for i, id := range ids {
		if u[i] != uint32(id) {
			return false
		}
	}
	return true
}

// TestEncodeConcurrent: goroutines sharing one Tokenizer, its word cache filling and being snapshotted
// as they go, get what another Tokenizer used by one goroutine gives (run with -race), in every form
// (the uint32 ones reuse scratch slices between calls).
func TestEncodeConcurrent(t *testing.T) {
	t.Parallel()
	dir := fixture{merges: [][2]string{{"a", "b"}, {"ab", "c"}, {"Ġ", "ab"}}}.write(t)
	shared, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	texts := make([]string, 400)
	for i := range texts {
		var b strings.Builder
		for j := range 50 {
			b.WriteString(" abc")
			b.WriteString(strings.Repeat("ab", (i+j)%7))
			b.WriteByte(byte('d' + (i*j)%20))
		}
		texts[i] = b.String()
	}
	own, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := make([][]int, len(texts))
	for i, s := range texts {
		want[i] = own.Encode(s)
	}
	errs := make(chan string, 8)
	for g := range 8 {
		go func() {
			for k := range texts {
				i := (k*7 + g*13) % len(texts)
				if got := shared.Encode(texts[i]); !slices.Equal(got, want[i]) {
					errs <- texts[i]
					return
				}
				if got := shared.EncodeUint32(texts[i]); !equalIDs(got, want[i]) {
					errs <- "EncodeUint32: " + texts[i]
					return
				}
				if got, w := shared.EncodeSpecialUint32(texts[i]), shared.EncodeSpecial(texts[i]); !equalIDs(got, w) {
					errs <- "EncodeSpecialUint32: " + texts[i]
					return
				}
			}
			errs <- ""
		}()
	}
	for range 8 {
		if s := <-errs; s != "" {
			t.Errorf("shared tokenizer encoded %q differently", s)
		}
	}
}
