package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/ardanlabs/jinja"
	"github.com/sluicegw/sluice/internal/tokenizer/chattmpl"
)

// Errors of chat rendering, by class: the request is not a chat this package can render (the caller's
// fault: a 400), or the model has no template or its template failed (raise_exception included).
var (
	ErrBadChat    = errors.New("tokenizer: invalid chat")
	ErrNoTemplate = errors.New("tokenizer: the model has no chat template")
	ErrTemplate   = errors.New("tokenizer: chat template failed")
)

// Chat is a chat to render with the model's template, in the OpenAI/vLLM request's JSON.
type Chat struct {
	Messages            json.RawMessage // a JSON array of messages
	Tools               json.RawMessage // a JSON array, or empty
	AddGenerationPrompt bool
	TemplateKwargs      json.RawMessage // chat_template_kwargs: a JSON object, or empty
}

// RenderChat renders chat with the model's chat template as vLLM does before tokenizing: messages are
// first parsed as vLLM's chat_utils does for a "string" content-format template (content parts joined by
// newlines, assistant tool-call arguments parsed from their JSON string), then the template runs with
// messages, tools, add_generation_prompt, the special tokens and chat_template_kwargs, as transformers'
// apply_chat_template passes them.
func (t *Tokenizer) RenderChat(chat Chat) (string, error) {
	if t.template == nil {
		return "", ErrNoTemplate
	}
	if t.fast != nil {
		if out, ok := t.renderPlain(chat); ok {
			return out, nil
		}
	}
	data, conv, tools, err := t.chatData(chat)
	if err != nil {
		return "", err
	}
	if t.fast != nil {
		if off, ok := fastKwargs(data, len(t.special)); ok && !tools.IsTruthy() {
			if ms, ok := plainMessages(conv); ok {
				var b strings.Builder
				if t.fast(&b, ms, chat.AddGenerationPrompt, off) {
					return b.String(), nil
				}
			}
		}
	}
	setChatVars(data, conv, tools, chat)
	if t.compiled != nil {
		// Any failure, raise_exception included, goes to the interpreter: the template's errors are
		// then reported in the interpreter's words, and what the compiled form leaves alone is rendered.
		if out, err := t.compiled.Render(data); err == nil {
			return out, nil
		}
	}
	out, err := t.template.RenderValues(interpreterVars(data))
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrTemplate, err)
	}
	return out, nil
}

// chatData is what the template reads of chat, but for the messages, tools and add_generation_prompt
// (setChatVars), which the fast paths check the rest without: the special tokens and the kwargs.
func (t *Tokenizer) chatData(chat Chat) (map[string]chattmpl.Value, []chattmpl.Value, chattmpl.Value, error) {
	msgs, err := parseValue(chat.Messages)
	if err != nil {
		return nil, nil, chattmpl.Value{}, fmt.Errorf("%w: messages: %w", ErrBadChat, err)
	}
	if !msgs.IsList() || len(msgs.Items()) == 0 {
		return nil, nil, chattmpl.Value{}, fmt.Errorf("%w: messages must be a non-empty array", ErrBadChat)
	}
	conv := make([]chattmpl.Value, 0, len(msgs.Items()))
	for i, m := range msgs.Items() {
		cm, err := conversationMessage(m)
		if err != nil {
			return nil, nil, chattmpl.Value{}, fmt.Errorf("%w: messages[%d]: %w", ErrBadChat, i, err)
		}
		conv = append(conv, cm)
	}
	data := make(map[string]chattmpl.Value, 8)
	for k, v := range t.special {
		data[k] = chattmpl.NewString(v)
	}
	if len(chat.TemplateKwargs) > 0 && !isNull(chat.TemplateKwargs) {
		kw, err := parseValue(chat.TemplateKwargs)
		if err != nil || !kw.IsDict() {
			return nil, nil, chattmpl.Value{}, fmt.Errorf("%w: chat_template_kwargs must be an object", ErrBadChat)
		}
		for _, k := range kw.AsDict().Keys() {
			data[k], _ = kw.AsDict().Get(k)
		}
	}
	tools := chattmpl.None()
	if len(chat.Tools) > 0 && !isNull(chat.Tools) {
		if tools, err = parseValue(chat.Tools); err != nil || !tools.IsList() {
			return nil, nil, chattmpl.Value{}, fmt.Errorf("%w: tools must be an array", ErrBadChat)
		}
	}
	return data, conv, tools, nil
}

