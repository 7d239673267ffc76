package dispatch

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/jsonscan"
	"github.com/sluicegw/sluice/internal/worker"
)

// How an OpenAI chat stream migrates in HTTP mode, on vLLM. The gateway asks the engine for
// return_token_ids (vLLM's serving_chat.py then puts the rendered prompt's ids beside the first
// chunk's choices, prompt_token_ids, and each choice's new ids in token_ids), so it holds the
// engine's own prompt + generated ids without rendering or tokenizing anything. A chat cannot be
// given token ids, so the continuation is a /v1/completions whose prompt is those ids, with the
// token budget reduced and the chat's sampling parameters; its chunks are rewritten as chat chunks
// (text as delta.content) with the first stream's id, created and model, and usage counting the
// request's prompt once.
//
// A completion has none of the chat's parsers, so a stream migrates only where the rest of the
// answer is plain content whatever the engine's parsers are: no tools, and content already streamed
// with no reasoning or tool-call delta before it (an engine's reasoning parser streams content only
// once the reasoning has ended). A stream that broke during the reasoning, or before any content,
// ends as before. SGLang's chat gives no token ids: its chat streams do not migrate over HTTP.

// chatMigration is a migratable vLLM chat stream.
type chatMigration struct {
	raw       []byte                     // the client's body, read when a continuation is made (load)
	askedIDs  bool                       // the client asked for return_token_ids: they stay in its chunks
	loaded    bool                       // load read what follows
	body      map[string]json.RawMessage // the client's body, for the continuations'
	maxTokens int                        // 0: none sent, the context's rest, which a continuation keeps
	minTokens int

	prompt          []uint32 // the prompt's ids as the engine's first chunk gave them
	ids             []uint32 // the generated ids the client has
	base            int      // len(ids) when the continuation being read started
	id, created     json.RawMessage
	model           json.RawMessage
	content, parsed bool     // a content delta came; a reasoning or tool-call delta came
	cont            bool     // the frames read are a continuation's
	ended           bool     // a chunk finished the generation, or an error chunk came
	cut             [][2]int // scanChatChunk's, reused
}

// chatOptsNotCarried are the chat options whose state or output a completion cannot carry: tool
// calls (parsed by the engine), guided decoding, logprobs, and the last message echoed.
var chatOptsNotCarried = []string{"tools", "functions", "response_format", "structured_outputs", "guided_json",
	"guided_regex", "guided_choice", "guided_grammar", "guided_decoding_backend", "logprobs", "top_logprobs",
	"prompt_logprobs", "echo"}

// chatOnlyMembers are the chat request's members a completion does not take: what made the prompt
// (the engine's ids replace it) and the chat-only switches.
var chatOnlyMembers = []string{"messages", "tool_choice", "parallel_tool_calls", "chat_template", "chat_template_kwargs",
	"add_generation_prompt", "continue_final_message", "documents", "mm_processor_kwargs", "max_completion_tokens",
	"reasoning_effort", "include_reasoning", "return_prompt_text"}

// checkChatMigration says whether a chat body may migrate, reading its top-level members only: none
// of chatOptsNotCarried is on (an empty tools list is off).
func checkChatMigration(b []byte) (*chatMigration, bool) {
	cm := &chatMigration{raw: b}
	it := jsonscan.NewObjIter(b, 0)
	for {
		m, more := it.Next()
		if !more {
			break
		}
		if m.KeyIs(b, "return_token_ids") {
			cm.askedIDs, _ = jsonscan.ParseBool(m.Value(b))
			continue
		}
		for _, k := range chatOptsNotCarried {
			if m.KeyIs(b, k) && !isFalsy(m.Value(b)) && !isPlainText(k, m.Value(b)) {
				return nil, false
			}
		}
	}
	return cm, it.Err == nil
}

// isPlainText is a value of key that asks for nothing: an empty tools list, a text response_format.
func isPlainText(key string, v []byte) bool {
	switch key {
	case "tools", "functions":
		return len(bytes.TrimSpace(bytes.Trim(bytes.TrimSpace(v), "[]"))) == 0
	case "response_format":
		t, ok := jsonscan.FindMember(v, 0, "type")
		return ok && string(t.Value(v)) == `"text"`
	}
	return false
}

// engineBody is the body sent to the engine: the client's, asking for the token ids.
func (cm *chatMigration) engineBody() ([]byte, error) {
	if cm.askedIDs {
		return cm.raw, nil
	}
	return body.SetMember(cm.raw, "return_token_ids", []byte("true"))
}

