package enginerpc

import (
	"fmt"

	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/reasoning"
	"github.com/sluicegw/sluice/internal/stop"
	"github.com/sluicegw/sluice/internal/tokenizer"
	"github.com/sluicegw/sluice/internal/toolcall"
)

// sample is one generation's state: the engine's ids turned into text (DecodeStream), cut at stops
// (stop.Matcher), and the engine's counts.
type sample struct {
	index      int // the choice's index (n > 1)
	ds         *tokenizer.DecodeStream
	m          *stop.Matcher
	cumulative bool // the chunks' counts are totals so far (SGLang), else each chunk's own (vLLM)
	streaming  bool

	text                       []byte   // every emitted byte
	scratch                    []byte   // add's buffer for one event's text
	ids                        []uint32 // every output id
	chunks                     int
	prompt, completion, cached uint32
	complete                   bool
	finish                     string
	matchedID                  *uint32
	matchedStr                 *string
	kvTransfer                 *string

	// Logprobs, when asked for: of the output tokens kept (none after a stop), and of the prompt.
	wantLP bool
	lps    []tokenLP
	inLPs  []tokenLP
	// echo: the prompt's text; a streamed completion's first chunk has it (and its logprobs) still to go.
	echoPending bool
	echoText    string
	lpOffset    int // completions: the text_offset of the next token

	// A streamed chat's parsers (nil: none): the text goes through the reasoning parser, then its
	// content through the tool-call parser. A whole answer is parsed at the end (whole).
	rp        *reasoning.Parser
	tp        *toolcall.Parser
	toolCalls bool // the answer has tool calls: its finish_reason is tool_calls, as vLLM's
}

// delta is the new text of one event, split by the chat's parsers (all content without them).
type delta struct {
	content, reasoning string
	calls              []toolcall.CallDelta
	lps                []tokenLP // the logprobs of this event's tokens (with echo, the prompt's first)
}

func (d delta) empty() bool {
	return d.content == "" && d.reasoning == "" && len(d.calls) == 0 && len(d.lps) == 0
}

func newSample(tok *tokenizer.Tokenizer, c *call, cumulative bool) *sample {
	m, err := stop.New(c.stopParams)
	if err != nil {
		panic(err) // parseCall checked these Params
	}
	s := &sample{ds: tok.NewDecodeStream(c.skipSpecial), m: m, cumulative: cumulative, streaming: c.stream,
		wantLP: c.lp.output}
	if c.echo {
		s.echoText = promptText(tok, c)
		s.echoPending = c.stream
	}
	if c.stream && c.route == body.RouteChat {
		// SetEngine checked the names.
		if c.reasoningParser != "" {
			s.rp, _ = reasoning.New(c.reasoningParser, c.reasoningOpts)
		}
		if c.toolParser != "" {
			s.tp, _ = toolcall.New(c.toolParser, toolcall.Options{})
		}
	}
	return s
}

// errUnknownToken means the engine sent an id the gateway's tokenizer does not have: the tokenizer
// given for the model is not the engine's.
type errUnknownToken struct{ err error }

func (e errUnknownToken) Error() string {
	return fmt.Sprintf("the engine generated a token the gateway's tokenizer does not know (is --tokenizer-path the engine's model?): %v", e.err)
}

// add takes one event and returns the text it makes safe to emit.
func (s *sample) add(ev event) (delta, error) {
	ids := ev.ids
	if ev.complete && s.streaming && s.chunks > 0 {
		// A streamed Complete is built from the same engine output as the last chunk and repeats its
		// ids (both servicers).
		ids = nil
	}
	out, lps, stopped, err := s.feed(ids, ev.outLP)
	if err != nil {
		return delta{}, err
	}
	if len(ev.inLP) > 0 && s.inLPs == nil {
		s.inLPs = ev.inLP
	}
	out = s.count(ev, stopped, out)
	s.text = append(s.text, out...)
	s.scratch = out
	d := s.split(string(out), ev.complete)
	d.lps = lps
	if !s.echoPending {
		return d, nil
	}
	s.echoPending = false
	if s.wantLP && len(s.inLPs) == 0 {
		return delta{}, errNoPromptLogprobs
	}
	d.content = s.echoText + d.content
	if s.wantLP {
		d.lps = append(append([]tokenLP(nil), s.inLPs...), d.lps...)
	}
	return d, nil
}

