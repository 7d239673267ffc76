package dispatch

import (
	"bytes"
	"encoding/json"

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
	idStream             // the prompt: the rendered prompt's ids as the engine's first chunk gave them
	content, parsed bool // a content delta came; a reasoning or tool-call delta came
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
// of chatOptsNotCarried is on.
func checkChatMigration(b []byte) (*chatMigration, bool) {
	s, ok := newIDStream(b, chatOptsNotCarried)
	return &chatMigration{idStream: s}, ok
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

// load reads what a continuation needs from the client's body: its members and token budget
// (max_completion_tokens over the deprecated max_tokens, as vLLM reads them).
func (cm *chatMigration) load() bool {
	if cm.loaded {
		return true
	}
	cm.maxTokens, cm.prompt = 0, cm.enginePrompt
	if !cm.loadBody() {
		return false
	}
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		if v, ok := cm.body[k]; ok && string(v) != "null" && (json.Unmarshal(v, &cm.maxTokens) != nil || cm.maxTokens <= 0) {
			return false
		}
	}
	cm.loaded = true
	return true
}

func (cm *chatMigration) serves(p worker.Protocol) bool { return p == worker.ProtocolVLLM }

func (cm *chatMigration) movable() bool { return cm.content && !cm.parsed && len(cm.enginePrompt) > 0 }

// continuationRoute: a chat goes on as a completion of its ids.
func (cm *chatMigration) continuationRoute() body.Route {
	if cm.restarted && !cm.cont {
		return body.RouteChat // started again as itself (restart)
	}
	return body.RouteCompletions
}

// continuation is the body of the completion that goes on after the ids the client has (without a
// budget a chat runs to the context's end, which max_tokens null asks of a completion); false when the
// rest of the answer might not be plain content, or the budget is spent.
//
// A chat of which nothing was generated yet (it broke before its first token) starts again elsewhere
// as the client sent it: the engine's parsers run there as they would have here.
func (cm *chatMigration) continuation() ([]uint32, []byte, bool) {
	if !cm.content && !cm.parsed && len(cm.ids) == 0 {
		return cm.restart()
	}
	if !cm.content || cm.parsed || len(cm.enginePrompt) == 0 || !cm.load() {
		return nil, nil, false
	}
	return cm.continuationBody(chatOnlyMembers)
}

// lengthFinish ends a chat whose token budget was all generated.
func (cm *chatMigration) lengthFinish(dst []byte) ([]byte, bool) {
	if len(cm.enginePrompt) == 0 || !cm.load() {
		return dst, false
	}
	return cm.idStream.lengthFinish(dst, "chat.completion.chunk", map[string]any{"delta": map[string]any{}, "stop_reason": nil})
}

// closing ends a chat that broke off after its finish.
func (cm *chatMigration) closing(dst []byte) []byte {
	cm.load()
	return cm.idStream.closing(dst, "chat.completion.chunk")
}

// frame takes one chunk: the first stream's are scanned in place, their ids leaving them when the
// client did not ask; a continuation's completion chunks are rewritten as chat chunks.
func (cm *chatMigration) frame(dst, payload []byte) ([]byte, bool) {
	return cm.idStream.frame(dst, payload, cm.readDelta, cm.continued)
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
		case m.KeyIs(d, "role"):
			cm.roleSent = true
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