func setChatVars(data map[string]chattmpl.Value, conv []chattmpl.Value, tools chattmpl.Value, chat Chat) {
	data["messages"] = chattmpl.NewList(conv)
	data["tools"] = tools
	data["add_generation_prompt"] = chattmpl.NewBool(chat.AddGenerationPrompt)
}

// interpreterVars is data in the interpreter's values.
func interpreterVars(data map[string]chattmpl.Value) map[string]jinja.Value {
	out := make(map[string]jinja.Value, len(data))
	for k, v := range data {
		out[k] = interpreterValue(v)
	}
	return out
}

func interpreterValue(v chattmpl.Value) jinja.Value {
	switch v.Kind() {
	case chattmpl.KindNone:
		return jinja.None()
	case chattmpl.KindBool:
		return jinja.NewBool(v.AsBool())
	case chattmpl.KindInt:
		return jinja.NewInt(v.AsInt())
	case chattmpl.KindFloat:
		return jinja.NewFloat(v.AsFloat())
	case chattmpl.KindString:
		return jinja.NewString(v.AsString())
	case chattmpl.KindList:
		items := make([]jinja.Value, len(v.Items()))
		for i, it := range v.Items() {
			items[i] = interpreterValue(it)
		}
		return jinja.NewList(items)
	case chattmpl.KindDict:
		out := jinja.NewDict()
		for i, k := range v.AsDict().Keys() {
			out.AsDict().Set(k, interpreterValue(v.AsDict().Value(i)))
		}
		return out
	}
	return jinja.Undefined()
}

// fastKwargs reports whether the template's variables are only those the fast path knows (the
// special tokens, and chat_template_kwargs' enable_thinking as a bool), and whether thinking is off
// (the template's `enable_thinking is false`).
func fastKwargs(data map[string]chattmpl.Value, special int) (thinkingOff, ok bool) {
	v, has := data["enable_thinking"]
	n := special
	if has {
		if !v.IsBool() {
			return false, false
		}
		n++
	}
	return has && !v.AsBool(), len(data) == n
}

// EncodeChat renders chat and tokenizes the result without adding special tokens (vLLM's default for
// chat requests: the template wrote them).
func (t *Tokenizer) EncodeChat(chat Chat) ([]int, error) {
	s, err := t.RenderChat(chat)
	if err != nil {
		return nil, err
	}
	return t.Encode(s), nil
}

// conversationMessage builds the message vLLM hands the template (vllm/entrypoints/chat_utils.py
// _parse_chat_message_content and _postprocess_messages): role, content as one string, and per role
// tool_calls (arguments as objects), reasoning, tool_call_id and name. Other fields are dropped, as
// there.
func conversationMessage(m chattmpl.Value) (chattmpl.Value, error) {
	if !m.IsDict() {
		return chattmpl.Value{}, errors.New("a message must be an object")
	}
	in := m.AsDict()
	role, ok := in.Get("role")
	if !ok || !role.IsString() {
		return chattmpl.Value{}, errors.New("role must be a string")
	}
	content, err := contentString(in)
	if err != nil {
		return chattmpl.Value{}, err
	}
	if c, _ := in.Get("content"); c.IsString() && in.Len() == 2 && (role.AsString() != "assistant" || in.Keys()[0] == "role") {
		// Already what vLLM builds (the common case: no copy); an assistant's in vLLM's key order too.
		return m, nil
	}
	out := chattmpl.NewDict()
	d := out.AsDict()
	d.Set("role", role)
	d.Set("content", chattmpl.NewString(content))
	switch role.AsString() {
	case "assistant":
		if tc, ok := in.Get("tool_calls"); ok && !tc.IsNone() {
			if !tc.IsList() {
				return chattmpl.Value{}, errors.New("tool_calls must be an array")
			}
			if len(tc.Items()) > 0 {
				calls, err := toolCalls(tc.Items())
				if err != nil {
					return chattmpl.Value{}, err
				}
				d.Set("tool_calls", chattmpl.NewList(calls))
			}
		}
		r, ok := in.Get("reasoning")
		if !ok || !r.IsTruthy() {
			r, ok = in.Get("reasoning_content")
		}
		if ok && !r.IsNone() {
			d.Set("reasoning", r)
			d.Set("reasoning_content", r)
		}
	case "tool":
		if id, ok := in.Get("tool_call_id"); ok {
			d.Set("tool_call_id", id)
		}
	}
	if name, ok := in.Get("name"); ok && name.IsString() {
		d.Set("name", name)
	}
	return out, nil
}

