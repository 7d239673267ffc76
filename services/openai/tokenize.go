package openai

import (
	"context"
	"encoding/json"
	"errors"
	"io"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	openaiv1 "github.com/sluicegw/sluice/gen/sluice/openai/v1"
	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/tokenizeapi"
	"github.com/sluicegw/sluice/internal/tokenizer"
)

// WithTokenizers lets the service answer Tokenize and Detokenize itself for the models tokenizers has
// a tokenizer for (nil: none), as the REST surface does (internal/tokenizeapi); other requests go to
// an engine.
func (s *Service) WithTokenizers(tokenizers func(model string) *tokenizer.Tokenizer) *Service {
	s.tokenizers = tokenizers
	return s
}

func (s *Service) tokenizer(model string) *tokenizer.Tokenizer {
	if s.tokenizers == nil {
		return nil
	}
	return s.tokenizers(model)
}

// Tokenize returns the token ids of a prompt or a chat.
func (s *Service) Tokenize(ctx context.Context, req *openaiv1.TokenizeRequest) (*openaiv1.TokenizeResponse, error) {
	tk := s.tokenizer(req.GetModel())
	if tk == nil || req.ChatTemplate != nil || req.GetContinueFinalMessage() {
		return unary(ctx, s, body.RouteTokenize, req, callHeader(ctx), &openaiv1.TokenizeResponse{}, nil)
	}
	// Through the REST request's JSON, so both surfaces read a chat the same way.
	var r tokenizeapi.TokenizeRequest
	if err := readAs(req, &r); err != nil {
		return nil, err
	}
	resp, e := tokenizeapi.Tokenize(tk, &r)
	if e != nil {
		return nil, e.Connect()
	}
	out := &openaiv1.TokenizeResponse{Count: int32(resp.Count), MaxModelLen: int32(resp.MaxModelLen), Tokens: int32s(resp.Tokens)}
	if resp.TokenStrs != nil {
		out.TokenStrs = *resp.TokenStrs
	}
	return out, nil
}

// Detokenize returns the text of token ids.
func (s *Service) Detokenize(ctx context.Context, req *openaiv1.DetokenizeRequest) (*openaiv1.DetokenizeResponse, error) {
	tk := s.tokenizer(req.GetModel())
	if tk == nil {
		return s.detokenizeByEngine(ctx, req)
	}
	ids := make([]int, len(req.GetTokens()))
	for i, id := range req.GetTokens() {
		ids[i] = int(id)
	}
	resp, e := tokenizeapi.Detokenize(tk, &tokenizeapi.DetokenizeRequest{Model: req.GetModel(), Tokens: ids})
	if e != nil {
		return nil, e.Connect()
	}
	return &openaiv1.DetokenizeResponse{Prompt: resp.Prompt}, nil
}

// detokenizeByEngine asks an engine. vLLM answers {"prompt": ...}, SGLang {"text": ...}
// (python/sglang/srt/entrypoints/openai/protocol.py DetokenizeResponse): either is the prompt.
func (s *Service) detokenizeByEngine(ctx context.Context, req *openaiv1.DetokenizeRequest) (*openaiv1.DetokenizeResponse, error) {
	resp, err := s.do(ctx, body.RouteDetokenize, req, false, callHeader(ctx))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, wire(err)
	}
	var out struct {
		Prompt *string `json:"prompt"`
		Text   *string `json:"text"`
	}
	if err := json.Unmarshal(b, &out); err != nil || out.Prompt == nil && out.Text == nil {
		return nil, connect.NewError(connect.CodeInternal, errors.New("engine returned an unreadable detokenize response"))
	}
	if out.Prompt == nil {
		out.Prompt = out.Text
	}
	return &openaiv1.DetokenizeResponse{Prompt: *out.Prompt}, nil
}

// readAs reads a request message as the JSON struct the REST surface decodes.
func readAs(m proto.Message, v any) error {
	raw, err := marshal.Marshal(m)
	if err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	return nil
}

func int32s(ids []int) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}
