package dispatch

import (
	"bytes"
	"math"

	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/jsonscan"
	"github.com/sluicegw/sluice/internal/placement"
	"github.com/sluicegw/sluice/internal/tokenizer"
)

// The prompt's exact token ids, for kv_aware (placement.Request.TokenIDs) and admission's budget.
//
// Only when a policy that reads them is in use: tokenizing a 2k-token chat costs a few hundred µs of
// CPU, which no other policy repays. A prompt given as token ids (a completions token array,
// /generate input_ids) is used as it is; a text prompt or a chat is tokenized only when
// Deps.Tokenizer has a tokenizer for the request's model, a chat as the engine renders it (the
// model's own chat template, add_generation_prompt as the request says, true by default). Whatever
// cannot be tokenized exactly here (a batch, a chat naming its own template or continuing the final
// message, a template error) gets no token ids and is routed by its text (kv_aware's cache_aware
// fallback): the engine, not the router, reports a bad chat to the client.

// wantsTokens reports whether a policy in use reads token ids.
func (x *Dispatcher) wantsTokens() bool {
	return x.d.Policies != nil && x.d.Policies.Uses(placement.PolicyKVAware)
}

// chatFields are the request fields that decide a chat's rendering; raw values are the body's bytes.
type chatFields struct {
	Messages             []byte
	Tools                []byte
	ChatTemplateKwargs   []byte
	AddGenerationPrompt  *bool
	ContinueFinalMessage bool
	ChatTemplate         []byte
}

// readChatFields reads them with the gateway's one JSON reader (encoding/json's reflection was most of
// this function's CPU in gRPC mode); false when the body is not an object or one of them is mistyped.
// The last of a repeated key wins, as in encoding/json.
func readChatFields(b []byte) (f chatFields, ok bool) {
	it := jsonscan.NewObjIter(b, 0)
	for {
		m, more := it.Next()
		if !more {
			break
		}
		v := m.Value(b)
		switch {
		case m.KeyIs(b, "messages"):
			f.Messages = v
		case m.KeyIs(b, "tools"):
			f.Tools = v
		case m.KeyIs(b, "chat_template_kwargs"):
			f.ChatTemplateKwargs = v
		case m.KeyIs(b, "chat_template"):
			f.ChatTemplate = v
		case m.KeyIs(b, "add_generation_prompt"):
			if jsonscan.IsNull(v) {
				f.AddGenerationPrompt = nil
				continue
			}
			g, isBool := jsonscan.ParseBool(v)
			if !isBool {
				return f, false
			}
			f.AddGenerationPrompt = &g
		case m.KeyIs(b, "continue_final_message"):
			if c, isBool := jsonscan.ParseBool(v); isBool {
				f.ContinueFinalMessage = c
			} else if !jsonscan.IsNull(v) {
				return f, false
			}
		}
	}
	return f, it.Err == nil
}

// promptTokens returns the request's prompt as token ids by tk (nil: token id prompts only), or nil
// when they are not known exactly, and the text they encode (the rendered chat, the text prompt; ""
// for a prompt given as ids).
func promptTokens(br *body.Request, tk *tokenizer.Tokenizer) ([]uint32, string) {
	if br.BatchSize > 0 {
		return nil, ""
	}
	if br.PromptTokenIDs > 0 {
		switch br.Route {
		case body.RouteCompletions:
			return tokenArray(br.Body, "prompt"), ""
		case body.RouteGenerate:
			return tokenArray(br.Body, "input_ids"), ""
		}
		return nil, ""
	}
	if tk == nil {
		return nil, ""
	}
	switch br.Route {
	case body.RouteChat:
		f, ok := readChatFields(br.Body)
		if !ok || f.ContinueFinalMessage || !isNullOrEmpty(f.ChatTemplate) {
			return nil, ""
		}
		gen := f.AddGenerationPrompt == nil || *f.AddGenerationPrompt
		text, err := tk.RenderChat(tokenizer.Chat{Messages: f.Messages, Tools: f.Tools,
			AddGenerationPrompt: gen, TemplateKwargs: f.ChatTemplateKwargs})
		if err != nil {
			return nil, ""
		}
		return tk.EncodeUint32(text), text
	case body.RouteCompletions, body.RouteGenerate:
		if br.Text == "" {
			return nil, ""
		}
		// vLLM's completions and SGLang's /generate tokenize a text prompt with add_special_tokens
		// (Llama 3's <|begin_of_text|>), so the ids the router matches must carry it too.
		return tk.EncodeSpecialUint32(br.Text), br.Text
	}
	return nil, ""
}

// tokenArray reads the body's field as one prompt of token ids (an array of integers), or nil.
func tokenArray(in []byte, field string) []uint32 {
	m, ok := jsonscan.FindMember(in, 0, field)
	if !ok {
		return nil
	}
	raw := m.Value(in)
	if raw[0] != '[' {
		return nil
	}
	var out []uint32
	it := jsonscan.NewArrIter(raw, 0)
	for {
		s, e, more := it.Next()
		if !more {
			break
		}
		id, isInt := jsonscan.ParseInt(raw[s:e])
		if !isInt || id < 0 || id > math.MaxUint32 {
			return nil // a string array, a batch of arrays, or not token ids
		}
		out = append(out, uint32(id))
	}
	if it.Err != nil || len(out) == 0 {
		return nil
	}
	return out
}

func isNullOrEmpty(raw []byte) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}
