package tokenizer

import (
	"fmt"

	"github.com/dlclark/regexp2/v2"
)

// The split patterns of the families that go through a regex engine instead of a hand scanner
// (pretokenize.go), and of the hand scanners a test checks against the regex engine; each checked
// against the JS port of Hugging Face tokenizers on the family's own tokenizer.json (tests/tokenizer). Load accepts only these: a pattern is a new family, and a
// backtracking engine's reading of an untested pattern could differ from Oniguruma's in a corner that
// would route on wrong tokens without saying so.
const (
	// DeepSeek V3 and R1: three Isolated splits in a row, digits, then CJK/kana runs, then the rest;
	// scanned by hand (deepseek.go), regexp2 checks the scanner.
	patternDeepSeekDigits = `\p{N}{1,3}`
	patternDeepSeekCJK    = "[一-龥\u3040-ゟ゠-ヿ]+"
	patternDeepSeekRest   = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
	// gpt-oss (tiktoken's o200k_base), scanned by hand (o200k.go); regexp2 checks the scanner.
	patternO200k = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// Mistral's Tekken (Mistral NeMo and later): o200k's shape without the contractions, one digit a piece.
	patternTekken = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// GPT-2's, which ByteLevel applies itself when use_regex is true (tokenizers' pre_tokenizers/byte_level.rs).
	patternGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
)

// regexFamilies are the pattern sequences Load hands to regexp2, whole: each was checked as a sequence.
var regexFamilies = [][]string{
	{patternGPT2},
}

// patternsDeepSeek is DeepSeek's sequence, scanned by hand (deepseek.go); regexp2 checks the scanner.
var patternsDeepSeek = []string{patternDeepSeekDigits, patternDeepSeekCJK, patternDeepSeekRest}

// regexSplit is a Sequence of Isolated splits: each regex splits every piece the one before it made,
// matches and the text between them alike becoming pieces, as tokenizers' Split does.
type regexSplit []*regexp2.Regexp

func newRegexSplit(patterns []string) (regexSplit, error) {
	rs := make(regexSplit, len(patterns))
	for i, p := range patterns {
		// Default options: .NET's Unicode classes, where \s is \p{Z} and the ASCII and U+0085 controls,
		// the White_Space property Oniguruma's \s is.
		re, err := regexp2.Compile(p, regexp2.None)
		if err != nil {
			return nil, fmt.Errorf("pre_tokenizer split pattern %q: %w", p, err)
		}
		rs[i] = re
	}
	return rs, nil
}

// each calls f with the pieces of s, in order.
func (rs regexSplit) each(s string, f func(piece string)) {
	if s == "" {
		return
	}
	if len(rs) == 0 {
		f(s)
		return
	}
	// Only a match timeout errs, and none is set.
	idx, _ := rs[0].FindAllStringIndex(s, -1)
	last := 0
	for _, m := range idx {
		if m[1] == m[0] {
			continue // no pattern here matches empty; an empty piece would be dropped anyway
		}
		rs[1:].each(s[last:m[0]], f)
		rs[1:].each(s[m[0]:m[1]], f)
		last = m[1]
	}
	rs[1:].each(s[last:], f)
}
