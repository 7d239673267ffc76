// Package jsonscan is the gateway's JSON reader for its hot paths: a small validating scanner over raw
// bytes. Bodies are large (long prompts) and engines take many fields the gateway never looks at, so
// the readers (internal/backend/body's ParseRequest and body rewrites, internal/reqcheck's rules) walk
// an object once, decode only the few values they need, and splice the rest through untouched. The
// scanner accepts exactly what json.Valid accepts (fuzz-checked in tests). It imports nothing but the
// standard library.
package jsonscan

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

var ErrSyntax = errors.New("invalid JSON")

func SyntaxError(msg string, off int) error {
	return fmt.Errorf("%w: %s at offset %d", ErrSyntax, msg, off)
}

// strClass classifies string bytes: 0 plain, 1 end quote, 2 backslash, 3 control character.
var strClass = func() (t [256]uint8) {
	for i := range 0x20 {
		t[i] = 3
	}
	t['"'] = 1
	t['\\'] = 2
	return t
}()

func IsWS(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func SkipWS(b []byte, i int) int {
	for i < len(b) && IsWS(b[i]) {
		i++
	}
	return i
}

// ScanString validates the string starting at b[i] == '"' and returns the index just past its
// closing quote and whether it contains escapes.
func ScanString(b []byte, i int) (end int, escaped bool, err error) {
	start := i
	i++
	for i < len(b) {
		// Skip 8 plain bytes at a time: prompts are long and mostly plain text.
		for i+8 <= len(b) && !special8(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		if i >= len(b) {
			break
		}
		switch strClass[b[i]] {
		case 0:
			i++
		case 1:
			return i + 1, escaped, nil
		case 2:
			escaped = true
			if i+1 >= len(b) {
				return 0, false, SyntaxError("unterminated string", start)
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return 0, false, SyntaxError("short unicode escape", i)
				}
				for _, h := range b[i+2 : i+6] {
					if !isHex(h) {
						return 0, false, SyntaxError("bad unicode escape", i)
					}
				}
				i += 6
			default:
				return 0, false, SyntaxError("bad escape", i)
			}
		default:
			return 0, false, SyntaxError("control character in string", i)
		}
	}
	return 0, false, SyntaxError("unterminated string", start)
}

const (
	lo8 = 0x0101010101010101
	hi8 = 0x8080808080808080
)

// special8 reports whether any of the 8 bytes in x may be a quote, a backslash or a control
// character (false positives are allowed: the byte loop then decides).
func special8(x uint64) bool {
	q := x ^ (lo8 * '"')
	bs := x ^ (lo8 * '\\')
	return ((x-lo8*0x20)&^x|(q-lo8)&^q|(bs-lo8)&^bs)&hi8 != 0
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// ScanNumber validates the JSON number starting at b[i] and returns the index just past it.
func ScanNumber(b []byte, i int) (int, error) {
	start := i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return 0, SyntaxError("bad number", start)
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return 0, SyntaxError("bad number", start)
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return 0, SyntaxError("bad number", start)
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	return i, nil
}

// MaxDepth bounds nesting so hostile bodies cannot exhaust the stack (encoding/json allows 10000).
const MaxDepth = 10000

// SkipValue validates the value starting at b[i] (no leading whitespace) and returns the index just past it.
func SkipValue(b []byte, i int) (int, error) { return SkipValueDepth(b, i, 0) }

// SkipValueDepth is SkipValue for a value nested depth levels deep, bounded by MaxDepth.
func SkipValueDepth(b []byte, i, depth int) (int, error) {
	if i >= len(b) {
		return 0, SyntaxError("unexpected end of input", i)
	}
	switch c := b[i]; {
	case c == '"':
		end, _, err := ScanString(b, i)
		return end, err
	case c == '{':
		return skipObject(b, i, depth)
	case c == '[':
		return skipArray(b, i, depth)
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	case c == '-' || isDigit(c):
		return ScanNumber(b, i)
	default:
		return 0, SyntaxError("unexpected character", i)
	}
}

// skipObject validates the object opening at b[i] and returns the index just past it.
func skipObject(b []byte, i, depth int) (int, error) {
	if depth >= MaxDepth {
		return 0, SyntaxError("nesting too deep", i)
	}
	i = SkipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return 0, SyntaxError("expected object key", i)
		}
		end, _, err := ScanString(b, i)
		if err != nil {
			return 0, err
		}
		i = SkipWS(b, end)
		if i >= len(b) || b[i] != ':' {
			return 0, SyntaxError("expected ':'", i)
		}
		i = SkipWS(b, i+1)
		if i, err = SkipValueDepth(b, i, depth+1); err != nil {
			return 0, err
		}
		i = SkipWS(b, i)
		if i >= len(b) {
			return 0, SyntaxError("unterminated object", i)
		}
		if b[i] == '}' {
			return i + 1, nil
		}
		if b[i] != ',' {
			return 0, SyntaxError("expected ',' or '}'", i)
		}
		i = SkipWS(b, i+1)
	}
}

