// Package toolcall turns the tool calls a model writes in its own format into OpenAI's tool_calls, for
// a whole answer and for a stream of text deltas. The gateway needs it when it detokenizes engine
// output itself (engines in gRPC mode); engines serving HTTP parse their own.
//
// The parsers carry the names of the Rust gateway's registry (smg-project/smg,
// crates/tool_parser/src/factory.rs), with the other gateways' names for the same format as aliases:
//
//   - qwen (alias hermes, vLLM's name; qwen25, SGLang's): <tool_call>{"name": ..., "arguments": {...}}</tool_call>,
//     hermes.go.
//   - deepseek (aliases deepseek_v3, vLLM's; deepseekv3, SGLang's): DeepSeek V3's
//     <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>,
//     deepseek.go.
//
// What both do, and where it departs from upstream:
//
//   - A call's arguments are the model's own JSON text of them, trimmed of surrounding whitespace, not
//     re-serialized (smg and vLLM re-serialize in whole parsing but stream the raw text): so the
//     argument deltas of a stream concatenate to exactly the whole answer's arguments.
//   - Text before, between and after calls is content (smg and vLLM keep only the text before the
//     first call); whitespace-only text between calls or after the last is dropped, as it only
//     separates the calls.
//   - A stream announces a call (index, id, name, empty arguments) once its name is complete and its
//     arguments begin, then streams the arguments' text as it comes, as vLLM does.
//   - Malformed calls, as smg: a whole answer drops a call whose JSON does not parse, and when no call
//     parses the whole text is content. A stream cannot take back what it sent: a call malformed before
//     it was announced is dropped, one malformed after keeps what was streamed.
package toolcall

