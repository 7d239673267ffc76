package toolcall

import (
	"encoding/json"
	"strings"
)

// The Hermes/Qwen format (smg crates/tool_parser/src/parsers/qwen.rs, vLLM's hermes_tool_parser.py):
// each call is <tool_call>{"name": NAME, "arguments": {...}}</tool_call>, the JSON usually on its own
// line. Only name-then-arguments is a call, which is what the Qwen templates ask the model for.
const (
	hermesOpen  = "<tool_call>"
	hermesClose = "</tool_call>"
)

const (
	hText = iota
	hHead // after <tool_call>, before the arguments' {
	hArgs // inside the arguments object
	hTail // after the arguments, up to </tool_call>
	hSkip // a malformed block, dropped up to </tool_call>
)

type hermes struct {
	scan  jsonScan
	valid bool // the arguments parsed
}

func (h *hermes) step(p *Parser, final bool) bool {
	switch p.mode {
	case hText:
		if i := strings.Index(p.buf, hermesOpen); i >= 0 {
			p.content(p.buf[:i])
			p.buf, p.mode, p.markers = p.buf[i+len(hermesOpen):], hHead, true
			return true
		}
		keep := 0
		if !final {
			keep = partialSuffix(p.buf, hermesOpen)
		}
		p.content(p.buf[:len(p.buf)-keep])
		p.buf = p.buf[len(p.buf)-keep:]
		return false
	case hHead:
		switch st, name, off := hermesHead(p.buf); st {
		case matched:
			p.startCall(name)
			p.buf, p.mode, h.scan = p.buf[off:], hArgs, jsonScan{}
			return true
		case mismatch:
			p.mode = hSkip
			return true
		}
		if final {
			p.buf = "" // a truncated block that never named its call
		}
		return false
	case hArgs:
		raw := p.takeRaw()
		end := h.scan.object(raw)
		if end < 0 {
			if final {
				p.endCall(false)
				p.mode = hText
				return false
			}
			p.args(raw)
			return false
		}
		p.args(raw[:end])
		h.valid = json.Valid([]byte(raw[:end]))
		p.buf, p.mode = raw[end:], hTail
		return true
	case hTail:
		if i := strings.Index(p.buf, hermesClose); i >= 0 {
			p.endCall(h.valid && strings.TrimSpace(p.buf[:i]) == "}")
			p.buf, p.mode = p.buf[i+len(hermesClose):], hText
			return true
		}
		if final {
			p.endCall(false) // smg and vLLM take no call without its closing tag
			p.buf, p.mode = "", hText
		}
		return false
	default: // hSkip
		if i := strings.Index(p.buf, hermesClose); i >= 0 {
			p.buf, p.mode, p.afterCall = p.buf[i+len(hermesClose):], hText, true
			return true
		}
		if final {
			p.buf = ""
		} else {
			p.buf = p.buf[len(p.buf)-partialSuffix(p.buf, hermesClose):]
		}
		return false
	}
}

const (
	needMore = iota
	matched
	mismatch
)

// hermesHead matches the start of a call's JSON, `{"name": "NAME", "arguments": `, and returns the
// offset of the arguments' opening brace.
func hermesHead(s string) (status int, name string, off int) {
	i := 0
	ws := func() {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
	}
	lit := func(l string) int {
		n := min(len(l), len(s)-i)
		switch {
		case s[i:i+n] != l[:n]:
			return mismatch
		case n < len(l):
			return needMore
		}
		i += n
		return matched
	}
	for _, part := range []string{"{", `"name"`, ":", "", ",", `"arguments"`, ":"} {
		ws()
		if part == "" {
			st, v, n := jsonString(s[i:])
			if st != matched {
				return st, "", 0
			}
			name, i = v, i+n
			continue
		}
		if st := lit(part); st != matched {
			return st, "", 0
		}
	}
	ws()
	if i == len(s) {
		return needMore, "", 0
	}
	if s[i] != '{' {
		return mismatch, "", 0
	}
	return matched, name, i
}

// jsonString reads a JSON string at the start of s.
func jsonString(s string) (status int, v string, n int) {
	if s == "" {
		return needMore, "", 0
	}
	if s[0] != '"' {
		return mismatch, "", 0
	}
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			if json.Unmarshal([]byte(s[:i+1]), &v) != nil {
				return mismatch, "", 0
			}
			return matched, v, i + 1
		}
	}
	return needMore, "", 0
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// jsonScan finds the end of a JSON object across calls as its text grows: strings, escapes and
// nesting only (json.Valid judges the whole once it ends).
type jsonScan struct {
	pos, depth int
	inStr, esc bool
}

// object returns the length of the object at the start of s, or -1 when it has not ended yet.
func (j *jsonScan) object(s string) int {
	for ; j.pos < len(s); j.pos++ {
		c := s[j.pos]
		switch {
		case j.esc:
			j.esc = false
		case j.inStr && c == '\\':
			j.esc = true
		case c == '"':
			j.inStr = !j.inStr
		case j.inStr:
		case c == '{' || c == '[':
			j.depth++
		case c == '}' || c == ']':
			j.depth--
			if j.depth == 0 {
				j.pos++
				return j.pos
			}
		}
	}
	return -1
}
