// Package stop decides where a generation ends and how much of its decoded text a client may see so
// far: stop strings, stop token ids, the model's end-of-sequence ids, min_tokens and max_tokens,
// applied as vLLM and SGLang apply them, to text the gateway decoded itself from an engine's token ids.
// It knows nothing of transports or tokenizers: it is fed one generated token's id and text at a time.
//
// Where the semantics come from (vLLM v1, SGLang):
//
//   - A stop string ends the text where it begins (vllm/v1/engine/detokenizer.py, check_stop_strings;
//     SGLang's detokenizer_manager.py trim_matched_stop); with IncludeStopStr (vLLM's
//     include_stop_str_in_output, SGLang's no_stop_trim) it ends the text where the stop string ends.
//     Text after it, even in the same token, is dropped.
//   - After each token only matches that end in the token's new text count, as check_stop_strings
//     searches from 1-new_char_count-len(stop). When one token completes several stop strings, the one
//     completing first wins (ties: the earlier in the list), so the result does not depend on how the
//     text was cut into tokens; vLLM's loop returns the first in list order that occurs, which differs
//     only when one token completes two stop strings at different places.
//   - A stop token id (StopTokenIDs, or an EOS id unless IgnoreEOS) ends the generation and its text is
//     not output unless IncludeStopStr (BaseIncrementalDetokenizer.update skips the last token from
//     detokenization when stop_terminated and not include_stop_str_in_output; SGLang trims the last id
//     unless no_stop_trim). The stop strings are not checked on that token, as vLLM skips them.
//   - vLLM reports stop_reason as the matched string or the stop_token_ids entry, and None for the
//     primary EOS (v1/core/sched/utils.py check_stop). The generation_config's other eos ids become
//     stop_token_ids unless ignore_eos (sampling_params.py, update_from_generation_config), so they are
//     reported by id: that is [Params.GenerationEOS].
//   - min_tokens: the first min_tokens tokens are not stop tokens (vLLM masks stop and EOS ids in the
//     sampler while fewer than min_tokens were generated; check_stop's own guard, num_output_tokens <
//     min_tokens, would let the min_tokens-th stop, which the sampler never lets happen), and no stop
//     string counts that ends in their text (vLLM's detokenizer moves its stop check offset past it).
//   - max_tokens ends the generation with finish_reason "length" unless the same token is a stop token
//     (check_stop tests EOS and stop_token_ids before the length) or completes a stop string (the
//     output processor turns a length finish with a stop string into "stop").
//
// The text held back is only what could still become a stop string: the longest suffix of the text not
// yet emitted that is a proper prefix of some stop string. vLLM holds back max(len(stop))-1 characters
// always; the text emitted in total is the same.
package stop

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
)

// compactAt is how many bytes of emitted text are dropped at once.
const compactAt = 512

// Params are a request's stop settings.
type Params struct {
	Stop         []string // stop strings; none may be empty (vLLM rejects "": it matches everywhere)
	StopTokenIDs []int    // reported by id
	// EOS are the model's end ids reported as stop_reason None (vLLM's primary eos_token_id);
	// GenerationEOS the generation_config's others, which vLLM reports by id. IgnoreEOS disables both.
	EOS           []int
	GenerationEOS []int
	IgnoreEOS     bool
	MinTokens     int  // no stop before this many tokens were generated
	MaxTokens     int  // 0: no limit
	IncludeStop   bool // include_stop_str_in_output / no_stop_trim: the matched stop string or token stays in the text
}

// End says why a generation ended.
type End struct {
	Reason     string // "stop" or "length"; "" while it goes on
	StopString string // the stop string matched, or ""
	// StopToken is the stop token id that ended it, or -1: a stop string, an EOS (vLLM's stop_reason
	// None) or the length.
	StopToken int
}

// Matcher applies Params to one generation's tokens. It is not safe for concurrent use.
type Matcher struct {
	stops   [][]byte
	maxStop int // the longest stop string's length in bytes
	// Bytes some stop string ends with, and bytes one begins with: a token whose text has none of the
	// first cannot complete a stop, and text with none of the second near its end holds nothing back,
	// which is most tokens, checked without a search.
	lastByte, firstByte byteSet
	stopIDs             []int // StopTokenIDs and GenerationEOS unless IgnoreEOS
	eos                 []int
	minTokens           int
	maxTokens           int
	includeStop         bool

	n int // tokens fed
	// buf is the text's tail: what is not emitted yet, after up to maxStop-1 bytes that are, which a
	// stop string completed by the next token may begin in. sent is how much of buf is emitted.
	buf       []byte
	sent      int
	compactAt int // the const, or a test's few bytes
	end       End
}

// byteSet is a set of bytes, one bit each: a Matcher is made for every sample of every request, and
// two [256]bool were most of its size.
type byteSet [4]uint64

func (s *byteSet) add(b byte)      { s[b>>6] |= 1 << (b & 63) }
func (s *byteSet) has(b byte) bool { return s[b>>6]&(1<<(b&63)) != 0 }

// Validate reports what New would refuse in p, without starting a Matcher.
func (p Params) Validate() error {
	if p.MinTokens < 0 || p.MaxTokens < 0 {
		return fmt.Errorf("stop: min_tokens %d and max_tokens %d must not be negative", p.MinTokens, p.MaxTokens)
	}
	if p.MaxTokens > 0 && p.MinTokens > p.MaxTokens {
		return fmt.Errorf("stop: min_tokens %d is more than max_tokens %d", p.MinTokens, p.MaxTokens)
	}
	if slices.Contains(p.Stop, "") {
		return errEmptyStop
	}
	return nil
}