import (
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Parser names, as smg's --tool-call-parser spells them, and the aliases other gateways use.
const (
	Qwen     = "qwen"
	DeepSeek = "deepseek"
)

var aliases = map[string]string{
	Qwen: Qwen, "hermes": Qwen, "qwen25": Qwen,
	DeepSeek: DeepSeek, "deepseek_v3": DeepSeek, "deepseekv3": DeepSeek,
}

// Names lists every accepted parser name, aliases included, sorted.
func Names() []string {
	var n []string
	for k := range aliases {
		n = append(n, k)
	}
	slices.Sort(n)
	return n
}

// Known reports whether name is an accepted parser name.
func Known(name string) bool { _, ok := aliases[name]; return ok }

// ErrNoToolParser: the request offers tools but the model has no tool-call parser, so its calls would
// reach the client as raw text. internal/apierror answers it with a 400 naming tools.
var ErrNoToolParser = errors.New("the model has no tool-call parser")

// RequireToolParser is the check of a request the gateway will parse itself: one that offers tools
// needs a parser. parser is the model's --tool-call-parser ("" for none).
func RequireToolParser(model string, hasTools bool, parser string) error {
	if !hasTools || parser != "" {
		return nil
	}
	return fmt.Errorf("%w: tools were given but model %s has no tool-call parser configured (--tool-call-parser MODEL=NAME, one of %s)",
		ErrNoToolParser, model, strings.Join(Names(), ", "))
}

// ToolCall is one call of a whole answer, in OpenAI's shape (type is always "function").
type ToolCall struct {
	ID        string
	Name      string
	Arguments string
}

// CallDelta is one piece of a streamed call: its first delta has ID and Name (and empty Arguments),
// the following ones only Arguments, as OpenAI's chunks carry them.
type CallDelta struct {
	Index     int
	ID        string
	Name      string
	Arguments string
}

// Delta is what one pushed text delta made certain.
type Delta struct {
	Content string
	Calls   []CallDelta
}

// Options tune a parser.
type Options struct {
	// NewID makes a call's id; nil makes OpenAI-style "call_" ids from crypto/rand.
	NewID func() string
}

// format is one model family's syntax: step consumes what it can of p.buf and reports whether it
// made progress; final is set at the end of the generation.
type format interface {
	step(p *Parser, final bool) bool
}

// Parser parses one generation; it is not safe for concurrent use.
type Parser struct {
	f     format
	newID func() string
	buf   string // text not consumed yet
	out   Delta
	mode  int // the format's state
	// afterCall: a call ended and no content followed yet; ws is the whitespace held meanwhile.
	afterCall bool
	ws        string
	// the call being parsed
	calls    int             // calls announced so far
	emitted  string          // arguments streamed of the current call
	raw      strings.Builder // the current call's argument text so far (hermes.go, deepseek.go)
	searched int             // how much of raw was searched for the end of the arguments
	// whole-answer bookkeeping
	markers bool         // a call marker was seen
	bad     map[int]bool // announced calls that turned out malformed
}

// New returns a parser for one generation of a model whose parser is name.
func New(name string, o Options) (*Parser, error) {
	p := &Parser{newID: o.NewID, bad: map[int]bool{}}
	if p.newID == nil {
		p.newID = openAIID
	}
	switch aliases[name] {
	case Qwen:
		p.f = &hermes{}
	case DeepSeek:
		p.f = deepseek{}
	default:
		return nil, fmt.Errorf("unknown tool-call parser %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	return p, nil
}

// Push takes the next piece of generated text.
func (p *Parser) Push(delta string) Delta {
	p.buf += delta
	for p.f.step(p, false) {
	}
	return p.take()
}

// Flush ends the generation.
func (p *Parser) Flush() Delta {
	for p.f.step(p, true) {
	}
	return p.take()
}

func (p *Parser) take() Delta {
	d := p.out
	p.out = Delta{}
	return d
}

// Parse parses a whole answer: its content and its calls.
func Parse(name string, o Options, text string) (string, []ToolCall, error) {
	p, err := New(name, o)
	if err != nil {
		return "", nil, err
	}
	d := p.Push(text)
	f := p.Flush()
	content := d.Content + f.Content
	byIndex := map[int]*ToolCall{}
	var calls []*ToolCall
	for _, c := range append(d.Calls, f.Calls...) {
		tc := byIndex[c.Index]
		if tc == nil {
			tc = &ToolCall{ID: c.ID, Name: c.Name}
			byIndex[c.Index] = tc
			calls = append(calls, tc)
		}
		tc.Arguments += c.Arguments
	}
	var good []ToolCall
	for i, c := range calls {
		if !p.bad[i] {
			good = append(good, *c)
		}
	}
	if len(good) == 0 && p.markers {
		return text, nil, nil
	}
	return content, good, nil
}

// content emits text that is no call; whitespace alone after a call is held until text follows.
func (p *Parser) content(s string) {
	if s == "" {
		return
	}
	if p.afterCall {
		if strings.TrimLeft(s, " \t\r\n") == "" {
			p.ws += s
			return
		}
		s, p.ws, p.afterCall = p.ws+s, "", false
	}
	p.out.Content += s
}

// startCall announces a call.
func (p *Parser) startCall(name string) {
	p.ws, p.afterCall, p.emitted, p.searched = "", false, "", 0
	p.raw.Reset()
	p.out.Calls = append(p.out.Calls, CallDelta{Index: p.calls, ID: p.newID(), Name: name})
	p.calls++
}

// args streams the current call's arguments: s is all of them known so far, which extends what was
// streamed (only the new part is looked at, so a long call costs linear time).
func (p *Parser) args(s string) {
	if len(s) <= len(p.emitted) {
		return
	}
	d := s[len(p.emitted):]
	p.emitted = s
	if n := len(p.out.Calls); n > 0 && p.out.Calls[n-1].Index == p.calls-1 && p.out.Calls[n-1].ID == "" {
		p.out.Calls[n-1].Arguments += d
	} else {
		p.out.Calls = append(p.out.Calls, CallDelta{Index: p.calls - 1, Arguments: d})
	}
}

// finalArgs streams the rest of the current call's arguments once they are known in full; a call
// whose final arguments do not extend what was streamed (only a malformed one) is marked bad.
func (p *Parser) finalArgs(s string) bool {
	if !strings.HasPrefix(s, p.emitted) {
		return false
	}
	p.args(s)
	return true
}

// take moves the unconsumed input into raw, the growing text of the current call's arguments (a
// strings.Builder, so appending costs no copy of what is already there).
func (p *Parser) takeRaw() string {
	p.raw.WriteString(p.buf)
	p.buf = ""
	return p.raw.String()
}

// endCall ends the current call; ok is false for a malformed one.
func (p *Parser) endCall(ok bool) {
	if !ok {
		p.bad[p.calls-1] = true
	}
	p.afterCall = true
}

// partialSuffix is the length of the longest suffix of s that is a proper prefix of one of tags.
func partialSuffix(s string, tags ...string) int {
	best := 0
	for _, t := range tags {
		for n := min(len(s), len(t)-1); n > best; n-- {
			// Most candidates fail on the last byte: check it before the rest.
			if t[n-1] == s[len(s)-1] && strings.HasSuffix(s, t[:n]) {
				best = n
				break
			}
		}
	}
	return best
}

const idChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// openAIID is an id in OpenAI's shape: "call_" and 24 letters or digits.
func openAIID() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	for i := range b {
		b[i] = idChars[int(b[i])%len(idChars)]
	}
	return "call_" + string(b)
}