// skipArray validates the array opening at b[i] and returns the index just past it.
func skipArray(b []byte, i, depth int) (int, error) {
	if depth >= MaxDepth {
		return 0, SyntaxError("nesting too deep", i)
	}
	i = SkipWS(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, nil
	}
	for {
		var err error
		if i, err = SkipValueDepth(b, i, depth+1); err != nil {
			return 0, err
		}
		i = SkipWS(b, i)
		if i >= len(b) {
			return 0, SyntaxError("unterminated array", i)
		}
		if b[i] == ']' {
			return i + 1, nil
		}
		if b[i] != ',' {
			return 0, SyntaxError("expected ',' or ']'", i)
		}
		i = SkipWS(b, i+1)
	}
}

func literal(b []byte, i int, lit string) (int, error) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return 0, SyntaxError("bad literal", i)
	}
	return i + len(lit), nil
}

// Member is one "key": value pair of an object, as offsets into the scanned bytes.
type Member struct {
	KeyStart int // index of the key's opening quote
	KeyEnd   int // index just past the key's closing quote
	KeyEsc   bool
	ValStart int
	ValEnd   int
}

// KeyIs reports whether the Member's key equals name (decoding escapes when the key has any).
func (m Member) KeyIs(b []byte, name string) bool {
	raw := b[m.KeyStart+1 : m.KeyEnd-1]
	if !m.KeyEsc {
		return string(raw) == name
	}
	var k string
	if json.Unmarshal(b[m.KeyStart:m.KeyEnd], &k) != nil {
		return false
	}
	return k == name
}

// Key returns the Member's decoded key.
func (m Member) Key(b []byte) string {
	if !m.KeyEsc {
		return string(b[m.KeyStart+1 : m.KeyEnd-1])
	}
	var k string
	_ = json.Unmarshal(b[m.KeyStart:m.KeyEnd], &k) // validated by ScanString
	return k
}

func (m Member) Value(b []byte) []byte { return b[m.ValStart:m.ValEnd] }

// ObjIter walks the members of one object without allocating.
type ObjIter struct {
	b     []byte
	i     int // next position to read
	open  int // index of '{'
	Close int // index of '}' once done
	n     int // members seen
	done  bool
	Err   error // why the walk stopped early; nil at a clean end
}

// NewObjIter starts iterating the object at b[i] (leading whitespace allowed).
func NewObjIter(b []byte, i int) ObjIter {
	i = SkipWS(b, i)
	it := ObjIter{b: b, open: i}
	if i >= len(b) || b[i] != '{' {
		it.Err = ErrNotObject
		it.done = true
		return it
	}
	it.i = SkipWS(b, i+1)
	return it
}

