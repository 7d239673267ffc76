package chattmpl

import (
	"fmt"
	"strings"
)

// segKind is what a piece of template source is: literal text, {{ }}, {% %} or {# #}.
type segKind int

const (
	segText segKind = iota
	segVar
	segBlock
	segComment
)

// segment is one piece of the source; for tags, body is what lies between the delimiters and their
// whitespace-control marks.
type segment struct {
	kind                  segKind
	body                  string
	stripLeft, stripRight bool // {%- and -%}
	keepLeft              bool // {%+: no lstrip_blocks
}

// split cuts src into segments and applies Hugging Face's environment settings to the text between
// them as jinja2 does: `-` marks strip all whitespace on their side, trim_blocks drops the newline right
// after a block or comment tag, lstrip_blocks drops spaces and tabs between a line's start and a block
// or comment tag, and keep_trailing_newline is off (one final newline of the source is dropped). Line
// ends are "\n", as jinja2 makes them.
func split(src string) ([]segment, error) {
	// jinja2's lexer first makes every line end "\n" (its newline_sequence).
	src = strings.ReplaceAll(strings.ReplaceAll(src, "\r\n", "\n"), "\r", "\n")
	src = strings.TrimSuffix(src, "\n")
	var segs []segment
	for len(src) > 0 {
		i := tagStart(src)
		if i < 0 {
			segs = append(segs, segment{kind: segText, body: src})
			break
		}
		if i > 0 {
			segs = append(segs, segment{kind: segText, body: src[:i]})
		}
		src = src[i:]
		var kind segKind
		var closer string
		switch src[1] {
		case '{':
			kind, closer = segVar, "}}"
		case '%':
			kind, closer = segBlock, "%}"
		default:
			kind, closer = segComment, "#}"
		}
		seg := segment{kind: kind}
		src = src[2:]
		if strings.HasPrefix(src, "-") {
			seg.stripLeft, src = true, src[1:]
		} else if strings.HasPrefix(src, "+") && kind != segVar {
			seg.keepLeft, src = true, src[1:]
		}
		end := tagEnd(src, closer, kind == segComment)
		if end < 0 {
			return nil, fmt.Errorf("unclosed %q tag", closer)
		}
		body := src[:end]
		if strings.HasSuffix(body, "-") {
			seg.stripRight, body = true, body[:len(body)-1]
		}
		seg.body = strings.TrimSpace(body)
		segs = append(segs, seg)
		src = src[end+2:]
	}
	applyWhitespace(segs)
	return segs, nil
}

// tagStart is the index of the next {{, {% or {#, or -1.
func tagStart(s string) int {
	off := 0
	for {
		i := strings.IndexByte(s[off:], '{')
		if i < 0 || off+i+1 >= len(s) {
			return -1
		}
		switch s[off+i+1] {
		case '{', '%', '#':
			return off + i
		}
		off += i + 1
	}
}

// tagEnd is the index of closer in s, skipping quoted strings (an expression's '%}' in a string does
// not end the tag), or -1.
func tagEnd(s, closer string, comment bool) int {
	if comment {
		return strings.Index(s, closer)
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\'', '"':
			j := i + 1
			for j < len(s) && s[j] != c {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			i = j
		default:
			if strings.HasPrefix(s[i:], closer) {
				return i
			}
		}
	}
	return -1
}

func isBlockish(k segKind) bool { return k == segBlock || k == segComment }

// applyWhitespace trims the text segments by their neighbouring tags' marks and HF's settings. A text
// starts a line (for lstrip_blocks, when it holds no newline) at the template's start and after a tag
// whose end took a newline with it (jinja2's line_starting).
func applyWhitespace(segs []segment) {
	const ws = " \t\n\r\v\f"
	for i := range segs {
		s := &segs[i]
		if s.kind != segText {
			continue
		}
		lineStart := i == 0
		if i > 0 {
			p := segs[i-1]
			switch {
			case p.stripRight:
				t := strings.TrimLeft(s.body, ws)
				lineStart = strings.HasSuffix(s.body[:len(s.body)-len(t)], "\n")
				s.body = t
			case isBlockish(p.kind) && strings.HasPrefix(s.body, "\n"):
				s.body, lineStart = s.body[1:], true
			}
		}
		if i+1 < len(segs) {
			n := segs[i+1]
			switch {
			case n.stripLeft:
				s.body = strings.TrimRight(s.body, ws)
			case isBlockish(n.kind) && !n.keepLeft:
				l := strings.LastIndexByte(s.body, '\n') + 1
				if (l > 0 || lineStart) && strings.Trim(s.body[l:], " \t") == "" {
					s.body = s.body[:l]
				}
			}
		}
	}
}
