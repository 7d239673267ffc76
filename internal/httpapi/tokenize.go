package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/tokenizer"
)

// tokenizeRequest is vLLM's TokenizeRequest: TokenizeCompletionRequest (prompt) or TokenizeChatRequest
// (messages), vllm/entrypoints/serve/tokenize/protocol.py (before: vllm/entrypoints/openai/protocol.py).
type tokenizeRequest struct {
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

// tokenizeResponse is vLLM's TokenizeResponse. max_model_len is required there; the gateway knows it
// only from the model directory's config.json, and leaves it out otherwise.
type tokenizeResponse struct {
	Count       int       `json:"count"`
	MaxModelLen int       `json:"max_model_len,omitempty"`
	Tokens      []int     `json:"tokens"`
	TokenStrs   *[]string `json:"token_strs"`
}

// tokenize answers /tokenize and /v1/tokenize itself for a model it has a tokenizer for, so an
// operator sees the tokens the router sees; any other request goes to forward (an engine), as do
// requests naming their own chat_template or asking to continue the final message (the engine does
// both; the gateway renders the model's own template only).
func (h *Handler) tokenize(forward http.Handler) http.Handler {
	if h.o.Tokenizer == nil {
		return forward
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, tk, ok := h.modelTokenizer(w, r)
		if !ok {
			return
		}
		var req tokenizeRequest
		if tk != nil {
			if err := json.Unmarshal(body, &req); err != nil {
				apierror.New(http.StatusBadRequest, apierror.CodeInvalidRequest, "invalid tokenize request: "+err.Error(), err).WriteHTTP(w)
				return
			}
		}
		if tk == nil || req.ChatTemplate != nil || req.ContinueFinalMessage {
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
			forward.ServeHTTP(w, r)
			return
		}
		resp, e := tokenizeLocally(tk, &req)
		if e != nil {
			e.WriteHTTP(w)
			return
		}
		writeJSON(w, http.StatusOK, resp)
	})
}

func tokenizeLocally(tk *tokenizer.Tokenizer, req *tokenizeRequest) (*tokenizeResponse, *apierror.Error) {
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
	resp := &tokenizeResponse{Count: len(ids), MaxModelLen: tk.MaxModelLen(), Tokens: ids}
	if req.ReturnTokenStrs {
		strs := tk.TokenStrings(ids)
		resp.TokenStrs = &strs
	}
	return resp, nil
}

// detokenizeRequest and detokenizeResponse are vLLM's DetokenizeRequest and DetokenizeResponse
// (vllm/entrypoints/serve/tokenize/protocol.py); vLLM answers with tokenizer.decode(tokens), special
// tokens kept.
type detokenizeRequest struct {
	Model  string `json:"model"`
	Tokens []int  `json:"tokens"`
}

type detokenizeResponse struct {
	Prompt string `json:"prompt"`
}

// detokenize answers /detokenize and /v1/detokenize itself for a model it has a tokenizer for, as
// tokenize does; other requests go to forward (an engine). An id outside the vocabulary is a 400
// naming tokens[i] (Hugging Face would drop it and answer text nobody sent).
func (h *Handler) detokenize(forward http.Handler) http.Handler {
	if h.o.Tokenizer == nil {
		return forward
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, tk, ok := h.modelTokenizer(w, r)
		if !ok {
			return
		}
		if tk == nil {
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
			forward.ServeHTTP(w, r)
			return
		}
		var req detokenizeRequest
		if err := json.Unmarshal(body, &req); err != nil {
			apierror.InvalidRequest("tokens", "tokens must be a list of token ids: "+err.Error()).WriteHTTP(w)
			return
		}
		if req.Tokens == nil {
			apierror.InvalidRequest("tokens", "tokens is required: the token ids to turn into text").WriteHTTP(w)
			return
		}
		text, err := tk.Decode(req.Tokens, false)
		var ute *tokenizer.UnknownTokenError
		switch {
		case errors.As(err, &ute):
			apierror.InvalidRequest("tokens", fmt.Sprintf("tokens[%d]: token id %d is not in model %s's vocabulary", ute.Index, ute.ID, req.Model)).WriteHTTP(w)
			return
		case err != nil:
			apierror.New(http.StatusBadRequest, apierror.CodeInvalidRequest, err.Error(), err).WriteHTTP(w)
			return
		}
		writeJSON(w, http.StatusOK, detokenizeResponse{Prompt: text})
	})
}

// modelTokenizer reads the request body and returns it with the tokenizer of the model it names (nil
// when the gateway has none, or the body names no model it can read); ok is false when the body could
// not be read, and the error is written.
func (h *Handler) modelTokenizer(w http.ResponseWriter, r *http.Request) (body []byte, tk *tokenizer.Tokenizer, ok bool) {
	body, e := readBody(w, r, h.o.MaxPayloadSize)
	if e != nil {
		e.WriteHTTP(w)
		return nil, nil, false
	}
	var head struct {
		Model string `json:"model"`
	}
	if json.Unmarshal(body, &head) == nil {
		tk = h.o.Tokenizer(head.Model)
	}
	return body, tk, true
}
