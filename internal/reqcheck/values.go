package reqcheck

import (
	"bytes"
	"math"
	"strconv"

	"github.com/sluicegw/sluice/internal/jsonscan"
)

// This file reads values out of JSON the caller has already validated: the structure with the
// gateway's one JSON reader (internal/jsonscan), the values by type and range.

// kind is a JSON value's type, read from its first byte.
type kind uint8

const (
	kindInvalid kind = iota
	kindNull
	kindBool
	kindNumber
	kindString
	kindArray
	kindObject
)

func kindOf(raw []byte) kind {
	if len(raw) == 0 {
		return kindInvalid
	}
	switch raw[0] {
	case 'n':
		return kindNull
	case 't', 'f':
		return kindBool
	case '"':
		return kindString
	case '[':
		return kindArray
	case '{':
		return kindObject
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return kindNumber
	}
	return kindInvalid
}

// kindName names a kind in the client's terms.
func kindName(k kind) string {
	switch k {
	case kindNull:
		return "null"
	case kindBool:
		return "a boolean"
	case kindNumber:
		return "a number"
	case kindString:
		return "a string"
	case kindArray:
		return "an array"
	case kindObject:
		return "an object"
	}
	return "invalid JSON"
}

// elems calls fn with each element of the array raw, stopping at the first error fn returns.
func elems(raw []byte, fn func(i int, v []byte) *Error) *Error {
	it := jsonscan.NewArrIter(raw, 0)
	for n := 0; ; n++ {
		start, end, ok := it.Next()
		if !ok {
			return nil
		}
		if err := fn(n, raw[start:end]); err != nil {
			return err
		}
	}
}

// members calls fn with each member of the object raw (the key still quoted), stopping at the first
// error fn returns.
func members(raw []byte, fn func(key, v []byte) *Error) *Error {
	it := jsonscan.NewObjIter(raw, 0)
	for {
		m, ok := it.Next()
		if !ok {
			return nil
		}
		if err := fn(raw[m.KeyStart:m.KeyEnd], m.Value(raw)); err != nil {
			return err
		}
	}
}

// member returns the value of the last member named name of object raw (last wins, as in Python's
// json).
func member(raw []byte, name string) ([]byte, bool) {
	m, ok := jsonscan.FindMember(raw, 0, name)
	if !ok {
		return nil, false
	}
	return m.Value(raw), true
}

// keyIs compares a quoted key with name, as the scanner compares its members' keys.
func keyIs(key []byte, name string) bool {
	m := jsonscan.Member{KeyStart: 0, KeyEnd: len(key), KeyEsc: bytes.IndexByte(key, '\\') >= 0}
	return m.KeyIs(key, name)
}

// number decodes a JSON number; ok is false for a number out of float64's range (1e400), which
// Python reads as inf and both engines refuse.
func number(raw []byte) (float64, bool) {
	if v, ok := smallInt(raw); ok {
		return float64(v), true
	}
	if v, ok := smallDecimal(raw); ok {
		return v, true
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// integer decodes a JSON number with an integral value (pydantic accepts 2.0 for an int field, not
// 2.5); ok is false otherwise or outside int64.
func integer(raw []byte) (int64, bool) {
	if v, ok := smallInt(raw); ok {
		return v, true
	}
	if v, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
		return v, true
	}
	f, ok := number(raw)
	if !ok || f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
		return 0, false
	}
	return int64(f), true
}

// smallInt is the allocation-free fast path for the common case: a plain integer of up to 18 digits.
func smallInt(raw []byte) (int64, bool) {
	i, neg := 0, false
	if len(raw) > 0 && raw[0] == '-' {
		i, neg = 1, true
	}
	if i == len(raw) || len(raw)-i > 18 {
		return 0, false
	}
	var v int64
	for ; i < len(raw); i++ {
		c := raw[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	if neg {
		v = -v
	}
	return v, true
}

// smallDecimal is the allocation-free fast path for a plain decimal (0.7, -1.25) of at most 15
// digits: digits and the power of ten are exact in a float64, so their quotient is correctly rounded,
// the same value strconv.ParseFloat returns.
func smallDecimal(raw []byte) (float64, bool) {
	i, neg := 0, false
	if len(raw) > 0 && raw[0] == '-' {
		i, neg = 1, true
	}
	var mant int64
	digits, frac, dot := 0, 0, false
	for ; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c >= '0' && c <= '9':
			mant = mant*10 + int64(c-'0')
			digits++
			if dot {
				frac++
			}
		case c == '.' && !dot:
			dot = true
		default:
			return 0, false // an exponent: the slow path
		}
	}
	if digits == 0 || digits > 15 {
		return 0, false
	}
	v := float64(mant) / pow10(frac)
	if neg {
		v = -v
	}
	return v, true
}

// pow10 is 10^n for n <= 15, the powers of ten a float64 holds exactly.
func pow10(n int) float64 {
	p := 1.0
	for range n {
		p *= 10
	}
	return p
}

// isIntegerKey reports whether a quoted object key is an integer, as Python's int() reads a string
// (surrounding whitespace and a sign allowed).
func isIntegerKey(key []byte) bool {
	if bytes.IndexByte(key, '\\') >= 0 {
		k, ok := jsonscan.Unquote(key)
		if !ok {
			return false
		}
		key = []byte(strconv.Quote(k))
	}
	s := key[1 : len(key)-1]
	i, j := 0, len(s)
	for i < j && jsonscan.IsWS(s[i]) {
		i++
	}
	for j > i && jsonscan.IsWS(s[j-1]) {
		j--
	}
	if i < j && (s[i] == '-' || s[i] == '+') {
		i++
	}
	if i == j {
		return false
	}
	for ; i < j; i++ {
		if s[i] < '0' || s[i] > '9' {
			if s[i] == '_' && i > 0 && s[i-1] >= '0' && s[i-1] <= '9' && i+1 < j && s[i+1] >= '0' && s[i+1] <= '9' {
				continue // Python's int() accepts digit separators
			}
			return false
		}
	}
	return true
}
