package tokenizer

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// UnknownTokenError is an id that names no token of the vocabulary (Hugging Face drops such ids
// silently; a gateway would then answer text for tokens nobody sent, so they are an error here). Index
// is the id's position in the request's token list, or -1 for a stream.
type UnknownTokenError struct {
	ID    int
	Index int
}

func (e *UnknownTokenError) Error() string {
	if e.Index < 0 {
		return fmt.Sprintf("tokenizer: token id %d is not in the vocabulary", e.ID)
	}
	return fmt.Sprintf("tokenizer: tokens[%d]: token id %d is not in the vocabulary", e.Index, e.ID)
}

// Per-id decoding facts, set at Load.
const (
	tokKnown    = 1 << iota // the id names a token
	tokSpecial              // skip_special_tokens drops it
	tokComplete             // its bytes are whole UTF-8 characters, so a stream can emit them as they are
)

// appendTokenBytes appends what Hugging Face's ByteLevel decoder makes of one token (tokenizers'
// decoders/byte_level.rs): its runes mapped back through GPT-2's table, or, when a rune is not in the
// table (an added token such as "<|im_end|>\n"), the token's own UTF-8. Added tokens go through it too;
// printable ASCII stands for itself, so "<|im_end|>" comes out as written.
func appendTokenBytes(dst []byte, tok string) []byte {
	n := len(dst)
	for _, r := range tok {
		c, ok := runeByte(r)
		if !ok {
			return append(dst[:n], tok...)
		}
		dst = append(dst, c)
	}
	return dst
}

func runeByte(r rune) (byte, bool) {
	if r < 256 && byteRune[r] == r {
		return byte(r), true
	}
	if i := r - 256; i >= 0 && i < 256-188 { // the 68 unprintable bytes, in byte order
		return unprintable[i], true
	}
	return 0, false
}

var unprintable = func() (t [256 - 188]byte) {
	for b := range 256 {
		if r := byteRune[b]; r >= 256 {
			t[r-256] = byte(b)
		}
	}
	return t
}()

// setDecoding fills the per-id tables Decode reads, so decoding a token is a slice index.
func (t *Tokenizer) setDecoding(added []addedToken) {
	if t.spDec != nil {
		t.setDecodingSP(added)
		return
	}
	t.text = make([]string, len(t.tokens))
	t.flags = make([]uint8, len(t.tokens))
	// All the tokens' bytes in one string: a string each would be 150k objects more for the GC.
	var all []byte
	ends := make([]int, len(t.tokens))
	for id, tok := range t.tokens {
		all = appendTokenBytes(all, tok)
		ends[id] = len(all)
	}
	text := string(all)
	start := 0
	for id, tok := range t.tokens {
		s := text[start:ends[id]]
		start = ends[id]
		if tok == "" {
			continue
		}
		t.text[id] = s
		t.flags[id] = tokKnown
		if utf8.ValidString(s) {
			t.flags[id] |= tokComplete
		}
	}
	for _, a := range added {
		if a.Special {
			t.flags[a.ID] |= tokSpecial
		}
	}
}

// markSpecial makes tokens spelled as one of names special too: transformers registers the
// tokenizer_config's special tokens (eos_token, additional_special_tokens, ...) as special in the
// backend, whose skip_special_tokens compares tokens by spelling.
func (t *Tokenizer) markSpecial(names map[string]bool) {
	if len(names) == 0 {
		return
	}
	for id, tok := range t.tokens {
		if tok != "" && names[tok] {
			t.flags[id] |= tokSpecial
		}
	}
}

