package tokenizer

import (
	"bytes"
	"strconv"

	"github.com/sluicegw/sluice/internal/tokenizer/chattmpl"

	"github.com/sluicegw/sluice/internal/jsonscan"
)

// parseValue decodes JSON into template values, keeping object keys in their order (tojson of tools
// must print them as the client sent them, as Python's dicts do) and integers apart from floats.
func parseValue(raw []byte) (chattmpl.Value, error) { return parseJSON(raw, string(raw)) }

// parseJSON is parseValue over b and s, the same bytes as a slice and as one copy in a string: the
// scanner reads b, and strings without escapes are slices of s, so a chat costs one copy of its
// body plus its escaped strings. Each value is scanned once, as it is decoded (the largest cost of a
// chat after the template itself).
func parseJSON(b []byte, s string) (chattmpl.Value, error) {
	i := jsonscan.SkipWS(b, 0)
	v, end, err := jsonValue(b, s, i, 0)
	if err != nil {
		return chattmpl.Value{}, err
	}
	if jsonscan.SkipWS(b, end) != len(b) {
		return chattmpl.Value{}, jsonscan.SyntaxError("trailing data after the JSON value", end)
	}
	return v, nil
}

// jsonValue decodes the value at b[i] and returns the index just past it; depth bounds nesting as
// jsonscan does, so a body of nested brackets cannot exhaust the stack.
func jsonValue(b []byte, s string, i, depth int) (chattmpl.Value, int, error) {
	if i >= len(b) {
		return chattmpl.Value{}, 0, jsonscan.SyntaxError("unexpected end of input", i)
	}
	switch c := b[i]; {
	case c == '{':
		if depth >= jsonscan.MaxDepth {
			return chattmpl.Value{}, 0, jsonscan.SyntaxError("nesting too deep", i)
		}
		return jsonObject(b, s, i, depth+1)
	case c == '[':
		if depth >= jsonscan.MaxDepth {
			return chattmpl.Value{}, 0, jsonscan.SyntaxError("nesting too deep", i)
		}
		return jsonArray(b, s, i, depth+1)
	case c == '"':
		str, end, err := jsonString(b, s, i)
		return chattmpl.NewString(str), end, err
	case c == '-' || c >= '0' && c <= '9':
		return jsonNumber(b, s, i)
	}
	end, err := jsonscan.SkipValue(b, i) // a literal, or the scanner's error for anything else
	if err != nil {
		return chattmpl.Value{}, 0, err
	}
	switch b[i] {
	case 't':
		return chattmpl.NewBool(true), end, nil
	case 'f':
		return chattmpl.NewBool(false), end, nil
	}
	return chattmpl.None(), end, nil
}

func jsonObject(b []byte, s string, i, depth int) (chattmpl.Value, int, error) {
	d := chattmpl.NewDict()
	it := jsonscan.NewObjIter(b, i)
	for {
		m, ok := it.NextKey()
		if !ok {
			break
		}
		key := memberKey(b, s, m)
		v, end, err := jsonValue(b, s, m.ValStart, depth)
		if err != nil {
			return chattmpl.Value{}, 0, err
		}
		it.ValueDone(end)
		d.AsDict().Set(key, v) // a repeated key keeps its first place and its last value, as Python's dict
	}
	if it.Err != nil {
		return chattmpl.Value{}, 0, it.Err
	}
	return d, it.Close + 1, nil
}

func jsonArray(b []byte, s string, i, depth int) (chattmpl.Value, int, error) {
	items := make([]chattmpl.Value, 0, 8) // growing from 1 copied a messages array five times
	it := jsonscan.NewArrIter(b, i)
	for {
		start, ok := it.NextStart()
		if !ok {
			break
		}
		v, end, err := jsonValue(b, s, start, depth)
		if err != nil {
			return chattmpl.Value{}, 0, err
		}
		it.ValueDone(end)
		items = append(items, v)
	}
	if it.Err != nil {
		return chattmpl.Value{}, 0, it.Err
	}
	return chattmpl.NewList(items), it.Close + 1, nil
}

// jsonString decodes the string at b[i] (its opening quote): one without escapes is a slice of s.
func jsonString(b []byte, s string, i int) (string, int, error) {
	end, esc, err := jsonscan.ScanString(b, i)
	if err != nil {
		return "", 0, err
	}
	return unquoted(b, s, i, end, esc), end, nil
}

func memberKey(b []byte, s string, m jsonscan.Member) string {
	return unquoted(b, s, m.KeyStart, m.KeyEnd, m.KeyEsc)
}

// unquoted is the string b[start:end], already validated by the scanner.
func unquoted(b []byte, s string, start, end int, esc bool) string {
	if !esc {
		return s[start+1 : end-1]
	}
	out, _ := jsonscan.AppendUnquoted(make([]byte, 0, end-start), b[start:end])
	return string(out)
}

func jsonNumber(b []byte, s string, i int) (chattmpl.Value, int, error) {
	end, err := jsonscan.ScanNumber(b, i)
	if err != nil {
		return chattmpl.Value{}, 0, err
	}
	text := s[i:end]
	if !bytes.ContainsAny(b[i:end], ".eE") {
		if n, err := strconv.ParseInt(text, 10, 64); err == nil {
			return chattmpl.NewInt(n), end, nil
		}
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return chattmpl.Value{}, 0, jsonscan.SyntaxError("number out of range", i)
	}
	return chattmpl.NewFloat(f), end, nil
}
