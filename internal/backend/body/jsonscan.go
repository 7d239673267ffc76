package body

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

// This file is a small validating JSON scanner over raw bytes. Bodies are large (long prompts) and
// engines take many fields the gateway never looks at, so the hot paths (ParseRequest, the body
// rewrites) walk the top-level object once, decode only the few values they need, and splice the
// rest through untouched. The scanner accepts exactly what json.Valid accepts (fuzz-checked in tests).

var errSyntax = errors.New("invalid JSON")

func syntaxErr(msg string, off int) error {
	return fmt.Errorf("%w: %s at offset %d", errSyntax, msg, off)
}

// byteClass classifies string bytes: 0 plain, 1 end quote, 2 backslash, 3 control character.
var strClass = func() (t [256]uint8) {
	for i := range 0x20 {
		t[i] = 3
	}
	t['"'] = 1
	t['\\'] = 2
	return t
}()

func isWS(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipWS(b []byte, i int) int {
	for i < len(b) && isWS(b[i]) {
		i++
	}
	return i
}

// scanString validates the string starting at b[i] == '"' and returns the index just past its
// closing quote and whether it contains escapes.
func scanString(b []byte, i int) (end int, escaped bool, err error) {
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
				return 0, false, syntaxErr("unterminated string", start)
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return 0, false, syntaxErr("short unicode escape", i)
				}
				for _, h := range b[i+2 : i+6] {
					if !isHex(h) {
						return 0, false, syntaxErr("bad unicode escape", i)
					}
				}
				i += 6
			default:
				return 0, false, syntaxErr("bad escape", i)
			}
		default:
			return 0, false, syntaxErr("control character in string", i)
		}
	}
	return 0, false, syntaxErr("unterminated string", start)
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

// scanNumber validates the JSON number starting at b[i].
func scanNumber(b []byte, i int) (int, error) {
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
		return 0, syntaxErr("bad number", start)
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return 0, syntaxErr("bad number", start)
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
			return 0, syntaxErr("bad number", start)
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	return i, nil
}

// maxDepth bounds nesting so hostile bodies cannot exhaust the stack (encoding/json allows 10000).
const maxDepth = 10000

// skipValue validates the value starting at b[i] (no leading whitespace) and returns the index just past it.
func skipValue(b []byte, i int) (int, error) { return skipValueDepth(b, i, 0) }

func skipValueDepth(b []byte, i, depth int) (int, error) {
	if i >= len(b) {
		return 0, syntaxErr("unexpected end of input", i)
	}
	switch c := b[i]; {
	case c == '"':
		end, _, err := scanString(b, i)
		return end, err
	case c == '{':
		if depth >= maxDepth {
			return 0, syntaxErr("nesting too deep", i)
		}
		i = skipWS(b, i+1)
		if i < len(b) && b[i] == '}' {
			return i + 1, nil
		}
		for {
			if i >= len(b) || b[i] != '"' {
				return 0, syntaxErr("expected object key", i)
			}
			end, _, err := scanString(b, i)
			if err != nil {
				return 0, err
			}
			i = skipWS(b, end)
			if i >= len(b) || b[i] != ':' {
				return 0, syntaxErr("expected ':'", i)
			}
			i = skipWS(b, i+1)
			if i, err = skipValueDepth(b, i, depth+1); err != nil {
				return 0, err
			}
			i = skipWS(b, i)
			if i >= len(b) {
				return 0, syntaxErr("unterminated object", i)
			}
			if b[i] == '}' {
				return i + 1, nil
			}
			if b[i] != ',' {
				return 0, syntaxErr("expected ',' or '}'", i)
			}
			i = skipWS(b, i+1)
		}
	case c == '[':
		if depth >= maxDepth {
			return 0, syntaxErr("nesting too deep", i)
		}
		i = skipWS(b, i+1)
		if i < len(b) && b[i] == ']' {
			return i + 1, nil
		}
		for {
			var err error
			if i, err = skipValueDepth(b, i, depth+1); err != nil {
				return 0, err
			}
			i = skipWS(b, i)
			if i >= len(b) {
				return 0, syntaxErr("unterminated array", i)
			}
			if b[i] == ']' {
				return i + 1, nil
			}
			if b[i] != ',' {
				return 0, syntaxErr("expected ',' or ']'", i)
			}
			i = skipWS(b, i+1)
		}
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	case c == '-' || isDigit(c):
		return scanNumber(b, i)
	default:
		return 0, syntaxErr("unexpected character", i)
	}
}

func literal(b []byte, i int, lit string) (int, error) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return 0, syntaxErr("bad literal", i)
	}
	return i + len(lit), nil
}

// member is one "key": value pair of an object, as offsets into the scanned bytes.
type member struct {
	keyStart int // index of the key's opening quote
	keyEnd   int // index just past the key's closing quote
	keyEsc   bool
	valStart int
	valEnd   int
}

// keyIs reports whether the member's key equals name (decoding escapes when the key has any).
func (m member) keyIs(b []byte, name string) bool {
	raw := b[m.keyStart+1 : m.keyEnd-1]
	if !m.keyEsc {
		return string(raw) == name
	}
	var k string
	if json.Unmarshal(b[m.keyStart:m.keyEnd], &k) != nil {
		return false
	}
	return k == name
}

// key returns the member's decoded key.
func (m member) key(b []byte) string {
	if !m.keyEsc {
		return string(b[m.keyStart+1 : m.keyEnd-1])
	}
	var k string
	_ = json.Unmarshal(b[m.keyStart:m.keyEnd], &k) // validated by scanString
	return k
}