// Decode returns the text of ids as Hugging Face's decode(ids, skip_special_tokens=skipSpecial) does
// for the tokenizers Load accepts: the tokens' bytes joined, bytes that are not UTF-8 replaced by U+FFFD
// as Rust's String::from_utf8_lossy does (one per maximal invalid subsequence), then, if
// tokenizer_config.json enables clean_up_tokenization_spaces, transformers' clean-up. An id outside the
// vocabulary is an *[UnknownTokenError].
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) (string, error) {
	n := 0
	for i, id := range ids {
		f, err := t.tokenFlags(id, i)
		if err != nil {
			return "", err
		}
		if skipSpecial && f&tokSpecial != 0 {
			continue
		}
		n += len(t.text[id])
	}
	if t.spDec != nil {
		return t.decodeSP(ids, skipSpecial, n), nil
	}
	var b strings.Builder
	b.Grow(n)
	for _, id := range ids {
		if skipSpecial && t.flags[id]&tokSpecial != 0 {
			continue
		}
		b.WriteString(t.text[id])
	}
	s := b.String()
	if !utf8.ValidString(s) {
		out, _ := appendLossy(make([]byte, 0, len(s)+8), []byte(s), true)
		s = string(out)
	}
	if t.cleanUp {
		s = cleanUpTokenization(s)
	}
	return s, nil
}

// CheckIDs returns an *[UnknownTokenError] for the first of ids that names no token (past the
// vocabulary, or a hole between added ids), as Decode would refuse it. A prompt given as token ids goes
// to the engine as it is, and an engine handed an id past its embedding table fails the request late
// or reads memory it should not; the caller names its own field in the 400.
func (t *Tokenizer) CheckIDs(ids []uint32) error {
	for i, id := range ids {
		if id >= uint32(len(t.flags)) || t.flags[id]&tokKnown == 0 {
			return &UnknownTokenError{ID: int(id), Index: i}
		}
	}
	return nil
}

func (t *Tokenizer) tokenFlags(id, index int) (uint8, error) {
	if id < 0 || id >= len(t.flags) || t.flags[id]&tokKnown == 0 {
		return 0, &UnknownTokenError{ID: id, Index: index}
	}
	return t.flags[id], nil
}

// appendLossy appends s to dst with each maximal invalid UTF-8 subsequence replaced by U+FFFD (Unicode's
// "substitution of maximal subparts", which Rust's from_utf8_lossy and WHATWG's TextDecoder both follow;
// Go's strings.ToValidUTF8 replaces whole runs, utf8.DecodeRune each byte). Unless final, a tail that
// is the start of a character more bytes could complete is left unread: it returns how much of s it read.
func appendLossy(dst, s []byte, final bool) ([]byte, int) {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			dst = append(dst, c)
			i++
			continue
		}
		if r, size := utf8.DecodeRune(s[i:]); r != utf8.RuneError || size > 1 {
			dst = append(dst, s[i:i+size]...)
			i += size
			continue
		}
		k := validPrefix(s[i:])
		if i+k == len(s) && k > 0 && !final {
			return dst, i
		}
		dst = utf8.AppendRune(dst, utf8.RuneError)
		i += max(k, 1)
	}
	return dst, len(s)
}

// validPrefix is how many bytes at the start of s (which is not a whole valid character) begin some
// valid character: 0 for a byte no character starts with, else the lead byte and the continuation bytes
// in the ranges it allows (Unicode Table 3-7: E0 needs A0-BF next, ED 80-9F, F0 90-BF, F4 80-8F).
func validPrefix(s []byte) int {
	c := s[0]
	var n int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		n = 2
	case c == 0xE0:
		n, lo = 3, 0xA0
	case c == 0xED:
		n, hi = 3, 0x9F
	case c >= 0xE1 && c <= 0xEF:
		n = 3
	case c == 0xF0:
		n, lo = 4, 0x90
	case c == 0xF4:
		n, hi = 4, 0x8F
	case c >= 0xF1 && c <= 0xF3:
		n = 4
	default:
		return 0
	}
	k := 1
	for ; k < n && k < len(s); k++ {
		if s[k] < lo || s[k] > hi {
			break
		}
		lo, hi = 0x80, 0xBF
	}
	return k
}

// cleanUpTokenization is transformers' clean_up_tokenization: spaces before punctuation and English
// contractions removed, each pattern replaced everywhere in turn.
func cleanUpTokenization(s string) string {
	for _, p := range cleanUpPairs {
		if strings.Contains(s, p[0]) {
			s = strings.ReplaceAll(s, p[0], p[1])
		}
	}
	return s
}

var cleanUpPairs = [...][2]string{
	{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
	{" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
}
