package tokenizer

import (
	"errors"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/tokenizer"
)

// decodeTexts are beyond the corpus's prompts: what generated text holds (mixed scripts, emoji of
// several code points, digit runs, code) and special tokens written in user text.
var decodeTexts = []string{
	"Mixed: English, 中文，日本語、한국어, Русский, العربية, עברית, हिन्दी, ไทย, Ελληνικά.",
	"Emoji: 🧑🏽‍💻 👨‍👩‍👧‍👦 🏴󠁧󠁢󠁳󠁣󠁴󠁿 🇫🇷 ✍🏿 🫠🫶 1️⃣ #️⃣ ©️",
	"Digits: 1 12 123 1234 12345 123456789012345678901234567890 3.14159265358979 ١٢٣٤٥ ১২৩ ٠.٥",
	"func main() {\n\tfmt.Println(\"héllo, 世界\") // 👋\n\tfor i := 0; i < 10; i++ {\n\t\tx[i] = i * i\n\t}\n}\n",
	"```python\ndef f(x: int) -> str:\n    return f\"{x:>8}\"  # ≥ ≤ ≠\n```",
	"user wrote <|im_start|>system\nignore<|im_end|> and <|endoftext|> and <tool_call>{}</tool_call> <think>x</think>",
	"<|im_start|><|im_end|><|im_start|>",
	"half specials: <|im_start <|im_end| |> <|vision_pad|><|image_pad|><|video_pad|><|fim_prefix|>",
	"\u200b\u200d\ufeff zero-width, \u00a0nbsp, \u3000ideographic space, \U0010FFFF max, \uFFFD replacement",
}

type decodeCase struct {
	IDs  []int `json:"ids"`
	Skip bool  `json:"skip"`
}

func jsDecode(t *testing.T, cases []decodeCase) []string {
	t.Helper()
	return jsDecodeFamily(t, "qwen3", cases)
}

func jsDecodeFamily(t *testing.T, family string, cases []decodeCase) []string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		missing(t, "node is not installed", err)
	}
	var res struct {
		Texts []string `json:"texts"`
	}
	run(t, &res, map[string]any{"cases": cases}, node, "decode.mjs", family)
	if len(res.Texts) != len(cases) {
		t.Fatalf("decode.mjs returned %d texts for %d cases", len(res.Texts), len(cases))
	}
	return res.Texts
}

// randomIDCases are id sequences no tokenizer would write: uniform over the vocabulary (many Qwen tokens
// are parts of a character), pieces of the texts' multi-token characters in any order, and special
// and other added tokens among them.
func randomIDCases(tk *tokenizer.Tokenizer, texts []string, n int) []decodeCase {
	r := rand.New(rand.NewPCG(3, 4))
	var pieces []int
	for _, s := range texts {
		pieces = append(pieces, tk.Encode(s)...)
	}
	const vocab, added = 151643, 26 // Qwen3: ids below vocab, then its added tokens
	cases := make([]decodeCase, 0, 2*n)
	for i := range n {
		ids := make([]int, r.IntN(30))
		for j := range ids {
			switch k := r.IntN(10); {
			case k < 4:
				ids[j] = r.IntN(vocab)
			case k < 8:
				ids[j] = pieces[r.IntN(len(pieces))]
			default:
				ids[j] = vocab + r.IntN(added)
			}
		}
		cases = append(cases, decodeCase{IDs: ids, Skip: i%2 == 0})
	}
	return cases
}

func decodeCases(t *testing.T, tk *tokenizer.Tokenizer) []decodeCase {
	t.Helper()
	texts := append(loadCorpus(t).Prompts, decodeTexts...)
	var cases []decodeCase
	for _, s := range texts {
		ids := tk.Encode(s)
		cases = append(cases, decodeCase{IDs: ids}, decodeCase{IDs: ids, Skip: true})
	}
	return append(cases, randomIDCases(tk, texts, 600)...)
}

func TestDecodeMatchesHuggingFacePort(t *testing.T) {
	tk := requireQwen3(t)
	cases := decodeCases(t, tk)
	want := jsDecode(t, cases)
	for i, c := range cases {
		got, err := tk.Decode(c.IDs, c.Skip)
		if err != nil {
			t.Errorf("case %d: Decode(%v, %v): %v", i, c.IDs, c.Skip, err)
			continue
		}
		if got != want[i] {
			t.Errorf("case %d: Decode(%v, skip %v):\n got %q\nwant %q", i, c.IDs, c.Skip, got, want[i])
		}
	}
}

// TestDecodeStreamMatchesDecode: on Qwen3's vocabulary, the stream's text is Decode's (so no Step wrote
// U+FFFD for a character split over ids).
func TestDecodeStreamMatchesDecode(t *testing.T) {
	tk := requireQwen3(t)
	for i, c := range decodeCases(t, tk) {
		want, err := tk.Decode(c.IDs, c.Skip)
		if err != nil {
			t.Fatal(err)
		}
		d := tk.NewDecodeStream(c.Skip)
		var got strings.Builder
		for _, id := range c.IDs {
			s, err := d.Step(id)
			if err != nil {
				t.Fatalf("case %d: Step(%d): %v", i, id, err)
			}
			got.WriteString(s)
		}
		got.WriteString(d.Flush())
		if got.String() != want {
			t.Errorf("case %d: ids %v, skip %v:\nstream %q\nDecode %q", i, c.IDs, c.Skip, got.String(), want)
		}
	}
}

func TestDecodeUnknownIDNamesIt(t *testing.T) {
	tk := requireQwen3(t)
	_, err := tk.Decode([]int{9707, 151669}, false) // one past Qwen3's last added token
	var u *tokenizer.UnknownTokenError
	if !errors.As(err, &u) || u.ID != 151669 || u.Index != 1 {
		t.Errorf("Decode with id 151669: %v, want an UnknownTokenError at tokens[1]", err)
	}
}
