package dispatch

import (
	"bytes"
	"encoding/json"
	"math"

	"github.com/sluicegw/sluice/internal/backend/body"
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

// chatFields are the request fields that decide a chat's rendering.
type chatFields struct {
	Messages             json.RawMessage `json:"messages"`
	Tools                json.RawMessage `json:"tools"`
	ChatTemplateKwargs   json.RawMessage `json:"chat_template_kwargs"`
	AddGenerationPrompt  *bool           `json:"add_generation_prompt"`
	ContinueFinalMessage bool            `json:"continue_final_message"`
	ChatTemplate         json.RawMessage `json:"chat_template"`
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
		var f chatFields
		if json.Unmarshal(br.Body, &f) != nil || f.ContinueFinalMessage || !isNullOrEmpty(f.ChatTemplate) {
			return nil, ""
		}
		gen := f.AddGenerationPrompt == nil || *f.AddGenerationPrompt
		text, err := tk.RenderChat(tokenizer.Chat{Messages: f.Messages, Tools: f.Tools,
			AddGenerationPrompt: gen, TemplateKwargs: f.ChatTemplateKwargs})
		if err != nil {
			return nil, ""
		}
		return toUint32(tk.Encode(text)), text
	case body.RouteCompletions, body.RouteGenerate:
		if br.Text == "" {
			return nil, ""
		}
		// vLLM's completions and SGLang's /generate tokenize a text prompt with add_special_tokens
		// (Llama 3's <|begin_of_text|>), so the ids the router matches must carry it too.
		return toUint32(tk.EncodeSpecial(br.Text)), br.Text
	}
	return nil, ""
}

// tokenArray reads the body's field as one prompt of token ids (an array of integers), or nil.
func tokenArray(in []byte, field string) []uint32 {
	var m map[string]json.RawMessage
	if json.Unmarshal(in, &m) != nil {
		return nil
	}
	raw := bytes.TrimSpace(m[field])
	if len(raw) == 0 || raw[0] != '[' {
		return nil
	}
	var ids []int64
	if json.Unmarshal(raw, &ids) != nil || len(ids) == 0 {
		return nil // a string array, a batch of arrays, or not numbers
	}
	out := make([]uint32, len(ids))
	for i, id := range ids {
		if id < 0 || id > math.MaxUint32 {
			return nil
		}
		out[i] = uint32(id)
	}
	return out
}

func toUint32(ids []int) []uint32 {
	out := make([]uint32, len(ids))
	for i, id := range ids {
		out[i] = uint32(id)
	}
	return out
}

func isNullOrEmpty(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}
