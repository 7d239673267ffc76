package workerrpc

import (
	"strconv"

	workerv1 "github.com/sluicegw/sluice/gen/sluice/worker/v1"
	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/jsonx"
)

// This file renders worker-protocol results as the engines' JSON (OpenAI chat.completion and
// text_completion, SGLang /generate), by appending to byte slices: it runs once per streamed token.

// sample is the accumulated output of one sub-request.
type sample struct {
	text         []byte
	ids          []uint32
	finish       string
	promptTokens uint32
	completion   uint32
	cached       uint32
	started      bool // a chunk was emitted (chat: the role went out)
	finished     bool
}

func (s *sample) add(m *workerv1.DecodeResponse) {
	s.text = append(s.text, m.GetText()...)
	s.ids = append(s.ids, m.GetTokenIds()...)
	if m.GetFinishReason() != "" {
		s.finish = m.GetFinishReason()
	}
	if m.GetPromptTokens() > 0 {
		s.promptTokens = m.GetPromptTokens()
	}
	if m.GetCompletionTokens() > 0 {
		s.completion = m.GetCompletionTokens()
	}
	if m.GetCachedTokens() > 0 {
		s.cached = m.GetCachedTokens()
	}
}

func (s *sample) finishReason() string {
	if s.finish == "" {
		return "stop"
	}
	return s.finish
}

// usage sums a call's token counts: prompt tokens once per prompt (its first sample's), completion
// tokens over all samples, as OpenAI reports n > 1.
func usage(c *grpcCall, samples []sample) (prompt, completion, cached uint64) {
	for i := range samples {
		if i%c.n == 0 {
			prompt += uint64(samples[i].promptTokens)
			cached += uint64(samples[i].cached)
		}
		completion += uint64(samples[i].completion)
	}
	return
}

func appendUsage(dst []byte, c *grpcCall, samples []sample) []byte {
	p, comp, cached := usage(c, samples)
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

// responseMeta is what every rendered object shares.
type responseMeta struct {
	id      string // chatcmpl-... / cmpl-...
	created int64
	model   string
}

func appendHead(dst []byte, m *responseMeta, object string) []byte {
	dst = append(dst, `{"id":`...)
	dst = jsonx.AppendString(dst, m.id)
	dst = append(dst, `,"object":"`...)
	dst = append(dst, object...)
	dst = append(dst, `","created":`...)
	dst = strconv.AppendInt(dst, m.created, 10)
	dst = append(dst, `,"model":`...)
	return jsonx.AppendString(dst, m.model)
}

// renderFinal renders a complete non-streaming response.
func renderFinal(c *grpcCall, m *responseMeta, samples []sample) []byte {
	var dst []byte
	switch c.route {
	case body.RouteChat:
		dst = appendHead(dst, m, "chat.completion")
		dst = append(dst, `,"choices":[`...)
		for i := range samples {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"index":`...)
			dst = strconv.AppendInt(dst, int64(i), 10)
			dst = append(dst, `,"message":{"role":"assistant","content":`...)
			dst = jsonx.AppendString(dst, string(samples[i].text))
			dst = append(dst, `},"logprobs":null,"finish_reason":`...)
			dst = jsonx.AppendString(dst, samples[i].finishReason())
			dst = append(dst, '}')
		}
		dst = append(dst, `],"usage":`...)
		dst = appendUsage(dst, c, samples)
		return append(dst, '}')
	case body.RouteCompletions:
		dst = appendHead(dst, m, "text_completion")
		dst = append(dst, `,"choices":[`...)
		for i := range samples {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"index":`...)
			dst = strconv.AppendInt(dst, int64(i), 10)
			dst = append(dst, `,"text":`...)
			dst = jsonx.AppendString(dst, string(samples[i].text))
			dst = append(dst, `,"logprobs":null,"finish_reason":`...)
			dst = jsonx.AppendString(dst, samples[i].finishReason())
			dst = append(dst, '}')
		}
		dst = append(dst, `],"usage":`...)
		dst = appendUsage(dst, c, samples)
		return append(dst, '}')
	}
	if !c.multi() {
		return appendGenerate(dst, c, m, &samples[0], -1, true)
	}
	dst = append(dst, '[')
	for i := range samples {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendGenerate(dst, c, m, &samples[i], i, true)
	}
	return append(dst, ']')
}