// ResumeObjIter goes on with the walk of the object whose first n members b holds up to i, the
// start of member n's value, as if NextKey had just returned that member: a caller that walked
// another object with the same bytes up to i reads this one from there. The caller reads the value
// and calls ValueDone, as after NextKey.
func ResumeObjIter(b []byte, i, n int) ObjIter {
	return ObjIter{b: b, open: SkipWS(b, 0), i: i, n: n}
}

var ErrNotObject = errors.New("not a JSON object")

// Next returns the next Member; ok is false at the end of the object or on error (see it.Err).
func (it *ObjIter) Next() (m Member, ok bool) {
	if m, ok = it.NextKey(); !ok {
		return m, false
	}
	end, err := SkipValueDepth(it.b, m.ValStart, 1)
	if err != nil {
		return it.Fail(err)
	}
	m.ValEnd = end
	it.ValueDone(end)
	return m, true
}

// NextKey is next without reading the value: m.ValEnd is unset, and the caller must read the value
// itself and call valueDone (or fail).
func (it *ObjIter) NextKey() (m Member, ok bool) {
	if it.done {
		return Member{}, false
	}
	b, i := it.b, it.i
	if i < len(b) && b[i] == '}' {
		it.Close, it.done = i, true
		return Member{}, false
	}
	if it.n > 0 {
		if i >= len(b) || b[i] != ',' {
			return it.Fail(SyntaxError("expected ',' or '}'", i))
		}
		i = SkipWS(b, i+1)
	}
	if i >= len(b) || b[i] != '"' {
		return it.Fail(SyntaxError("expected object key", i))
	}
	m.KeyStart = i
	end, esc, err := ScanString(b, i)
	if err != nil {
		return it.Fail(err)
	}
	m.KeyEnd, m.KeyEsc = end, esc
	i = SkipWS(b, end)
	if i >= len(b) || b[i] != ':' {
		return it.Fail(SyntaxError("expected ':'", i))
	}
	m.ValStart = SkipWS(b, i+1)
	it.i = m.ValStart
	it.n++
	return m, true
}

// ValueDone records that the current Member's value ends at end.
func (it *ObjIter) ValueDone(end int) { it.i = SkipWS(it.b, end) }

func (it *ObjIter) Fail(err error) (Member, bool) {
	it.Err, it.done = err, true
	return Member{}, false
}

// ArrIter walks the elements of one array without allocating.
type ArrIter struct {
	b     []byte
	i     int
	Close int // index of ']' once done
	n     int
	done  bool
	Err   error // why the walk stopped early; nil at a clean end
}

func NewArrIter(b []byte, i int) ArrIter {
	i = SkipWS(b, i)
	if i >= len(b) || b[i] != '[' {
		return ArrIter{done: true, Err: errors.New("not a JSON array")}
	}
	return ArrIter{b: b, i: SkipWS(b, i+1)}
}

// Next returns the next element as [start, end) offsets.
func (it *ArrIter) Next() (start, end int, ok bool) {
	if start, ok = it.NextStart(); !ok {
		return 0, 0, false
	}
	end, err := SkipValueDepth(it.b, start, 1)
	if err != nil {
		it.Fail(err)
		return 0, 0, false
	}
	it.ValueDone(end)
	return start, end, true
}

// NextStart is Next without reading the element, for callers that decode it as they read it (so it
// is scanned once): it returns where the element starts, and the caller must read it and call
// ValueDone (or Fail).
func (it *ArrIter) NextStart() (start int, ok bool) {
	if it.done {
		return 0, false
	}
	b, i := it.b, it.i
	if i < len(b) && b[i] == ']' {
		it.Close, it.done = i, true
		return 0, false
	}
	if it.n > 0 {
		if i >= len(b) || b[i] != ',' {
			it.Fail(SyntaxError("expected ',' or ']'", i))
			return 0, false
		}
		i = SkipWS(b, i+1)
	}
	it.i = i
	it.n++
	return i, true
}

// ValueDone records that the current element ends at end.
func (it *ArrIter) ValueDone(end int) { it.i = SkipWS(it.b, end) }

