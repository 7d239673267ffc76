package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// DeepSeek V3/R1's pre-tokenizer, scanned by hand: three Isolated splits in a row (patternDeepSeekDigits,
// patternDeepSeekCJK, patternDeepSeekRest), each splitting every piece the one before made. Through
// regexp2 the three passes cost about twice the whole budget of a 2k-token chat; here one loop cuts the
// text into the first two passes' segments (runs of at most three numbers; CJK/kana runs; the rest) and
// scans each segment with the third pattern's alternatives in order. A test checks the scanner against
// regexp2 with the patterns themselves.

// deepSeekCJK is patternDeepSeekCJK's class: [一-龥] (U+4E00-U+9FA5), hiragana and katakana (U+3040-U+30FF).
func deepSeekCJK(r rune) bool {
	return r >= 0x4E00 && r <= 0x9FA5 || r >= 0x3040 && r <= 0x30FF
}

// The classes of ASCII bytes the third pattern tells apart: ASCII letters, its first alternative's
// punctuation (every ASCII P or S), \s and \r\n.
const (
	dsLetter = 1 << iota
	dsPunct
	dsSpace
	dsNewline
)

var deepSeekASCII = func() (t [utf8.RuneSelf]uint8) {
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = dsLetter, dsLetter
	}
	for _, c := range "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~" {
		t[c] = dsPunct
	}
	for _, c := range "\t\v\f " {
		t[c] = dsSpace
	}
	t['\r'], t['\n'] = dsSpace|dsNewline, dsSpace|dsNewline
	return t
}()

// isLetterMark is [\p{L}\p{M}].
func isLetterMark(r rune) bool {
	if r < utf8.RuneSelf {
		return deepSeekASCII[r]&dsLetter != 0
	}
	return unicode.IsLetter(r) || unicode.IsMark(r)
}

// isPunctSymbol is [\p{P}\p{S}].
func isPunctSymbol(r rune) bool {
	if r < utf8.RuneSelf {
		return deepSeekASCII[r]&dsPunct != 0
	}
	return unicode.IsPunct(r) || unicode.IsSymbol(r)
}

// splitDeepSeek calls f with the pieces of s, in order, as the three splits make them.
func splitDeepSeek(s string, f func(piece string)) {
	for i := 0; i < len(s); {
		r, n := decode(s, i)
		// Pass 1, \p{N}{1,3}: a number run is cut into threes from its start; no later pass splits one
		// (numbers are neither CJK nor matched by the third pattern on their own).
		if isNumber(r) {
			e := i + n
			for k := 1; k < 3 && e < len(s); k++ {
				r2, n2 := decode(s, e)
				if !isNumber(r2) {
					break
				}
				e += n2
			}
			f(s[i:e])
			i = e
			continue
		}
		// Pass 2 within the run up to the next number: CJK runs and the text between them, each a
		// segment the third pattern scans on its own (its lookahead sees the segment's end as the end).
		cjk := deepSeekCJK(r)
		e := i + n
		for e < len(s) {
			if c := s[e]; c < utf8.RuneSelf { // ASCII: never CJK, a number only if a digit
				if cjk || asciiClass[c]&clsNumber != 0 {
					break
				}
				e++
				continue
			}
			r2, n2 := utf8.DecodeRuneInString(s[e:])
			if isNumber(r2) || deepSeekCJK(r2) != cjk {
				break
			}
			e += n2
		}
		deepSeekRest(s[i:e], f)
		i = e
	}
}

// deepSeekRest splits seg by patternDeepSeekRest: each match a piece, and the text between matches
// (runes no alternative matches, such as a lone U+200D) a piece too.
func deepSeekRest(seg string, f func(piece string)) {
	gap := -1
	for i := 0; i < len(seg); {
		e := nextPieceDeepSeek(seg, i)
		if e < 0 {
			if gap < 0 {
				gap = i
			}
			_, n := decode(seg, i)
			i += n
			continue
		}
		if gap >= 0 {
			f(seg[gap:i])
			gap = -1
		}
		f(seg[i:e])
		i = e
	}
	if gap >= 0 {
		f(seg[gap:])
	}
}

// nextPieceDeepSeek returns the end of patternDeepSeekRest's match at i in seg, or -1 if none starts
// there; the alternatives are tried in the regex's order.
func nextPieceDeepSeek(seg string, i int) int {
	// An ASCII word with or without one space before it, the commonest piece: alternative 2, as
	// alternative 1 needs punctuation first; decided on bytes.
	if c := seg[i]; isASCIILetter(c) {
		return letterMarks(seg, i+1)
	} else if c == ' ' && i+1 < len(seg) && isASCIILetter(seg[i+1]) {
		return letterMarks(seg, i+2)
	}
	r, n := decode(seg, i)
	// 1. [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+
	if r < utf8.RuneSelf && deepSeekASCII[r]&dsPunct != 0 && i+1 < len(seg) && isASCIILetter(seg[i+1]) {
		e := i + 2
		for e < len(seg) && isASCIILetter(seg[e]) {
			e++
		}
		return e
	}
	// 2. [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+. A mark may be the prefix or the run's first rune: the
	// match ends where the run does either way.
	if isLetterMark(r) {
		return letterMarks(seg, i+n)
	}
	if !isNewline(r) && !isPunctSymbol(r) && i+n < len(seg) {
		if r2, n2 := decode(seg, i+n); isLetterMark(r2) {
			return letterMarks(seg, i+n+n2)
		}
	}
	// 3. ' ?[\p{P}\p{S}]+[\r\n]*'
	j := i
	if r == ' ' {
		j++
	}
	if e := punctSymbols(seg, j); e > j {
		for e < len(seg) && isNewline(rune(seg[e])) {
			e++
		}
		return e
	}
	// 4-6. \s*[\r\n]+|\s+(?!\S)|\s+, as Qwen's pattern ends.
	if isSpace(r) {
		return whitespace(seg, i, r, n)
	}
	return -1
}

func letterMarks(s string, j int) int {
	for j < len(s) {
		if c := s[j]; c < utf8.RuneSelf {
			if deepSeekASCII[c]&dsLetter == 0 {
				break
			}
			j++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[j:])
		if !unicode.IsLetter(r) && !unicode.IsMark(r) {
			break
		}
		j += n
	}
	return j
}

func punctSymbols(s string, j int) int {
	for j < len(s) {
		r, n := decode(s, j)
		if !isPunctSymbol(r) {
			break
		}
		j += n
	}
	return j
}

func isASCIILetter(c byte) bool { return c < utf8.RuneSelf && deepSeekASCII[c]&dsLetter != 0 }