// contentString is vLLM's "string" content format: a string as is, null as "", text parts joined by "\n".
func contentString(in *chattmpl.Dict) (string, error) {
	c, ok := in.Get("content")
	switch {
	case !ok || c.IsNone():
		return "", nil
	case c.IsString():
		return c.AsString(), nil
	case !c.IsList():
		return "", errors.New("content must be a string, null or an array of parts")
	}
	var buf bytes.Buffer
	for i, p := range c.Items() {
		text, err := partText(p)
		if err != nil {
			return "", fmt.Errorf("content[%d]: %w", i, err)
		}
		if i > 0 {
			buf.WriteByte('\n')
		}
		buf.WriteString(text)
	}
	return buf.String(), nil
}

func partText(p chattmpl.Value) (string, error) {
	if p.IsString() {
		return p.AsString(), nil
	}
	if !p.IsDict() {
		return "", errors.New("a content part must be an object")
	}
	tv, _ := p.AsDict().Get("type")
	var typ string
	if tv.IsString() {
		typ = tv.AsString()
	}
	switch typ {
	case "text", "input_text", "output_text", "refusal":
		key := "text"
		if typ == "refusal" {
			key = "refusal"
		}
		if s, ok := p.AsDict().Get(key); ok && s.IsString() {
			return s.AsString(), nil
		}
		return "", fmt.Errorf("a %s part needs a string %s", typ, key)
	}
	return "", fmt.Errorf("content part type %q is not text; the gateway's tokenizer renders text only", typ)
}

// toolCalls copies tool calls with each function's arguments parsed from JSON (empty or absent: {}).
func toolCalls(items []chattmpl.Value) ([]chattmpl.Value, error) {
	out := make([]chattmpl.Value, 0, len(items))
	for i, it := range items {
		if !it.IsDict() {
			return nil, fmt.Errorf("tool_calls[%d] must be an object", i)
		}
		call := chattmpl.NewDict()
		for _, k := range it.AsDict().Keys() {
			v, _ := it.AsDict().Get(k)
			if k == "function" && v.IsDict() {
				fn := chattmpl.NewDict()
				for _, fk := range v.AsDict().Keys() {
					fv, _ := v.AsDict().Get(fk)
					fn.AsDict().Set(fk, fv)
				}
				args, _ := fn.AsDict().Get("arguments")
				switch {
				case !args.IsTruthy():
					fn.AsDict().Set("arguments", chattmpl.NewDict())
				case args.IsString():
					a := args.AsString() // strings without escapes slice a itself: one copy, for the scanner
					parsed, err := parseJSON([]byte(a), a)
					if err != nil {
						return nil, fmt.Errorf("tool_calls[%d].function.arguments is not JSON: %w", i, err)
					}
					fn.AsDict().Set("arguments", parsed)
				}
				v = fn
			}
			call.AsDict().Set(k, v)
		}
		out = append(out, call)
	}
	return out, nil
}