func (it *ArrIter) Fail(err error) { it.Err, it.done = err, true }

// CheckTopObject validates that body is exactly one JSON object (surrounding whitespace allowed) and
// returns the index of its closing brace.
func CheckTopObject(body []byte) (closeIdx int, err error) {
	it := NewObjIter(body, 0)
	for {
		if _, ok := it.Next(); !ok {
			break
		}
	}
	if it.Err != nil {
		return 0, it.Err
	}
	if SkipWS(body, it.Close+1) != len(body) {
		return 0, SyntaxError("trailing data after object", it.Close+1)
	}
	return it.Close, nil
}

// Unquote decodes a raw JSON string value; the fast path copies when there are no escapes.
func Unquote(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), true
	}
	b, ok := AppendUnquoted(make([]byte, 0, len(raw)), raw)
	return string(b), ok
}

// AppendUnquoted appends the decoded raw JSON string (already validated by ScanString) to dst.
func AppendUnquoted(dst []byte, raw []byte) ([]byte, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return dst, false
	}
	s := raw[1 : len(raw)-1]
	for {
		i := bytes.IndexByte(s, '\\')
		if i < 0 {
			return append(dst, s...), true
		}
		dst = append(dst, s[:i]...)
		if i+1 >= len(s) {
			return dst, false
		}
		switch c := s[i+1]; c {
		case '"', '\\', '/':
			dst = append(dst, c)
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, n := decodeU(s[i:])
			if n == 0 {
				return dst, false
			}
			dst = utf8.AppendRune(dst, r)
			s = s[i+n:]
			continue
		default:
			return dst, false
		}
		s = s[i+2:]
	}
}

// decodeU decodes a \uXXXX escape (with a following low surrogate when it is a high one) at the start
// of s; n is the bytes consumed, 0 when malformed. Lone surrogates become U+FFFD, as in encoding/json.
func decodeU(s []byte) (r rune, n int) {
	r1, ok := hex4(s)
	if !ok {
		return 0, 0
	}
	if !utf16.IsSurrogate(r1) {
		return r1, 6
	}
	if r2, ok := hex4(s[6:]); ok && len(s) >= 12 && s[6] == '\\' {
		if dec := utf16.DecodeRune(r1, r2); dec != utf8.RuneError {
			return dec, 12
		}
	}
	return utf8.RuneError, 6
}

func hex4(s []byte) (rune, bool) {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return 0, false
	}
	var r rune
	for _, c := range s[2:6] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// IsNull reports whether a raw value is the literal null.
func IsNull(raw []byte) bool { return string(raw) == "null" }

// ParseBool decodes a raw JSON boolean.
func ParseBool(raw []byte) (v, ok bool) {
	switch string(raw) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

// ParseInt decodes a raw JSON number that has an integral value (2 and 2.0 both give 2).
func ParseInt(raw []byte) (int64, bool) {
	if len(raw) == 0 || (raw[0] != '-' && !isDigit(raw[0])) {
		return 0, false
	}
	if v, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
		return v, true
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || f != float64(int64(f)) {
		return 0, false
	}
	return int64(f), true
}

// FindMember returns the last Member named key of the object at b[i] (last wins, like encoding/json).
func FindMember(b []byte, i int, key string) (Member, bool) {
	it := NewObjIter(b, i)
	var found Member
	ok := false
	for {
		m, more := it.Next()
		if !more {
			break
		}
		if m.KeyIs(b, key) {
			found, ok = m, true
		}
	}
	return found, ok && it.Err == nil
}

// TopValue validates that b is one JSON value and returns its span.
func TopValue(b []byte) (int, int, error) {
	s := SkipWS(b, 0)
	e, err := SkipValue(b, s)
	if err != nil {
		return 0, 0, err
	}
	if SkipWS(b, e) != len(b) {
		return 0, 0, SyntaxError("trailing data", e)
	}
	return s, e, nil
}