var errEmptyStop = errors.New("stop: a stop string is empty")

// New checks p and starts a Matcher.
func New(p Params) (*Matcher, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	m := &Matcher{
		stopIDs:     p.StopTokenIDs,
		minTokens:   p.MinTokens,
		maxTokens:   p.MaxTokens,
		includeStop: p.IncludeStop,
		end:         End{StopToken: -1},
		compactAt:   compactAt,
		buf:         make([]byte, 0, 128), // a few dozen tokens before it grows
	}
	for _, s := range p.Stop {
		m.stops = append(m.stops, []byte(s))
		m.maxStop = max(m.maxStop, len(s))
		m.lastByte.add(s[len(s)-1])
		m.firstByte.add(s[0])
	}
	if !p.IgnoreEOS {
		m.eos = p.EOS
		m.stopIDs = append(slices.Clip(m.stopIDs), p.GenerationEOS...)
	}
	return m, nil
}

// Feed takes the next generated token's id and its decoded text (a DecodeStream's Step) and returns the
// text now safe to emit. done says the generation ended with this token: emit is then the rest of the
// text, and [Matcher.Result] says why. Feeding after done returns "", true.
func (m *Matcher) Feed(id int, text string) (emit string, done bool) {
	if m.end.Reason != "" {
		return "", true
	}
	m.n++
	stopsAllowed := m.n > m.minTokens
	old := len(m.buf)
	if stopsAllowed && (slices.Contains(m.stopIDs, id) || slices.Contains(m.eos, id)) {
		if !m.includeStop {
			text = ""
		}
		m.buf = append(m.buf, text...)
		m.end.Reason = "stop"
		if slices.Contains(m.stopIDs, id) {
			m.end.StopToken = id // else an EOS: vLLM's stop_reason None
		}
		return m.emitTo(len(m.buf), text, old), true
	}
	m.buf = append(m.buf, text...)
	if stopsAllowed && m.mayComplete(text) {
		if s, start := m.match(old); s >= 0 {
			end := start
			if m.includeStop {
				end += len(m.stops[s])
			}
			m.end.Reason, m.end.StopString = "stop", string(m.stops[s])
			return m.emitTo(end, text, old), true
		}
	}
	if m.maxTokens > 0 && m.n >= m.maxTokens {
		m.end.Reason = "length"
		return m.emitTo(len(m.buf), text, old), true
	}
	hold := 0
	if !m.includeStop {
		// With the stop string kept, a match only trims what follows it in its own token's text,
		// so nothing already seen needs holding.
		hold = m.holdBack()
	}
	emit = m.emitTo(len(m.buf)-hold, text, old)
	// Drop emitted text a stop string can no longer begin in, a few hundred bytes at a time rather
	// than a copy every token.
	if drop := len(m.buf) - max(len(m.buf)-m.sent, m.maxStop-1); drop >= m.compactAt {
		m.buf = append(m.buf[:0], m.buf[drop:]...)
		m.sent -= drop
	}
	return emit, false
}

// emitTo emits buf up to i. text is the fed token's text, at old in buf: when all that is emitted
// lies in it, as it does whenever nothing was held, the emit is a substring of it and costs no copy.
func (m *Matcher) emitTo(i int, text string, old int) string {
	var s string
	if m.sent >= old {
		s = text[m.sent-old : i-old]
	} else {
		s = string(m.buf[m.sent:i])
	}
	m.sent = i
	return s
}

func (m *Matcher) mayComplete(text string) bool {
	for i := range len(text) {
		if m.lastByte.has(text[i]) {
			return true
		}
	}
	return false
}

// match finds the stop string completing first in buf's text from old on (the new token's), and where
// it starts; -1 if none. A match ending earlier was looked for when that text came, or lies in the
// first min_tokens tokens' text, where stops do not count.
func (m *Matcher) match(old int) (stop, start int) {
	stop, start = -1, 0
	bestEnd := len(m.buf) + 1
	for i, s := range m.stops {
		from := max(0, old-len(s)+1)
		j := bytes.Index(m.buf[from:], s)
		if j < 0 {
			continue
		}
		if end := from + j + len(s); end < bestEnd {
			stop, start, bestEnd = i, from+j, end
		}
	}
	return stop, start
}

// holdBack is the length of the longest suffix of the unemitted text that is a proper prefix of a stop
// string: text that a later token could turn into a stop string. Such a suffix begins with a stop
// string's first byte within the last maxStop-1 bytes, so most tokens cost a few table lookups.
func (m *Matcher) holdBack() int {
	p := m.buf[m.sent:]
	for j := max(0, len(p)-(m.maxStop-1)); j < len(p); j++ {
		if !m.firstByte.has(p[j]) {
			continue
		}
		tail := p[j:]
		for _, s := range m.stops {
			if len(s) > len(tail) && bytes.HasPrefix(s, tail) {
				return len(tail)
			}
		}
	}
	return 0
}

// Finish is for a stream that ended without Feed saying done (the engine stopped on its own, or the
// stream broke off): it returns the text still held back, which no stop string can complete any more.
// Result stays as it was: the caller knows why the engine ended. Feed itself ends a generation at
// MaxTokens, with Reason "length".
func (m *Matcher) Finish() string {
	if m.end.Reason != "" {
		return ""
	}
	return m.emitTo(len(m.buf), "", len(m.buf))
}

// Result is why the generation ended; Reason is "" while it has not.
func (m *Matcher) Result() End {
	return m.end
}

// Held is how many bytes of decoded text the Matcher is holding back.
func (m *Matcher) Held() int {
	return len(m.buf) - m.sent
}
