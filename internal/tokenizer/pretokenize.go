package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// The split patterns this package scans by hand, as tokenizer.json spells them (pre_tokenizer Split,
// behavior Isolated): Qwen2, Qwen2.5 and Qwen3's, and Llama 3's, which differs only in taking digits
// three at a time (\p{N}{1,3}), so one scanner serves both with the run's bound as a parameter.
const (
	patternQwen2  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// \s, \p{L} and \p{N} as Oniguruma (Hugging Face tokenizers' regex engine) reads them with Unicode:
// \s is the White_Space property, which is what unicode.IsSpace tests.
func isSpace(r rune) bool {
	if r < utf8.RuneSelf {
		return asciiClass[r]&clsSpace != 0
	}
	return unicode.IsSpace(r)
}

func isLetter(r rune) bool {
	if r < utf8.RuneSelf {
		return asciiClass[r]&clsLetter != 0
	}
	return unicode.IsLetter(r)
}

func isNumber(r rune) bool {
	if r < utf8.RuneSelf {
		return asciiClass[r]&clsNumber != 0
	}
	return unicode.IsNumber(r)
}

func isNewline(r rune) bool { return r == '\r' || r == '\n' }

// The classes of ASCII bytes, so the common case costs one table load instead of a decode and a
// Unicode range search.
const (
	clsLetter = 1 << iota
	clsNumber
	clsSpace
)

var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = clsLetter, clsLetter
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = clsNumber
	}
	for _, c := range "\t\n\v\f\r " {
		t[c] = clsSpace
	}
	return t
}()

func decode(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// nextPiece returns the end of the piece of patternQwen2 (digits 1) or patternLlama3 (digits 3) that
// starts at i (i < len(s)), trying the
// pattern's alternatives in order as the regex engine does. Every rune belongs to a piece (the last
// alternatives match any whitespace, the others every other rune class), so Isolated splitting is the
// sequence of matches.
func nextPiece(s string, i, digits int) int {
	// Most pieces of prose are an ASCII word with or without one space before it: alternative 2, as
	// alternative 1 needs a quote; decided here on bytes, before any rune is decoded.
	if c := s[i]; c < utf8.RuneSelf && asciiClass[c]&clsLetter != 0 {
		return letters(s, i+1)
	} else if c == ' ' && i+1 < len(s) && s[i+1] < utf8.RuneSelf && asciiClass[s[i+1]]&clsLetter != 0 {
		return letters(s, i+2)
	}
	r, n := decode(s, i)
	// 1. (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if r == '\'' {
		if e := contraction(s, i+1); e > 0 {
			return e
		}
	}
	// 2. [^\r\n\p{L}\p{N}]?\p{L}+
	if isLetter(r) {
		return letters(s, i+n)
	}
	if !isNewline(r) && !isNumber(r) && i+n < len(s) {
		if r2, n2 := decode(s, i+n); isLetter(r2) {
			return letters(s, i+n+n2)
		}
	}
	// 3. \p{N}{1,digits}: greedy, so a run of digits is cut into pieces of that many from its start.
	if isNumber(r) {
		e := i + n
		for k := 1; k < digits && e < len(s); k++ {
			r2, n2 := decode(s, e)
			if !isNumber(r2) {
				break
			}
			e += n2
		}
		return e
	}
	// 4. ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	j := i
	if r == ' ' {
		j += n
	}
	if e := symbols(s, j); e > j {
		for e < len(s) && isNewline(rune(s[e])) {
			e++
		}
		return e
	}
	return whitespace(s, i, r, n)
}

// whitespace matches the patterns' last three alternatives at i, where r (n bytes) is \s: a letter,
// number or other symbol matched an earlier one.
func whitespace(s string, i int, r rune, n int) int {
	end := i + n
	lastNL := -1
	if isNewline(r) {
		lastNL = i
	}
	for end < len(s) {
		r2, n2 := decode(s, end)
		if !isSpace(r2) {
			break
		}
		if isNewline(r2) {
			lastNL = end
		}
		end += n2
	}
	// 5. \s*[\r\n]+: greedy \s* backs off to the run's last newline.
	if lastNL >= 0 {
		return lastNL + 1
	}
	// 6. \s+(?!\S): the run, less its last rune when a non-space follows.
	if end == len(s) {
		return end
	}
	if _, last := utf8.DecodeLastRuneInString(s[i:end]); end-last > i {
		return end - last
	}
	// 7. \s+
	return end
}

// contraction matches s|t|re|ve|m|ll|d, case-insensitively, at i; it returns the match's end or 0.
func contraction(s string, i int) int {
	if i >= len(s) {
		return 0
	}
	switch lower(s[i]) {
	case 's', 't', 'm', 'd':
		return i + 1
	case 'r', 'v':
		if i+1 < len(s) && lower(s[i+1]) == 'e' {
			return i + 2
		}
	case 'l':
		if i+1 < len(s) && lower(s[i+1]) == 'l' {
			return i + 2
		}
	}
	return 0
}

func lower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func letters(s string, j int) int {
	for j < len(s) {
		if c := s[j]; c < utf8.RuneSelf {
			if asciiClass[c]&clsLetter == 0 {
				break
			}
			j++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[j:])
		if !unicode.IsLetter(r) {
			break
		}
		j += n
	}
	return j
}

// symbols matches [^\s\p{L}\p{N}]* at j and returns its end.
func symbols(s string, j int) int {
	for j < len(s) {
		if c := s[j]; c < utf8.RuneSelf {
			if asciiClass[c] != 0 {
				break
			}
			j++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[j:])
		if unicode.IsSpace(r) || unicode.IsLetter(r) || unicode.IsNumber(r) {
			break
		}
		j += n
	}
	return j
}