// load reads what a continuation needs from the client's body: its members and token budget
// (max_completion_tokens over the deprecated max_tokens, as vLLM reads them).
func (cm *chatMigration) load() bool {
	if cm.loaded {
		return true
	}
	cm.body, cm.maxTokens, cm.minTokens = nil, 0, 0
	if json.Unmarshal(cm.raw, &cm.body) != nil {
		return false
	}
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		if v, ok := cm.body[k]; ok && string(v) != "null" && (json.Unmarshal(v, &cm.maxTokens) != nil || cm.maxTokens <= 0) {
			return false
		}
	}
	if v, ok := cm.body["min_tokens"]; ok && string(v) != "null" && json.Unmarshal(v, &cm.minTokens) != nil {
		return false
	}
	cm.loaded = true
	return true
}

func (cm *chatMigration) serves(p worker.Protocol) bool { return p == worker.ProtocolVLLM }

func (cm *chatMigration) finished() bool { return cm.ended }

func (cm *chatMigration) generated() int { return len(cm.ids) }

func (cm *chatMigration) movable() bool { return cm.content && !cm.parsed && len(cm.prompt) > 0 }

// continuationRoute: a chat goes on as a completion of its ids.
func (cm *chatMigration) continuationRoute() body.Route { return body.RouteCompletions }

// continuation is the body of the completion that goes on after the ids the client has; false when
// the rest of the answer might not be plain content, or the budget is spent.
func (cm *chatMigration) continuation() ([]uint32, []byte, bool) {
	if !cm.content || cm.parsed || len(cm.prompt) == 0 || !cm.load() {
		return nil, nil, false
	}
	produced := len(cm.ids)
	if cm.maxTokens > 0 && produced >= cm.maxTokens {
		return nil, nil, false
	}
	ids := prefixed(cm.prompt, cm.ids)
	b := make(map[string]json.RawMessage, len(cm.body)+1)
	for k, v := range cm.body {
		b[k] = v
	}
	for _, k := range chatOnlyMembers {
		delete(b, k)
	}
	var err error
	if b["prompt"], err = json.Marshal(ids); err != nil {
		return nil, nil, false
	}
	// Without a budget a chat runs to the context's end (vLLM's get_max_tokens with max_tokens None);
	// a completion's max_tokens has a default of its own, so the continuation says null.
	b["max_tokens"] = json.RawMessage("null")
	if cm.maxTokens > 0 {
		b["max_tokens"] = json.RawMessage(strconv.Itoa(cm.maxTokens - produced))
	}
	if cm.minTokens > 0 {
		b["min_tokens"] = json.RawMessage(strconv.Itoa(max(cm.minTokens-produced, 0)))
	}
	b["return_token_ids"] = json.RawMessage("true")
	out, err := json.Marshal(b)
	if err != nil {
		return nil, nil, false
	}
	cm.base, cm.cont = produced, true
	return ids, out, true
}

// frame takes one chunk: the first stream's are scanned in place (scanChatChunk), their ids leaving
// them when the client did not ask; a continuation's completion chunks are rewritten as chat chunks.
func (cm *chatMigration) frame(dst, payload []byte) ([]byte, bool) {
	if cm.cont {
		out, ended := cm.continued(payload)
		cm.ended = cm.ended || ended
		if out == nil {
			return append(dst, payload...), ended
		}
		return append(dst, out...), ended
	}
	sc, ok := cm.scan(payload)
	if !ok {
		cm.ended = true
		return append(dst, payload...), true // an error chunk or something else: the client gets it, and the stream is over
	}
	cm.ended = cm.ended || sc.ended
	if cm.id == nil {
		for _, k := range []string{"id", "created", "model"} {
			if m, ok := jsonscan.FindMember(payload, 0, k); ok {
				v := append(json.RawMessage(nil), m.Value(payload)...)
				switch k {
				case "id":
					cm.id = v
				case "created":
					cm.created = v
				default:
					cm.model = v
				}
			}
		}
	}
	if cm.askedIDs {
		return append(dst, payload...), sc.ended // as the engine sent it
	}
	return appendCut(dst, payload, cm.cut), sc.ended
}

// chatChunk is what scan found in a chunk besides the generation's state.
type chatChunk struct {
	ended bool // a choice has a finish_reason
}

// scan reads a chat chunk without decoding it: the prompt's ids beside the choices, each choice's
// token_ids and finish_reason, and whether its delta has content or a parsed part; the id members'
// spans go to cm.cut. False when the chunk has no choices array (an error chunk).
func (cm *chatMigration) scan(payload []byte) (chatChunk, bool) {
	var out chatChunk
	cm.cut = cm.cut[:0]
	found := false
	prevEnd := -1
	top := jsonscan.NewObjIter(payload, 0)
	for {
		m, more := top.NextKey()
		if !more {
			break
		}
		var err error
		switch {
		case m.KeyIs(payload, "choices"):
			found = true
			m.ValEnd, err = cm.scanChoices(payload, m.ValStart, &out)
		default:
			m.ValEnd, err = jsonscan.SkipValueDepth(payload, m.ValStart, 1)
		}
		if err != nil {
			return out, false
		}
		if m.KeyIs(payload, "prompt_token_ids") {
			if cm.prompt == nil && !jsonscan.IsNull(m.Value(payload)) {
				cm.prompt = appendIDs(nil, m.Value(payload))
			}
			cm.cut = append(cm.cut, memberSpan(payload, m, prevEnd))
			if prevEnd >= 0 {
				prevEnd = m.ValEnd
			}
		} else {
			prevEnd = m.ValEnd
		}
		top.ValueDone(m.ValEnd)
	}
	return out, found && top.Err == nil
}

