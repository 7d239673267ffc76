package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// splitTexts are what the patterns' alternatives tell apart.
var splitTexts = []string{
	"Hello world, it's 1234567 o'clock; WE'LL see\n\n  x  \r\n\t\ty",
	"日本語のテキスト 한국어 Русский ١٢٣٤٥ ①②③ e\u0301 🧑🏽‍💻 \u00a0\u3000\u2028x",
	"func main() {\n\tfmt.Println(\"héllo\") // 👋\n}\n   \n",
	"'s'S'tt 'RE'Ve'm'LL'd' '' x'd 99'x",
}

// randomText mixes the runes the patterns classify differently, so the two implementations meet every
// alternative and every boundary between them.
func randomText(r *rand.Rand, n int) string {
	// ǅ is Lt, ʰ Lm, 日 Lo, U+0301 and U+0903 marks.
	runes := []rune("aZé日カ한1٣①'sStTlLrReEvVdDmM \t\n\r\u00a0\u3000\u2028.,!?/\\-_😀\u0301\u0085ǅʰÉ\u0903")
	var b strings.Builder
	for range n {
		b.WriteRune(runes[r.IntN(len(runes))])
	}
	return b.String()
}

func handPieces(s string, digits int) []string {
	var out []string
	for i := 0; i < len(s); {
		e := nextPiece(s, i, digits)
		out = append(out, s[i:e])
		i = e
	}
	return out
}

// TestHandScannerIsTheRegex: the hand scanners split as regexp2 does with the patterns they stand for,
// Qwen2's, Llama 3's, o200k's and Tekken's, on the texts and on random mixes of the runes the patterns distinguish.
func TestHandScannerIsTheRegex(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	texts := slices.Clone(splitTexts)
	for range 3000 {
		texts = append(texts, randomText(r, 1+r.IntN(24)))
	}
	for _, p := range []struct {
		pattern string
		digits  int
	}{{patternQwen2, 1}, {patternLlama3, 3}} {
		rs, err := newRegexSplit([]string{p.pattern})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range texts {
			var want []string
			rs.each(s, func(w string) { want = append(want, w) })
			if got := handPieces(s, p.digits); !slices.Equal(got, want) {
				t.Errorf("digits %d, %q:\n hand   %q\n regexp2 %q", p.digits, s, got, want)
			}
		}
	}
	for _, x := range []struct {
		name    string
		pattern string
		syntax  *o200kSyntax
	}{{"o200k", patternO200k, syntaxO200k}, {"tekken", patternTekken, syntaxTekken}} {
		rs, err := newRegexSplit([]string{x.pattern})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range texts {
			var want, got []string
			rs.each(s, func(w string) { want = append(want, w) })
			for i := 0; i < len(s); {
				e := x.syntax.nextPiece(s, i)
				got = append(got, s[i:e])
				i = e
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s %q:\n hand   %q\n regexp2 %q", x.name, s, got, want)
			}
		}
	}
}

// BenchmarkSplit is the choice between a hand scanner and regexp2 for Llama 3's pattern: the same text
// split both ways (the split alone; the merges are cached words either way).
func BenchmarkSplit(b *testing.B) {
	text := strings.Repeat(strings.Join(splitTexts, " "), 20)
	pieces := len(handPieces(text, 3))
	b.Run("hand", func(b *testing.B) {
		for b.Loop() {
			for i := 0; i < len(text); {
				i = nextPiece(text, i, 3)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(pieces), "ns/piece")
	})
	b.Run("regexp2", func(b *testing.B) {
		rs, err := newRegexSplit([]string{patternLlama3})
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			rs.each(text, func(string) {})
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(pieces), "ns/piece")
	})
}
