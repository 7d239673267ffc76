package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// The rune classes of patternO200k: upper-ish (Lu Lt Lm Lo M), lower-ish (Ll Lm Lo M), letters and
// numbers. Lm, Lo and marks are both upper- and lower-ish, which is what makes the word alternatives
// backtrack; the scanner below resolves that without backtracking.
const (
	oUpper = 1 << iota
	oLower
	oLetter
	oNumber
)

func o200kClass(r rune) uint8 {
	if r < utf8.RuneSelf {
		switch c := asciiClass[r]; {
		case c&clsNumber != 0:
			return oNumber
		case c&clsLetter == 0:
			return 0
		case r >= 'a':
			return oLower | oLetter
		default:
			return oUpper | oLetter
		}
	}
	switch {
	case unicode.Is(unicode.Ll, r):
		return oLower | oLetter
	case unicode.Is(unicode.Lu, r) || unicode.Is(unicode.Lt, r):
		return oUpper | oLetter
	case unicode.Is(unicode.Lm, r) || unicode.Is(unicode.Lo, r):
		return oUpper | oLower | oLetter
	case unicode.Is(unicode.M, r):
		return oUpper | oLower
	case unicode.IsNumber(r):
		return oNumber
	}
	return 0
}

// o200kSyntax is what sets apart the patterns of the o200k shape: gpt-oss's (patternO200k) ends its
// words with English contractions and groups up to three digits; Mistral's Tekken (patternTekken, Mistral
// NeMo and later) has no contractions and one digit per piece.
type o200kSyntax struct {
	contractions bool
	digits       int
}

var (
	syntaxO200k  = &o200kSyntax{contractions: true, digits: 3}
	syntaxTekken = &o200kSyntax{contractions: false, digits: 1}
)

// nextPieceO200k returns the end of the piece of an o200k-shaped pattern that starts at i (i < len(s)),
// its alternatives tried in the regex's order as nextPiece does for Qwen's.
func (x *o200kSyntax) nextPiece(s string, i int) int {
	if e := x.asciiWord(s, i); e > 0 {
		return e
	}
	r, n := decode(s, i)
	c := o200kClass(r)
	// 1, 2: [^\r\n\p{L}\p{N}]? then U*W+ or U+W*, then a contraction. The optional prefix is tried
	// first, then none, for each word alternative in turn.
	prefix := c&(oLetter|oNumber) == 0 && !isNewline(r) && i+n < len(s)
	if prefix {
		if e := x.upperLower(s, i+n); e > 0 {
			return e
		}
	}
	if e := x.upperLower(s, i); e > 0 {
		return e
	}
	if prefix {
		if e := x.upperPlus(s, i+n); e > 0 {
			return e
		}
	}
	if e := x.upperPlus(s, i); e > 0 {
		return e
	}
	// 3. \p{N}{1,3} (gpt-oss) or \p{N} (Tekken)
	if c&oNumber != 0 {
		e := i + n
		for k := 1; k < x.digits && e < len(s); k++ {
			r2, n2 := decode(s, e)
			if !isNumber(r2) {
				break
			}
			e += n2
		}
		return e
	}
	// 4. ' ?[^\s\p{L}\p{N}]+[\r\n/]*'
	j := i
	if r == ' ' {
		j += n
	}
	if e := symbols(s, j); e > j {
		for e < len(s) && (isNewline(rune(s[e])) || s[e] == '/') {
			e++
		}
		return e
	}
	return whitespace(s, i, r, n)
}

// asciiWord returns the end of the piece at i when it is an ASCII word, or 0: an optional ASCII prefix
// (neither a letter, a digit nor a newline), then [A-Z]*[a-z]* with at least one letter, ended by an
// ASCII byte. For ASCII letters U is A-Z and W is a-z, so alternatives 1 and 2 both come to that
// (1 when there are lower-case letters, 2 when not); a non-ASCII rune after the letters could continue
// the word, and the rune path decides. Prose is mostly such pieces, and deciding them on bytes skips
// a rune decode and a class lookup per letter, most of the encode time of Mistral NeMo's chat.
func (x *o200kSyntax) asciiWord(s string, i int) int {
	j := i
	if c := s[i]; c >= utf8.RuneSelf {
		return 0
	} else if asciiClass[c]&(clsLetter|clsNumber) == 0 && !isNewline(rune(c)) {
		j++
	}
	k := j
	for k < len(s) && s[k]-'A' < 26 {
		k++
	}
	for k < len(s) && s[k]-'a' < 26 {
		k++
	}
	if k == j || k < len(s) && s[k] >= utf8.RuneSelf {
		return 0
	}
	return x.withContraction(s, k)
}

// upperLower matches [U]*[W]+ and an optional contraction at j; it returns the end or 0. Greedy U* then
// W+: when the U run is followed by a W rune, W+ takes the W run from there; otherwise U* gives back
// runes until W+ can start, which is at the run's last W rune, and W+ ends right after it.
func (x *o200kSyntax) upperLower(s string, j int) int {
	k, lastW := j, 0
	for k < len(s) {
		r, n := decode(s, k)
		c := o200kClass(r)
		if c&oUpper == 0 {
			break
		}
		k += n
		if c&oLower != 0 {
			lastW = k
		}
	}
	if e := lowerRun(s, k); e > k {
		return x.withContraction(s, e)
	}
	if lastW == 0 {
		return 0
	}
	return x.withContraction(s, lastW)
}

// upperPlus matches [U]+[W]* and an optional contraction at j; it returns the end or 0.
func (x *o200kSyntax) upperPlus(s string, j int) int {
	k := j
	for k < len(s) {
		r, n := decode(s, k)
		if o200kClass(r)&oUpper == 0 {
			break
		}
		k += n
	}
	if k == j {
		return 0
	}
	return x.withContraction(s, lowerRun(s, k))
}

func lowerRun(s string, k int) int {
	for k < len(s) {
		r, n := decode(s, k)
		if o200kClass(r)&oLower == 0 {
			break
		}
		k += n
	}
	return k
}

func (x *o200kSyntax) withContraction(s string, e int) int {
	if x.contractions && e < len(s) && s[e] == '\'' {
		if c := contraction(s, e+1); c > 0 {
			return c
		}
	}
	return e
}