func (m member) value(b []byte) []byte { return b[m.valStart:m.valEnd] }

// objIter walks the members of one object without allocating.
type objIter struct {
	b     []byte
	i     int // next position to read
	open  int // index of '{'
	close int // index of '}' once done
	n     int // members seen
	done  bool
	err   error
}

// newObjIter starts iterating the object at b[i] (leading whitespace allowed).
func newObjIter(b []byte, i int) objIter {
	i = skipWS(b, i)
	it := objIter{b: b, open: i}
	if i >= len(b) || b[i] != '{' {
		it.err = errNotObject
		it.done = true
		return it
	}
	it.i = skipWS(b, i+1)
	return it
}

var errNotObject = errors.New("not a JSON object")

// next returns the next member; ok is false at the end of the object or on error (see it.err).
func (it *objIter) next() (m member, ok bool) {
	if m, ok = it.nextKey(); !ok {
		return m, false
	}
	end, err := skipValueDepth(it.b, m.valStart, 1)
	if err != nil {
		return it.fail(err)
	}
	m.valEnd = end
	it.valueDone(end)
	return m, true
}

// nextKey is next without reading the value: m.valEnd is unset, and the caller must read the value
// itself and call valueDone (or fail).
func (it *objIter) nextKey() (m member, ok bool) {
	if it.done {
		return member{}, false
	}
	b, i := it.b, it.i
	if i < len(b) && b[i] == '}' {
		it.close, it.done = i, true
		return member{}, false
	}
	if it.n > 0 {
		if i >= len(b) || b[i] != ',' {
			return it.fail(syntaxErr("expected ',' or '}'", i))
		}
		i = skipWS(b, i+1)
	}
	if i >= len(b) || b[i] != '"' {
		return it.fail(syntaxErr("expected object key", i))
	}
	m.keyStart = i
	end, esc, err := scanString(b, i)
	if err != nil {
		return it.fail(err)
	}
	m.keyEnd, m.keyEsc = end, esc
	i = skipWS(b, end)
	if i >= len(b) || b[i] != ':' {
		return it.fail(syntaxErr("expected ':'", i))
	}
	m.valStart = skipWS(b, i+1)
	it.i = m.valStart
	it.n++
	return m, true
}

// valueDone records that the current member's value ends at end.
func (it *objIter) valueDone(end int) { it.i = skipWS(it.b, end) }

func (it *objIter) fail(err error) (member, bool) {
	it.err, it.done = err, true
	return member{}, false
}

// arrIter walks the elements of one array without allocating.
type arrIter struct {
	b    []byte
	i    int
	n    int
	done bool
	err  error
}

func newArrIter(b []byte, i int) arrIter {
	i = skipWS(b, i)
	if i >= len(b) || b[i] != '[' {
		return arrIter{done: true, err: errors.New("not a JSON array")}
	}
	return arrIter{b: b, i: skipWS(b, i+1)}
}

// next returns the next element as [start, end) offsets.
func (it *arrIter) next() (start, end int, ok bool) {
	if it.done {
		return 0, 0, false
	}
	b, i := it.b, it.i
	if i < len(b) && b[i] == ']' {
		it.done = true
		return 0, 0, false
	}
	if it.n > 0 {
		if i >= len(b) || b[i] != ',' {
			it.err, it.done = syntaxErr("expected ',' or ']'", i), true
			return 0, 0, false
		}
		i = skipWS(b, i+1)
	}
	end, err := skipValueDepth(b, i, 1)
	if err != nil {
		it.err, it.done = err, true
		return 0, 0, false
	}
	it.i = skipWS(b, end)
	it.n++
	return i, end, true
}

// checkTopObject validates that body is exactly one JSON object (surrounding whitespace allowed) and
// returns the index of its closing brace.
func checkTopObject(body []byte) (closeIdx int, err error) {
	it := newObjIter(body, 0)
	for {
		if _, ok := it.next(); !ok {
			break
		}
	}
	if it.err != nil {
		return 0, it.err
	}
	if skipWS(body, it.close+1) != len(body) {
		return 0, syntaxErr("trailing data after object", it.close+1)
	}
	return it.close, nil
}

// unquote decodes a raw JSON string value; the fast path copies when there are no escapes.
func unquote(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), true
	}
	b, ok := appendUnquoted(make([]byte, 0, len(raw)), raw)
	return string(b), ok
}

// appendUnquoted appends the decoded raw JSON string (already validated by scanString) to dst.
func appendUnquoted(dst []byte, raw []byte) ([]byte, bool) {
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

// isNull reports whether a raw value is the literal null.
func isNull(raw []byte) bool { return string(raw) == "null" }

// parseBool decodes a raw JSON boolean.
func parseBool(raw []byte) (v, ok bool) {
	switch string(raw) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

// parseInt decodes a raw JSON number that has an integral value (2 and 2.0 both give 2).
func parseInt(raw []byte) (int64, bool) {
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

// findMember returns the last member named key of the object at b[i] (last wins, like encoding/json).
func findMember(b []byte, i int, key string) (member, bool) {
	it := newObjIter(b, i)
	var found member
	ok := false
	for {
		m, more := it.next()
		if !more {
			break
		}
		if m.keyIs(b, key) {
			found, ok = m, true
		}
	}
	return found, ok && it.err == nil
}

// topValue validates that b is one JSON value and returns its span.
func topValue(b []byte) (int, int, error) {
	s := skipWS(b, 0)
	e, err := skipValue(b, s)
	if err != nil {
		return 0, 0, err
	}
	if skipWS(b, e) != len(b) {
		return 0, 0, syntaxErr("trailing data", e)
	}
	return s, e, nil
}
