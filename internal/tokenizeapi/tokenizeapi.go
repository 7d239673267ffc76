// Package tokenizeapi answers vLLM's tokenize and detokenize requests with the gateway's own tokenizer,
// so REST (internal/httpapi) and the typed RPCs (services/openai) give the same answers and the same
// errors. Shapes: vllm/entrypoints/serve/tokenize/protocol.py (before: vllm/entrypoints/openai/protocol.py).
package tokenizeapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/tokenizer"
)

// TokenizeRequest is vLLM's TokenizeRequest: TokenizeCompletionRequest (prompt) or TokenizeChatRequest
// (messages).
type TokenizeRequest struct {
	Model                string          `json:"model"`
	Prompt               *string         `json:"prompt"`
	Messages             json.RawMessage `json:"messages"`
	AddGenerationPrompt  *bool           `json:"add_generation_prompt"` // default true
	ContinueFinalMessage bool            `json:"continue_final_message"`
	ReturnTokenStrs      bool            `json:"return_token_strs"`
	ChatTemplate         *string         `json:"chat_template"`
	ChatTemplateKwargs   json.RawMessage `json:"chat_template_kwargs"`
	Tools                json.RawMessage `json:"tools"`
	// AddSpecialTokens defaults to true for a prompt (Llama 3's <|begin_of_text|> is added) and false
	// for a chat, whose template writes its own (vLLM's defaults).
	AddSpecialTokens *bool `json:"add_special_tokens"`
}

// TokenizeResponse is vLLM's TokenizeResponse. max_model_len is required there; the gateway knows it
// only from the model directory's config.json, and leaves it out otherwise.
type TokenizeResponse struct {
	Count       int       `json:"count"`
	MaxModelLen int       `json:"max_model_len,omitempty"`
	Tokens      []int     `json:"tokens"`
	TokenStrs   *[]string `json:"token_strs"`
}

// Local reports whether the gateway can answer the request itself: a request naming its own
// chat_template or asking to continue the final message goes to an engine, as the gateway renders the
// model's own template only.
func (r *TokenizeRequest) Local() bool { return r.ChatTemplate == nil && !r.ContinueFinalMessage }

// Tokenize answers a tokenize request with tk.
func Tokenize(tk *tokenizer.Tokenizer, req *TokenizeRequest) (*TokenizeResponse, *apierror.Error) {
	hasMessages := len(req.Messages) > 0 && !bytes.Equal(bytes.TrimSpace(req.Messages), []byte("null"))
	var ids []int
	switch {
	case hasMessages == (req.Prompt != nil):
		return nil, apierror.InvalidRequest("prompt", "give exactly one of prompt (a string) or messages (a chat)")
	case req.Prompt != nil && (req.AddSpecialTokens == nil || *req.AddSpecialTokens):
		ids = tk.EncodeSpecial(*req.Prompt)
	case req.Prompt != nil:
		ids = tk.Encode(*req.Prompt)
	default:
		gen := req.AddGenerationPrompt == nil || *req.AddGenerationPrompt
		var err error
		ids, err = tk.EncodeChat(tokenizer.Chat{Messages: req.Messages, Tools: req.Tools, AddGenerationPrompt: gen, TemplateKwargs: req.ChatTemplateKwargs})
		switch {
		case errors.Is(err, tokenizer.ErrNoTemplate):
			return nil, apierror.InvalidRequest("messages", "model "+req.Model+" has no chat template in its --tokenizer-path directory; send prompt instead")
		case errors.Is(err, tokenizer.ErrBadChat):
			return nil, apierror.InvalidRequest("messages", err.Error())
		case errors.Is(err, tokenizer.ErrTemplate):
			// The model's template raised on these messages (Llama 2's and Gemma's roles that must
			// alternate, raise_exception): the chat is the caller's to fix, as vLLM's 400 says.
			return nil, apierror.InvalidRequest("messages", err.Error())
		case err != nil:
			return nil, apierror.New(http.StatusBadRequest, apierror.CodeInvalidRequest, err.Error(), err)
		}
	}
	resp := &TokenizeResponse{Count: len(ids), MaxModelLen: tk.MaxModelLen(), Tokens: ids}
	if req.ReturnTokenStrs {
		strs := tk.TokenStrings(ids)
		resp.TokenStrs = &strs
	}
	return resp, nil
}

// DetokenizeRequest and DetokenizeResponse are vLLM's DetokenizeRequest and DetokenizeResponse; vLLM
// answers with tokenizer.decode(tokens), special tokens kept.
type DetokenizeRequest struct {
	Model  string `json:"model"`
	Tokens []int  `json:"tokens"`
}

type DetokenizeResponse struct {
	Prompt string `json:"prompt"`
}

// Detokenize answers a detokenize request with tk. An id outside the vocabulary is an error naming
// tokens[i] (Hugging Face would drop it and answer text nobody sent).
func Detokenize(tk *tokenizer.Tokenizer, req *DetokenizeRequest) (*DetokenizeResponse, *apierror.Error) {
	if req.Tokens == nil {
		return nil, apierror.InvalidRequest("tokens", "tokens is required: the token ids to turn into text")
	}
	text, err := tk.Decode(req.Tokens, false)
	var ute *tokenizer.UnknownTokenError
	switch {
	case errors.As(err, &ute):
		return nil, apierror.InvalidRequest("tokens", fmt.Sprintf("tokens[%d]: token id %d is not in model %s's vocabulary", ute.Index, ute.ID, req.Model))
	case err != nil:
		return nil, apierror.New(http.StatusBadRequest, apierror.CodeInvalidRequest, err.Error(), err)
	}
	return &DetokenizeResponse{Prompt: text}, nil
}
