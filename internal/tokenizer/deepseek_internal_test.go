package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// deepSeekTexts are what DeepSeek's three passes tell apart: number runs against letters, CJK and kana
// runs inside other text (and the kana block's marks, ゠ and ・ that the third pass splits), ASCII
// punctuation before ASCII and other letters, a prefix rune before letters, runes no alternative
// matches, and whitespace before each.
var deepSeekTexts = []string{
	"abc1234567def ١٢٣٤٥x ①②③④ 12.5%",
	"日本語のテキストとカタカナ、中文字符和ひらがな mixed 한국어 ゠あ・イ゛ゝー",
	".Hello ,world 'sx \"quoted\" (paren) [x] {y} #tag @me $5 ~tilde `tick` _under x-y a/b",
	".é ,日 'ü …Hello —dash «x» ¿Qué? ¡Sí!",
	"\u200dword \u200d \u200d\u200d x\u0301 \u0301\u0301a \u00a0word \u3000字 \ttab \x01ctl\x7f",
	"  two  ,\t.\n\n  \r\n x  \n\n\n  \u2028y\u0085z \u00a0\u00a0",
	"emoji 😀😀 🧑🏽‍💻 a😀b 👋\n\n",
	"func main() {\n\tfmt.Println(\"héllo, 世界\") // 👋\n}\n",
}

// deepSeekRandomText mixes the runes the three patterns classify differently.
func deepSeekRandomText(r *rand.Rand, n int) string {
	runes := []rune("aZé日カあー゠・゛한1٣①. ,'\"(#@`~-\t\n\r\u00a0\u3000\u2028\u0085😀\u0301\u200d\x01«…$+ǅʰ\u0903")
	var b strings.Builder
	for range n {
		b.WriteRune(runes[r.IntN(len(runes))])
	}
	return b.String()
}

// TestDeepSeekScannerIsTheRegex: splitDeepSeek splits as regexp2 does with DeepSeek's three patterns in
// a row, on the texts and on random mixes.
func TestDeepSeekScannerIsTheRegex(t *testing.T) {
	t.Parallel()
	rs, err := newRegexSplit(patternsDeepSeek)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	texts := slices.Concat(deepSeekTexts, splitTexts)
	for range 5000 {
		texts = append(texts, deepSeekRandomText(r, 1+r.IntN(24)))
	}
	bad := 0
	for _, s := range texts {
		var want, got []string
		rs.each(s, func(w string) { want = append(want, w) })
		splitDeepSeek(s, func(w string) { got = append(got, w) })
		if !slices.Equal(got, want) {
			if bad++; bad <= 20 {
				t.Errorf("%q:\n hand    %q\n regexp2 %q", s, got, want)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d texts split differently", bad, len(texts))
	}
}

// BenchmarkSplitDeepSeek is the choice for DeepSeek's patterns: the same text split by hand and by
// regexp2 (the split alone).
func BenchmarkSplitDeepSeek(b *testing.B) {
	text := strings.Repeat(strings.Join(slices.Concat(deepSeekTexts, splitTexts), " "), 20)
	pieces := 0
	splitDeepSeek(text, func(string) { pieces++ })
	b.Run("hand", func(b *testing.B) {
		for b.Loop() {
			splitDeepSeek(text, func(string) {})
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(pieces), "ns/piece")
	})
	b.Run("regexp2", func(b *testing.B) {
		rs, err := newRegexSplit(patternsDeepSeek)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			rs.each(text, func(string) {})
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(pieces), "ns/piece")
	})
}