// feed takes an event's ids: each is kept, and detokenized and matched against the stop strings until
// one matched. It returns the text to emit (in the sample's scratch buffer), the logprobs of the ids
// fed, and whether a stop string has matched.
func (s *sample) feed(ids []uint32, outLP []tokenLP) (out []byte, lps []tokenLP, stopped bool, err error) {
	out = s.scratch[:0] // the event's text, copied out by add (into s.text and the delta)
	if s.ids == nil {
		s.ids = make([]uint32, 0, max(len(ids), 16))
	}
	stopped = s.m.Result().Reason != ""
	for i, id := range ids {
		s.ids = append(s.ids, id)
		if stopped {
			continue // text after a stop is dropped; the engine stops on its own
		}
		t, err := s.ds.Step(int(id))
		if err != nil {
			return nil, nil, false, errUnknownToken{err}
		}
		emit, done := s.m.Feed(int(id), t)
		out = append(out, emit...)
		stopped = done
		if s.wantLP && i < len(outLP) {
			lps = append(lps, outLP[i])
		}
	}
	s.lps = append(s.lps, lps...)
	return out, lps, stopped, nil
}

// count takes an event's counts, and a Complete's finish: the text held back for a stop string that
// never matched and the detokenizer's rest are appended to out.
func (s *sample) count(ev event, stopped bool, out []byte) []byte {
	if !ev.complete {
		s.chunks++
		if s.cumulative {
			s.completion = ev.completion
		} else {
			s.completion += ev.completion
		}
	} else {
		s.complete = true
		if s.cumulative || !s.streaming || s.chunks == 0 {
			s.completion = ev.completion
		}
		s.finish, s.matchedID, s.matchedStr, s.kvTransfer = ev.finish, ev.matchedID, ev.matchedStr, ev.kvTransfer
		if !stopped {
			out = append(out, s.m.Finish()...)
			out = append(out, s.ds.Flush()...)
		}
	}
	if ev.prompt > 0 {
		s.prompt = ev.prompt
	}
	s.cached = max(s.cached, ev.cached)
	return out
}

// errNoPromptLogprobs: echo with logprobs needs the prompt's logprobs, which the engine did not send
// (a decode leg computed no prompt).
var errNoPromptLogprobs = &body.RequestError{Param: "echo",
	Message: "echo with logprobs needs the prompt's logprobs, and the engine returned none"}

// promptText is the prompt as echo shows it: the request's text, or its token ids decoded.
func promptText(tok *tokenizer.Tokenizer, c *call) string {
	if c.text != "" {
		return c.text
	}
	t, err := tok.Decode(toInts(c.ids), false)
	if err != nil {
		return ""
	}
	return t
}

// split runs a streamed chat's new text through its parsers; final flushes what they hold back.
func (s *sample) split(text string, final bool) delta {
	d := delta{content: text}
	if s.rp != nil {
		r := s.rp.Push(text)
		if final {
			f := s.rp.Flush()
			r.Reasoning, r.Content = r.Reasoning+f.Reasoning, r.Content+f.Content
		}
		d.reasoning, d.content = r.Reasoning, r.Content
	}
	if s.tp != nil {
		t := s.tp.Push(d.content)
		if final {
			f := s.tp.Flush()
			t.Content, t.Calls = t.Content+f.Content, append(t.Calls, f.Calls...)
		}
		d.content, d.calls = t.Content, t.Calls
		s.toolCalls = s.toolCalls || len(t.Calls) > 0
	}
	return d
}

// whole splits a whole chat answer with its parsers; reasoning is nil without a reasoning parser.
func (s *sample) whole(c *call) (content string, reasoningText *string, calls []toolcall.ToolCall) {
	content = string(s.text)
	if c.reasoningParser != "" {
		r, _ := reasoning.Parse(c.reasoningParser, c.reasoningOpts, content)
		content, reasoningText = r.Content, &r.Reasoning
	}
	if c.toolParser != "" {
		content, calls, _ = toolcall.Parse(c.toolParser, toolcall.Options{}, content)
		s.toolCalls = len(calls) > 0
	}
	return content, reasoningText, calls
}

// finishReason is tool_calls for an answer with tool calls (vLLM's, whatever ended it), else the
// gateway's own stop when it found one, else the engine's ("stop" when it gave none).
func (s *sample) finishReason() string {
	if s.toolCalls {
		return "tool_calls"
	}
	if r := s.m.Result().Reason; r != "" {
		return r
	}
	if s.finish == "" {
		return "stop"
	}
	return s.finish
}

// matched is what ended the generation, as a JSON value: the stop string, the stop token id, or null.
// eosAsID reports an EOS by its id (SGLang's matched_stop) rather than null (vLLM's stop_reason).
func (s *sample) matched(eos []int, eosAsID bool) any {
	if r := s.m.Result(); r.Reason == "stop" {
		switch {
		case r.StopString != "":
			return r.StopString
		case r.StopToken >= 0:
			return r.StopToken
		}
		if eosAsID && len(s.ids) > 0 {
			return s.ids[len(s.ids)-1]
		}
		return nil
	}
	switch {
	case s.matchedStr != nil:
		return *s.matchedStr
	case s.matchedID != nil:
		if !eosAsID {
			for _, e := range eos {
				if uint32(e) == *s.matchedID {
					return nil
				}
			}
		}
		return *s.matchedID
	}
	return nil
}