// appendGenerate renders an SGLang /generate result object (cumulative text and ids); index < 0
// omits the index (a single, unbatched request).
func appendGenerate(dst []byte, c *grpcCall, m *responseMeta, s *sample, index int, final bool) []byte {
	dst = append(dst, `{"text":`...)
	dst = jsonx.AppendString(dst, string(s.text))
	dst = append(dst, `,"output_ids":[`...)
	for i, id := range s.ids {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendUint(dst, uint64(id), 10)
	}
	dst = append(dst, `],"meta_info":{"id":`...)
	id := m.id
	if index >= 0 {
		id += "-" + strconv.Itoa(index)
	}
	dst = jsonx.AppendString(dst, id)
	dst = append(dst, `,"finish_reason":`...)
	if final {
		dst = append(dst, `{"type":`...)
		dst = jsonx.AppendString(dst, s.finishReason())
		dst = append(dst, '}')
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"prompt_tokens":`...)
	dst = strconv.AppendUint(dst, uint64(s.promptTokens), 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendUint(dst, uint64(s.completion), 10)
	dst = append(dst, `,"cached_tokens":`...)
	dst = strconv.AppendUint(dst, uint64(s.cached), 10)
	dst = append(dst, '}')
	if index >= 0 {
		dst = append(dst, `,"index":`...)
		dst = strconv.AppendInt(dst, int64(index), 10)
	}
	return append(dst, '}')
}

// appendChunk renders the stream chunk for sample i after message msg was added to it.
func appendChunk(dst []byte, c *grpcCall, m *responseMeta, s *sample, i int, msg *workerv1.DecodeResponse) []byte {
	final := msg.GetFinishReason() != ""
	switch c.route {
	case body.RouteChat:
		dst = appendHead(dst, m, "chat.completion.chunk")
		dst = append(dst, `,"choices":[{"index":`...)
		dst = strconv.AppendInt(dst, int64(i), 10)
		dst = append(dst, `,"delta":{`...)
		sep := false
		if !s.started {
			dst = append(dst, `"role":"assistant"`...)
			sep = true
		}
		if msg.GetText() != "" || !s.started {
			if sep {
				dst = append(dst, ',')
			}
			dst = append(dst, `"content":`...)
			dst = jsonx.AppendString(dst, msg.GetText())
		}
		dst = append(dst, `},"logprobs":null`...)
		return appendChunkEnd(dst, final, msg.GetFinishReason(), c.includeUsage)
	case body.RouteCompletions:
		dst = appendHead(dst, m, "text_completion")
		dst = append(dst, `,"choices":[{"index":`...)
		dst = strconv.AppendInt(dst, int64(i), 10)
		dst = append(dst, `,"text":`...)
		dst = jsonx.AppendString(dst, msg.GetText())
		dst = append(dst, `,"logprobs":null`...)
		return appendChunkEnd(dst, final, msg.GetFinishReason(), c.includeUsage)
	}
	index := -1
	if c.multi() {
		index = i
	}
	return appendGenerate(dst, c, m, s, index, final)
}

// appendUsageChunk renders the trailing usage chunk of an OpenAI stream with include_usage.
func appendUsageChunk(dst []byte, c *grpcCall, m *responseMeta, samples []sample) []byte {
	object := "chat.completion.chunk"
	if c.route == body.RouteCompletions {
		object = "text_completion"
	}
	dst = appendHead(dst, m, object)
	dst = append(dst, `,"choices":[],"usage":`...)
	dst = appendUsage(dst, c, samples)
	return append(dst, '}')
}

// renderPrefill renders PrefillService results as JSON: one object per sub-request
// {"prompt_tokens","cached_tokens"[,"kv_transfer_params"][,"meta_info":{"input_token_logprobs"}]},
// an array of them when the call has several sub-requests.
func renderPrefill(c *grpcCall, results []*workerv1.PrefillResponse) []byte {
	var dst []byte
	if len(results) > 1 {
		dst = append(dst, '[')
	}
	for i, r := range results {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"prompt_tokens":`...)
		dst = strconv.AppendUint(dst, uint64(r.GetPromptTokens()), 10)
		dst = append(dst, `,"cached_tokens":`...)
		dst = strconv.AppendUint(dst, uint64(r.GetCachedTokens()), 10)
		if kv := r.GetKvTransfer(); kv != nil {
			dst = append(dst, `,"kv_transfer_params":`...)
			dst = appendKV(dst, kv)
		}
		if lps := r.GetInputLogprobs(); len(lps) > 0 {
			// SGLang's shape is [logprob, token_id, token_text]; the worker protocol carries only the logprob.
			dst = append(dst, `,"meta_info":{"input_token_logprobs":[`...)
			for j, lp := range lps {
				if j > 0 {
					dst = append(dst, ',')
				}
				dst = append(dst, '[')
				dst = strconv.AppendFloat(dst, lp, 'g', -1, 64)
				dst = append(dst, ",null,null]"...)
			}
			dst = append(dst, "]}"...)
		}
		dst = append(dst, '}')
	}
	if len(results) > 1 {
		dst = append(dst, ']')
	}
	return dst
}

// appendKV renders KV transfer parameters in vLLM's snake_case JSON (empty strings and zero port as
// null, as vLLM sends them before the transfer is set up).
func appendKV(dst []byte, kv *workerv1.KVTransferParams) []byte {
	dst = append(dst, `{"do_remote_decode":`...)
	dst = strconv.AppendBool(dst, kv.GetDoRemoteDecode())
	dst = append(dst, `,"do_remote_prefill":`...)
	dst = strconv.AppendBool(dst, kv.GetDoRemotePrefill())
	dst = append(dst, `,"remote_engine_id":`...)
	dst = appendStringOrNull(dst, kv.GetRemoteEngineId())
	dst = append(dst, `,"remote_block_ids":`...)
	if kv.RemoteBlockIds == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i, id := range kv.GetRemoteBlockIds() {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendUint(dst, uint64(id), 10)
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `,"remote_host":`...)
	dst = appendStringOrNull(dst, kv.GetRemoteHost())
	dst = append(dst, `,"remote_port":`...)
	if kv.GetRemotePort() == 0 {
		dst = append(dst, "null"...)
	} else {
		dst = strconv.AppendUint(dst, uint64(kv.GetRemotePort()), 10)
	}
	return append(dst, '}')
}

func appendStringOrNull(dst []byte, s string) []byte {
	if s == "" {
		return append(dst, "null"...)
	}
	return jsonx.AppendString(dst, s)
}

// appendErrorBody renders an OpenAI-shaped error object.
func appendErrorBody(dst []byte, message, typ, code string) []byte {
	dst = append(dst, `{"error":{"message":`...)
	dst = jsonx.AppendString(dst, message)
	dst = append(dst, `,"type":`...)
	dst = jsonx.AppendString(dst, typ)
	dst = append(dst, `,"param":null,"code":`...)
	dst = jsonx.AppendString(dst, code)
	return append(dst, "}}"...)
}

// appendChunkEnd closes a streamed chunk's only choice and the chunk: finish_reason (null until the last
// chunk), and usage null when the client asked for a separate usage chunk.
func appendChunkEnd(dst []byte, final bool, finishReason string, includeUsage bool) []byte {
	dst = append(dst, `,"finish_reason":`...)
	if final {
		dst = jsonx.AppendString(dst, finishReason)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `}]`...)
	if includeUsage {
		dst = append(dst, `,"usage":null`...)
	}
	return append(dst, '}')
}