// scanChoices reads the choices array at b[i] and returns where it ends.
func (cm *chatMigration) scanChoices(b []byte, i int, out *chatChunk) (int, error) {
	arr := jsonscan.NewArrIter(b, i)
	for {
		start, more := arr.NextStart()
		if !more {
			break
		}
		it := jsonscan.NewObjIter(b, start)
		prevEnd := -1
		for {
			m, more := it.Next()
			if !more {
				break
			}
			cut := false
			switch {
			case m.KeyIs(b, "token_ids"):
				cm.ids, cut = appendIDs(cm.ids, m.Value(b)), true
			case m.KeyIs(b, "finish_reason"):
				out.ended = out.ended || !jsonscan.IsNull(m.Value(b))
			case m.KeyIs(b, "delta"):
				cm.readDelta(m.Value(b))
			}
			if cut {
				cm.cut = append(cm.cut, memberSpan(b, m, prevEnd))
			}
			if !cut || prevEnd >= 0 {
				prevEnd = m.ValEnd
			}
		}
		if it.Err != nil {
			return 0, it.Err
		}
		arr.ValueDone(it.Close + 1)
	}
	if arr.Err != nil {
		return 0, arr.Err
	}
	return arr.Close + 1, nil
}

// readDelta notes whether a delta streams content, or a part the engine's parsers made (reasoning,
// tool calls); content after such a part does not make the stream plain again.
func (cm *chatMigration) readDelta(d []byte) {
	it := jsonscan.NewObjIter(d, 0)
	for {
		m, more := it.Next()
		if !more {
			return
		}
		v := m.Value(d)
		switch {
		case m.KeyIs(d, "content"):
			cm.content = cm.content || (!jsonscan.IsNull(v) && string(v) != `""`)
		case m.KeyIs(d, "reasoning_content"), m.KeyIs(d, "reasoning"), m.KeyIs(d, "tool_calls"), m.KeyIs(d, "function_call"):
			if !jsonscan.IsNull(v) && string(v) != `""` && string(v) != "[]" {
				cm.parsed = true
			}
		}
	}
}

// continued rewrites a continuation's completion chunk as a chat chunk of the request.
func (cm *chatMigration) continued(payload []byte) ([]byte, bool) {
	var c map[string]json.RawMessage
	var choices []map[string]json.RawMessage
	if json.Unmarshal(payload, &c) != nil || json.Unmarshal(c["choices"], &choices) != nil {
		return nil, true // an error chunk or something else: the client gets it, and the stream is over
	}
	ended := false
	out := make([]map[string]json.RawMessage, 0, len(choices))
	for _, ch := range choices {
		cm.ids = appendIDs(cm.ids, ch["token_ids"])
		fr, ok := ch["finish_reason"]
		if !ok {
			fr = json.RawMessage("null")
		}
		ended = ended || string(fr) != "null"
		delta := json.RawMessage("{}")
		if t := ch["text"]; len(t) > 0 && string(t) != `""` && string(t) != "null" {
			delta = append(append(json.RawMessage(`{"content":`), t...), '}')
		}
		cc := map[string]json.RawMessage{"index": ch["index"], "delta": delta, "logprobs": json.RawMessage("null"), "finish_reason": fr}
		if sr, ok := ch["stop_reason"]; ok {
			cc["stop_reason"] = sr
		}
		if cm.askedIDs {
			cc["token_ids"] = ch["token_ids"]
		}
		out = append(out, cc)
	}
	delete(c, "prompt_token_ids") // the continuation's prompt is not the request's
	delete(c, "prompt_text")
	c["id"], c["created"], c["object"] = cm.id, cm.created, json.RawMessage(`"chat.completion.chunk"`)
	if cm.model != nil {
		c["model"] = cm.model
	}
	if u, ok := c["usage"]; ok {
		c["usage"] = rewriteUsage(u, len(cm.prompt), cm.base)
	}
	var err error
	if c["choices"], err = json.Marshal(out); err != nil {
		return nil, ended
	}
	b, err := json.Marshal(c)
	if err != nil {
		return nil, ended
	}
	return b, ended
}
