package chattmpl

import (
	"fmt"
	"strconv"
	"strings"
)

type tokKind int

const (
	tEOF tokKind = iota
	tName
	tString
	tInt
	tFloat
	tOp
)

type token struct {
	kind tokKind
	s    string // the name, the operator, or the string's decoded value
	i    int64
	f    float64
}

// lexExpr cuts a tag's body into tokens.
func lexExpr(src string) ([]token, error) {
	var toks []token
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i + 1
			for j < len(src) && (src[j] == '_' || src[j] >= 'a' && src[j] <= 'z' || src[j] >= 'A' && src[j] <= 'Z' || src[j] >= '0' && src[j] <= '9') {
				j++
			}
			toks = append(toks, token{kind: tName, s: src[i:j]})
			i = j
		case c >= '0' && c <= '9':
			j := i
			for j < len(src) && (src[j] >= '0' && src[j] <= '9' || src[j] == '_') {
				j++
			}
			isFloat := j+1 < len(src) && src[j] == '.' && src[j+1] >= '0' && src[j+1] <= '9'
			if isFloat {
				j++
				for j < len(src) && src[j] >= '0' && src[j] <= '9' {
					j++
				}
				f, err := strconv.ParseFloat(strings.ReplaceAll(src[i:j], "_", ""), 64)
				if err != nil {
					return nil, err
				}
				toks = append(toks, token{kind: tFloat, f: f})
			} else {
				n, err := strconv.ParseInt(strings.ReplaceAll(src[i:j], "_", ""), 10, 64)
				if err != nil {
					return nil, err
				}
				toks = append(toks, token{kind: tInt, i: n})
			}
			i = j
		case c == '\'' || c == '"':
			s, n, err := unquote(src[i:])
			if err != nil {
				return nil, err
			}
			toks = append(toks, token{kind: tString, s: s})
			i += n
		default:
			op := ""
			for _, o := range []string{"//", "**", "==", "!=", "<=", ">="} {
				if strings.HasPrefix(src[i:], o) {
					op = o
					break
				}
			}
			if op == "" {
				if !strings.ContainsRune("+-*/%~()[]{},.:|<>=", rune(c)) {
					return nil, fmt.Errorf("unexpected character %q", c)
				}
				op = src[i : i+1]
			}
			toks = append(toks, token{kind: tOp, s: op})
			i += len(op)
		}
	}
	return toks, nil
}

// unquote decodes the Python string literal at the start of s (jinja2 takes Python's escapes) and
// returns its length in s.
func unquote(s string) (string, int, error) {
	q := s[0]
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == q:
			return b.String(), i + 1, nil
		case c != '\\':
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(s) {
			break
		}
		switch e := s[i]; e {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case '\\', '\'', '"':
			b.WriteByte(e)
		case '\n':
		default:
			// \uXXXX, \x.., octal and the rest: refused rather than guessed.
			return "", 0, fmt.Errorf("string escape \\%c is not supported", e)
		}
	}
	return "", 0, fmt.Errorf("unterminated string")
}
