package tokenizer

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// maxDepth bounds JSON nesting, as jsontext does (10000): a request body of nested brackets must not
// exhaust the stack.
const maxDepth = 10000

// parseValue decodes JSON into template values, keeping object keys in their order (tojson of tools
// must print them as the client sent them, as Python's dicts do) and integers apart from floats. It is
// written here because it is the largest cost of a chat after the template itself: strings without
// escapes are slices of one copy of the input, and no token stream or reflection sits in between
// (encoding/json's Decoder.Token cost three times the template; jsontext's token stream one).
func parseValue(raw []byte) (jinja.Value, error) {
	p := jsonParser{s: string(raw)}
	p.space()
	v, err := p.value(0)
	if err != nil {
		return jinja.Value{}, err
	}
	p.space()
	if p.i != len(p.s) {
		return jinja.Value{}, p.fail("trailing data after the JSON value")
	}
	return v, nil
}

type jsonParser struct {
	s string
	i int
}

var errJSONEnd = errors.New("unexpected end of JSON input")

func (p *jsonParser) fail(msg string) error {
	return fmt.Errorf("invalid JSON at offset %d: %s", p.i, msg)
}

func (p *jsonParser) space() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsonParser) value(depth int) (jinja.Value, error) {
	if p.i >= len(p.s) {
		return jinja.Value{}, errJSONEnd
	}
	switch c := p.s[p.i]; {
	case c == '{':
		return p.object(depth + 1)
	case c == '[':
		return p.array(depth + 1)
	case c == '"':
		s, err := p.str()
		return jinja.NewString(s), err
	case c == 't':
		return jinja.NewBool(true), p.literal("true")
	case c == 'f':
		return jinja.NewBool(false), p.literal("false")
	case c == 'n':
		return jinja.None(), p.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	}
	return jinja.Value{}, p.fail(fmt.Sprintf("unexpected character %q", p.s[p.i]))
}

func (p *jsonParser) literal(word string) error {
	if len(p.s)-p.i < len(word) || p.s[p.i:p.i+len(word)] != word {
		return p.fail("invalid literal")
	}
	p.i += len(word)
	return nil
}

func (p *jsonParser) object(depth int) (jinja.Value, error) {
	if depth > maxDepth {
		return jinja.Value{}, p.fail("nested too deeply")
	}
	p.i++ // {
	d := jinja.NewDict()
	p.space()
	if p.i < len(p.s) && p.s[p.i] == '}' {
		p.i++
		return d, nil
	}
	for {
		p.space()
		if p.i >= len(p.s) || p.s[p.i] != '"' {
			return jinja.Value{}, p.fail("want an object key")
		}
		key, err := p.str()
		if err != nil {
			return jinja.Value{}, err
		}
		p.space()
		if p.i >= len(p.s) || p.s[p.i] != ':' {
			return jinja.Value{}, p.fail("want ':' after an object key")
		}
		p.i++
		p.space()
		v, err := p.value(depth)
		if err != nil {
			return jinja.Value{}, err
		}
		d.AsDict().Set(key, v) // a repeated key keeps its first place and its last value, as Python's dict
		p.space()
		if p.i >= len(p.s) {
			return jinja.Value{}, errJSONEnd
		}
		switch p.s[p.i] {
		case ',':
			p.i++
		case '}':
			p.i++
			return d, nil
		default:
			return jinja.Value{}, p.fail("want ',' or '}' in an object")
		}
	}
}

func (p *jsonParser) array(depth int) (jinja.Value, error) {
	if depth > maxDepth {
		return jinja.Value{}, p.fail("nested too deeply")
	}
	p.i++ // [
	var items []jinja.Value
	p.space()
	if p.i < len(p.s) && p.s[p.i] == ']' {
		p.i++
		return jinja.NewList(items), nil
	}
	for {
		p.space()
		v, err := p.value(depth)
		if err != nil {
			return jinja.Value{}, err
		}
		items = append(items, v)
		p.space()
		if p.i >= len(p.s) {
			return jinja.Value{}, errJSONEnd
		}
		switch p.s[p.i] {
		case ',':
			p.i++
		case ']':
			p.i++
			return jinja.NewList(items), nil
		default:
			return jinja.Value{}, p.fail("want ',' or ']' in an array")
		}
	}
}

// str reads a string at p.i (its opening quote). One without escapes is a slice of the input.
func (p *jsonParser) str() (string, error) {
	start := p.i + 1
	for j := start; j < len(p.s); j++ {
		switch c := p.s[j]; {
		case c == '"':
			p.i = j + 1
			return p.s[start:j], nil
		case c == '\\':
			return p.escaped(start, j)
		case c < 0x20:
			p.i = j
			return "", p.fail("control character in a string")
		}
	}
	return "", errJSONEnd
}

// escaped reads the rest of a string whose first escape is at j, decoding as encoding/json does
// (invalid surrogates become U+FFFD).
func (p *jsonParser) escaped(start, j int) (string, error) {
	buf := make([]byte, 0, j-start+16)
	buf = append(buf, p.s[start:j]...)
	for j < len(p.s) {
		c := p.s[j]
		switch {
		case c == '"':
			p.i = j + 1
			return string(buf), nil
		case c < 0x20:
			p.i = j
			return "", p.fail("control character in a string")
		case c != '\\':
			buf = append(buf, c)
			j++
			continue
		}
		if j+1 >= len(p.s) {
			return "", errJSONEnd
		}
		switch e := p.s[j+1]; e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, ok := hex4(p.s, j+2)
			if !ok {
				p.i = j
				return "", p.fail(`invalid \u escape`)
			}
			j += 6
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if j+1 < len(p.s) && p.s[j] == '\\' && p.s[j+1] == 'u' {
					if v, ok := hex4(p.s, j+2); ok {
						r2 = v
					}
				}
				if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
					j += 6
					r = dec
				} else {
					r = utf8.RuneError
				}
			}
			buf = utf8.AppendRune(buf, r)
			continue
		default:
			p.i = j
			return "", p.fail("invalid escape")
		}
		j += 2
	}
	return "", errJSONEnd
}

func hex4(s string, i int) (rune, bool) {
	if i+4 > len(s) {
		return 0, false
	}
	v, err := strconv.ParseUint(s[i:i+4], 16, 32)
	return rune(v), err == nil
}

func (p *jsonParser) number() (jinja.Value, error) {
	start := p.i
	j := p.i
	if p.s[j] == '-' {
		j++
	}
	digits := func() int {
		k := j
		for j < len(p.s) && p.s[j] >= '0' && p.s[j] <= '9' {
			j++
		}
		return j - k
	}
	if j < len(p.s) && p.s[j] == '0' {
		j++
	} else if digits() == 0 {
		p.i = j
		return jinja.Value{}, p.fail("invalid number")
	}
	isInt := true
	if j < len(p.s) && p.s[j] == '.' {
		j++
		isInt = false
		if digits() == 0 {
			p.i = j
			return jinja.Value{}, p.fail("invalid number")
		}
	}
	if j < len(p.s) && (p.s[j] == 'e' || p.s[j] == 'E') {
		j++
		isInt = false
		if j < len(p.s) && (p.s[j] == '+' || p.s[j] == '-') {
			j++
		}
		if digits() == 0 {
			p.i = j
			return jinja.Value{}, p.fail("invalid number")
		}
	}
	p.i = j
	text := p.s[start:j]
	if isInt {
		if n, err := strconv.ParseInt(text, 10, 64); err == nil {
			return jinja.NewInt(n), nil
		}
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return jinja.Value{}, p.fail("number out of range")
	}
	return jinja.NewFloat(f), nil
}
