package enginerpc

import (
	"encoding/json"
	"strconv"

	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/enginegrpc"
	"github.com/sluicegw/sluice/internal/jsonx"
	"github.com/sluicegw/sluice/internal/tokenizer"
	"github.com/sluicegw/sluice/internal/toolcall"
)

// The answers, in the shapes the engines' HTTP servers give: OpenAI's chat.completion and
// text_completion (vLLM adds stop_reason and kv_transfer_params, SGLang matched_stop), SGLang's
// /generate object, and their SSE chunks.

// meta is what every object of one answer repeats.
type meta struct {
	id      string
	created int64
	model   string
	proto   enginegrpc.Protocol
	eos     []int
	tok     *tokenizer.Tokenizer // for logprobs' token strings
}

// stopReason reports an answer in vLLM's shape, with stop_reason (TensorRT-LLM's OpenAI server has
// vLLM's), rather than SGLang's matched_stop.
func (m *meta) stopReason() bool { return m.proto == enginegrpc.VLLM || m.proto == enginegrpc.TRTLLM }

func appendHead(dst []byte, m *meta, object string) []byte {
	dst = append(dst, `{"id":`...)
	dst = jsonx.AppendString(dst, m.id)
	dst = append(dst, `,"object":"`...)
	dst = append(dst, object...)
	dst = append(dst, `","created":`...)
	dst = strconv.AppendInt(dst, m.created, 10)
	dst = append(dst, `,"model":`...)
	return jsonx.AppendString(dst, m.model)
}

func appendAny(dst []byte, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return append(dst, "null"...)
	}
	return append(dst, b...)
}

func (s *sample) promptTokens(c *call) uint32 {
	if s.prompt > 0 {
		return s.prompt
	}
	return uint32(len(c.ids))
}

