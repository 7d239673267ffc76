package toolcall

import (
	"encoding/json"
	"strings"
)

// DeepSeek V3's format (smg crates/tool_parser/src/parsers/deepseek.rs; vLLM's
// vllm/entrypoints/openai/tool_parsers/deepseekv3_tool_parser.py): a section of calls, each
//
//	<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>
//
// between <｜tool▁calls▁begin｜> and <｜tool▁calls▁end｜>. The bars are U+FF5C and the word
// separators U+2581, as in the tokenizer's added tokens.
const (
	dsCallsBegin = "<｜tool▁calls▁begin｜>"
	dsCallsEnd   = "<｜tool▁calls▁end｜>"
	dsCallBegin  = "<｜tool▁call▁begin｜>"
	dsCallEnd    = "<｜tool▁call▁end｜>"
	dsSep        = "<｜tool▁sep｜>"
	dsFence      = "```json\n"
)

const (
	dText    = iota
	dSection // between calls, inside the section
	dHead    // after <｜tool▁call▁begin｜>, before the arguments
	dArgs    // the arguments, up to ```<｜tool▁call▁end｜>
	dSkip    // a malformed call, dropped up to <｜tool▁call▁end｜>
)

type deepseek struct{}

func (deepseek) step(p *Parser, final bool) bool {
	switch p.mode {
	case dText:
		if i := strings.Index(p.buf, dsCallsBegin); i >= 0 {
			p.content(p.buf[:i])
			p.buf, p.mode, p.markers = p.buf[i+len(dsCallsBegin):], dSection, true
			return true
		}
		keep := 0
		if !final {
			keep = partialSuffix(p.buf, dsCallsBegin)
		}
		p.content(p.buf[:len(p.buf)-keep])
		p.buf = p.buf[len(p.buf)-keep:]
		return false
	case dSection:
		b, e := strings.Index(p.buf, dsCallBegin), strings.Index(p.buf, dsCallsEnd)
		switch {
		case b >= 0 && (e < 0 || b < e):
			p.buf, p.mode = p.buf[b+len(dsCallBegin):], dHead
			return true
		case e >= 0:
			p.buf, p.mode, p.afterCall = p.buf[e+len(dsCallsEnd):], dText, true
			return true
		case final:
			p.buf = ""
		default:
			p.buf = p.buf[len(p.buf)-partialSuffix(p.buf, dsCallBegin, dsCallsEnd):]
		}
		return false
	case dHead:
		switch st, name, off := deepseekHead(p.buf); st {
		case matched:
			p.startCall(name)
			p.buf, p.mode = p.buf[off:], dArgs
			return true
		case mismatch:
			p.mode = dSkip
			return true
		}
		if final {
			p.buf = ""
		}
		return false
	case dArgs:
		raw := p.takeRaw()
		// Search only what was not searched, less a tag's length that may have been cut.
		from := max(0, p.searched-len(dsCallEnd)+1)
		if i := strings.Index(raw[from:], dsCallEnd); i >= 0 {
			i += from
			body := strings.TrimSpace(raw[:i])
			args, fenced := strings.CutSuffix(body, "```")
			args = strings.TrimSpace(args)
			ok := fenced && p.finalArgs(args)
			p.endCall(ok && json.Valid([]byte(args)))
			p.buf, p.mode = raw[i+len(dsCallEnd):], dSection
			return true
		}
		p.searched = len(raw)
		if final {
			p.endCall(false)
			p.mode = dText
			return false
		}
		// Stream all but what may still be the closing fence: trailing whitespace, up to three
		// backticks, whitespace, and a partial end tag.
		s := raw[:len(raw)-partialSuffix(raw, dsCallEnd)]
		s = strings.TrimRight(s, " \t\r\n")
		for n := 0; n < 3 && strings.HasSuffix(s, "`"); n++ {
			s = s[:len(s)-1]
		}
		p.args(strings.TrimRight(strings.TrimLeft(s, " \t\r\n"), " \t\r\n"))
		return false
	default: // dSkip
		if i := strings.Index(p.buf, dsCallEnd); i >= 0 {
			p.buf, p.mode = p.buf[i+len(dsCallEnd):], dSection
			return true
		}
		if final {
			p.buf = ""
		} else {
			p.buf = p.buf[len(p.buf)-partialSuffix(p.buf, dsCallEnd):]
		}
		return false
	}
}

// deepseekHead matches `function<｜tool▁sep｜>NAME\n```json\n` and returns the offset of the arguments.
// A call end before it is complete makes the call malformed.
func deepseekHead(s string) (status int, name string, off int) {
	end := strings.Index(s, dsCallEnd)
	if end < 0 {
		end = len(s)
	}
	head := s[:end]
	sep := strings.Index(head, dsSep)
	if sep < 0 {
		return incomplete(end, s)
	}
	nl := strings.IndexByte(head[sep+len(dsSep):], '\n')
	if nl < 0 {
		return incomplete(end, s)
	}
	rest := head[sep+len(dsSep)+nl+1:]
	if !strings.HasPrefix(rest, dsFence) {
		if len(rest) < len(dsFence) && strings.HasPrefix(dsFence, rest) {
			return incomplete(end, s)
		}
		return mismatch, "", 0
	}
	name = strings.TrimSpace(head[sep+len(dsSep) : sep+len(dsSep)+nl])
	if strings.TrimSpace(head[:sep]) != "function" || name == "" {
		return mismatch, "", 0
	}
	return matched, name, sep + len(dsSep) + nl + 1 + len(dsFence)
}

func incomplete(end int, s string) (int, string, int) {
	if end < len(s) {
		return mismatch, "", 0
	}
	return needMore, "", 0
}
