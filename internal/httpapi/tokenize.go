package httpapi

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"

	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/tokenizeapi"
	"github.com/sluicegw/sluice/internal/tokenizer"
)

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
		var req tokenizeapi.TokenizeRequest
		if tk != nil {
			if err := json.Unmarshal(body, &req); err != nil {
				apierror.New(http.StatusBadRequest, apierror.CodeInvalidRequest, "invalid tokenize request: "+err.Error(), err).WriteHTTP(w)
				return
			}
		}
		if tk == nil || !req.Local() {
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
			forward.ServeHTTP(w, r)
			return
		}
		resp, e := tokenizeapi.Tokenize(tk, &req)
		if e != nil {
			e.WriteHTTP(w)
			return
		}
		writeJSON(w, http.StatusOK, resp)
	})
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
		var req tokenizeapi.DetokenizeRequest
		if err := json.Unmarshal(body, &req); err != nil {
			apierror.InvalidRequest("tokens", "tokens must be a list of token ids: "+err.Error()).WriteHTTP(w)
			return
		}
		resp, e := tokenizeapi.Detokenize(tk, &req)
		if e != nil {
			e.WriteHTTP(w)
			return
		}
		writeJSON(w, http.StatusOK, resp)
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