func appendUsage(dst []byte, c *call, ss *samples) []byte {
	p, comp, cached := ss.usage(c)
	dst = append(dst, `{"prompt_tokens":`...)
	dst = strconv.AppendUint(dst, p, 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendUint(dst, comp, 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendUint(dst, p+comp, 10)
	dst = append(dst, `,"prompt_tokens_details":{"cached_tokens":`...)
	dst = strconv.AppendUint(dst, cached, 10)
	return append(dst, `}}`...)
}

// appendFinish writes finish_reason and, once finished, the engine's report of what matched.
func appendFinish(dst []byte, m *meta, s *sample, final bool) []byte {
	dst = append(dst, `,"finish_reason":`...)
	if !final {
		dst = append(dst, "null"...)
		if m.stopReason() {
			dst = append(dst, `,"stop_reason":null`...)
		}
		return dst
	}
	dst = jsonx.AppendString(dst, s.finishReason())
	if m.stopReason() {
		dst = append(dst, `,"stop_reason":`...)
		return appendAny(dst, s.matched(m.eos, false))
	}
	dst = append(dst, `,"matched_stop":`...)
	return appendAny(dst, s.matched(m.eos, true))
}

func appendKVTransfer(dst []byte, m *meta, s *sample) []byte {
	if m.proto != enginegrpc.VLLM {
		return dst
	}
	dst = append(dst, `,"kv_transfer_params":`...)
	if s.kvTransfer == nil || !json.Valid([]byte(*s.kvTransfer)) {
		return append(dst, "null"...)
	}
	return append(dst, *s.kvTransfer...)
}

// renderWhole is a unary answer: one choice per sample; /generate's is one object, or with n > 1 a
// list of them, as SGLang's HTTP server answers.
func renderWhole(c *call, m *meta, ss *samples) []byte {
	size := 512 // the envelope and usage; the text twice over leaves room for escapes and logprobs
	for _, s := range ss.all {
		size += 256 + 2*len(s.text)
	}
	dst := make([]byte, 0, size)
	switch c.route {
	case body.RouteChat:
		dst = appendHead(dst, m, "chat.completion")
		dst = append(dst, `,"choices":[`...)
		for i, s := range ss.all {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendChatChoice(dst, c, m, s)
		}
	case body.RouteCompletions:
		dst = appendHead(dst, m, "text_completion")
		dst = append(dst, `,"choices":[`...)
		for i, s := range ss.all {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendCompletionChoice(dst, c, m, s)
		}
	default:
		if len(ss.all) == 1 {
			return appendGenerate(dst, c, m, ss.all[0], true)
		}
		dst = append(dst, '[')
		for i, s := range ss.all {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendGenerate(dst, c, m, s, true)
		}
		return append(dst, ']')
	}
	dst = append(dst, `],"usage":`...)
	dst = appendUsage(dst, c, ss)
	dst = appendKVTransfer(dst, m, ss.all[0])
	return append(dst, '}')
}

func appendChatChoice(dst []byte, c *call, m *meta, s *sample) []byte {
	content, reasoningText, calls := s.whole(c)
	dst = append(dst, `{"index":`...)
	dst = strconv.AppendInt(dst, int64(s.index), 10)
	dst = append(dst, `,"message":{"role":"assistant","content":`...)
	if content == "" && len(calls) > 0 {
		dst = append(dst, "null"...) // OpenAI's content of a message that only calls tools
	} else {
		dst = jsonx.AppendString(dst, content)
	}
	if reasoningText != nil {
		dst = appendReasoning(dst, *reasoningText)
	}
	if len(calls) > 0 {
		dst = append(dst, `,"tool_calls":[`...)
		for i, tc := range calls {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendCall(dst, toolcall.CallDelta{Index: -1, ID: tc.ID, Name: tc.Name, Arguments: tc.Arguments})
		}
		dst = append(dst, ']')
	}
	dst = append(dst, '}')
	dst = appendChatChoiceLogprobs(dst, c, m, s.lps)
	dst = appendFinish(dst, m, s, true)
	return append(dst, '}')
}

func appendCompletionChoice(dst []byte, c *call, m *meta, s *sample) []byte {
	dst = append(dst, `{"index":`...)
	dst = strconv.AppendInt(dst, int64(s.index), 10)
	dst = append(dst, `,"text":`...)
	text, lps := string(s.text), s.lps
	if c.echo {
		text = s.echoText + text
		lps = append(append([]tokenLP(nil), s.inLPs...), lps...)
	}
	dst = jsonx.AppendString(dst, text)
	dst = appendCompletionChoiceLogprobs(dst, c, m, s, lps)
	dst = appendFinish(dst, m, s, true)
	return append(dst, '}')
}

// appendGenerate is SGLang's /generate object; streamed, each carries the text and ids so far.
func appendGenerate(dst []byte, c *call, m *meta, s *sample, final bool) []byte {
	dst = append(dst, '{')
	if c.n > 1 {
		dst = append(dst, `"index":`...)
		dst = strconv.AppendInt(dst, int64(s.index), 10)
		dst = append(dst, ',')
	}
	dst = append(dst, `"text":`...)
	dst = jsonx.AppendString(dst, string(s.text))
	dst = append(dst, `,"output_ids":[`...)
	for i, id := range s.ids {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendUint(dst, uint64(id), 10)
	}
	dst = append(dst, `],"meta_info":{"id":`...)
	dst = jsonx.AppendString(dst, m.id)
	dst = append(dst, `,"finish_reason":`...)
	if final {
		dst = append(dst, `{"type":`...)
		dst = jsonx.AppendString(dst, s.finishReason())
		if mt := s.matched(m.eos, true); mt != nil {
			dst = append(dst, `,"matched":`...)
			dst = appendAny(dst, mt)
		}
		dst = append(dst, '}')
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"prompt_tokens":`...)
	dst = strconv.AppendUint(dst, uint64(s.promptTokens(c)), 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendUint(dst, uint64(s.completion), 10)
	dst = append(dst, `,"cached_tokens":`...)
	dst = strconv.AppendUint(dst, uint64(s.cached), 10)
	if c.lp.output {
		dst = appendGenerateLogprobs(dst, c, s)
	}
	return append(dst, `}}`...)
}

// appendReasoning writes the reasoning as vLLM's and SGLang's reasoning_content (null when there is
// none, as vLLM's).
func appendReasoning(dst []byte, r string) []byte {
	dst = append(dst, `,"reasoning_content":`...)
	if r == "" {
		return append(dst, "null"...)
	}
	return jsonx.AppendString(dst, r)
}

// appendCall is one OpenAI tool call: a streamed delta has its index, and id, type and name only in
// its first delta; a whole answer's call (Index -1) has no index.
func appendCall(dst []byte, d toolcall.CallDelta) []byte {
	dst = append(dst, '{')
	if d.Index >= 0 {
		dst = append(dst, `"index":`...)
		dst = strconv.AppendInt(dst, int64(d.Index), 10)
		dst = append(dst, ',')
	}
	if d.ID != "" {
		dst = append(dst, `"id":`...)
		dst = jsonx.AppendString(dst, d.ID)
		dst = append(dst, `,"type":"function","function":{"name":`...)
		dst = jsonx.AppendString(dst, d.Name)
		dst = append(dst, ',')
	} else {
		dst = append(dst, `"function":{`...)
	}
	dst = append(dst, `"arguments":`...)
	dst = jsonx.AppendString(dst, d.Arguments)
	return append(dst, "}}"...)
}

// appendChunk is one streamed chunk: d is the new text; first puts the assistant's role in a chat
// chunk; final closes the choice with its finish_reason.
func appendChunk(dst []byte, c *call, m *meta, s *sample, d delta, first, final bool) []byte {
	switch c.route {
	case body.RouteChat:
		dst = appendHead(dst, m, "chat.completion.chunk")
		dst = append(dst, `,"choices":[{"index":`...)
		dst = strconv.AppendInt(dst, int64(s.index), 10)
		dst = append(dst, `,"delta":{`...)
		sep := ""
		if first {
			dst = append(dst, `"role":"assistant","content":`...)
			dst = jsonx.AppendString(dst, d.content)
			sep = ","
		} else if d.content != "" {
			dst = append(dst, `"content":`...)
			dst = jsonx.AppendString(dst, d.content)
			sep = ","
		}
		if d.reasoning != "" {
			dst = append(dst, sep+`"reasoning_content":`...)
			dst = jsonx.AppendString(dst, d.reasoning)
			sep = ","
		}
		if len(d.calls) > 0 {
			dst = append(dst, sep+`"tool_calls":[`...)
			for i, cd := range d.calls {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = appendCall(dst, cd)
			}
			dst = append(dst, ']')
		}
		dst = append(dst, '}')
		dst = appendChatChoiceLogprobs(dst, c, m, d.lps)
	case body.RouteCompletions:
		dst = appendHead(dst, m, "text_completion")
		dst = append(dst, `,"choices":[{"index":`...)
		dst = strconv.AppendInt(dst, int64(s.index), 10)
		dst = append(dst, `,"text":`...)
		dst = jsonx.AppendString(dst, d.content)
		dst = appendCompletionChoiceLogprobs(dst, c, m, s, d.lps)
	default:
		return appendGenerate(dst, c, m, s, final)
	}
	dst = appendFinish(dst, m, s, final)
	dst = append(dst, `}]`...)
	if c.includeUsage {
		dst = append(dst, `,"usage":null`...)
	}
	return append(dst, '}')
}

func appendUsageChunk(dst []byte, c *call, m *meta, ss *samples) []byte {
	object := "chat.completion.chunk"
	if c.route == body.RouteCompletions {
		object = "text_completion"
	}
	dst = appendHead(dst, m, object)
	dst = append(dst, `,"choices":[],"usage":`...)
	dst = appendUsage(dst, c, ss)
	return append(dst, '}')
}

func appendErrorBody(dst []byte, message, typ, param, code string) []byte {
	dst = append(dst, `{"error":{"message":`...)
	dst = jsonx.AppendString(dst, message)
	dst = append(dst, `,"type":`...)
	dst = jsonx.AppendString(dst, typ)
	dst = append(dst, `,"param":`...)
	if param == "" {
		dst = append(dst, "null"...)
	} else {
		dst = jsonx.AppendString(dst, param)
	}
	dst = append(dst, `,"code":`...)
	dst = jsonx.AppendString(dst, code)
	return append(dst, "}}"...)
}

// appendChatChoiceLogprobs writes a chat choice's logprobs: null unless the request asked for them.
func appendChatChoiceLogprobs(dst []byte, c *call, m *meta, lps []tokenLP) []byte {
	if !c.lp.output {
		return append(dst, `,"logprobs":null`...)
	}
	return appendChatLogprobs(dst, m.tok, lps, c.lp.top)
}

// appendCompletionChoiceLogprobs writes a completions choice's logprobs, their text offsets going on
// from the sample's previous chunks.
func appendCompletionChoiceLogprobs(dst []byte, c *call, m *meta, s *sample, lps []tokenLP) []byte {
	if !c.lp.output {
		return append(dst, `,"logprobs":null`...)
	}
	dst, s.lpOffset = appendCompletionLogprobs(dst, m.tok, lps, c.lp.top, s.lpOffset)
	return dst
}
