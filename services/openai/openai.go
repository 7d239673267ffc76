// Package openai implements sluice.openai.v1.OpenAIService — the OpenAI API as typed protobuf over
// Connect, gRPC and gRPC-Web — on the same dispatch core as the REST surface. A chat or completions
// request reaches workers that speak sluice's worker protocol as messages, converted from the client's
// (typed.go), and is rendered as OpenAI JSON (protojson with proto names, extra_body merged as
// top-level fields) only for a leg that needs JSON; other requests go as that JSON. Engine JSON and
// SSE chunks become messages again (unknown fields dropped).
package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	openaiv1 "github.com/sluicegw/sluice/gen/sluice/openai/v1"
	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/backend/workerrpc"
	"github.com/sluicegw/sluice/internal/dispatch"
	"github.com/sluicegw/sluice/internal/tokenizer"
)

var (
	marshal   = protojson.MarshalOptions{UseProtoNames: true}
	unmarshal = protojson.UnmarshalOptions{DiscardUnknown: true}
)

// Service implements the typed OpenAI API.
type Service struct {
	openaiv1.UnimplementedOpenAIServiceServer
	d *dispatch.Dispatcher
	// onJSON and onJSONAnswer, when set, are told each time a request is rendered as JSON, and each
	// time a whole answer is read from JSON (tests of the typed path).
	onJSON, onJSONAnswer func(dispatch.Route)
	// tokenizers, when set, returns a model's tokenizer for Tokenize and Detokenize (tokenize.go).
	tokenizers func(model string) *tokenizer.Tokenizer
}

// New builds the service on a dispatcher.
func New(d *dispatch.Dispatcher) *Service { return &Service{d: d} }

func wire(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	return apierror.From(err).Connect()
}

// requestBody renders a request message as the engine JSON: proto field names, stream forced,
// extra_body's fields lifted to the top level.
func requestBody(m proto.Message, stream bool) ([]byte, error) {
	raw, err := marshal.Marshal(m)
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, err
	}
	if extra, ok := fields["extra_body"]; ok {
		delete(fields, "extra_body")
		var ex map[string]json.RawMessage
		if err := json.Unmarshal(extra, &ex); err != nil {
			return nil, err
		}
		for k, v := range ex {
			if _, taken := fields[k]; !taken {
				fields[k] = v
			}
		}
	}
	if stream {
		fields["stream"] = json.RawMessage("true")
	} else {
		delete(fields, "stream")
		delete(fields, "stream_options")
	}
	return json.Marshal(fields)
}

func (s *Service) do(ctx context.Context, route dispatch.Route, m proto.Message, stream bool, h http.Header) (*dispatch.Response, error) {
	render := func() ([]byte, error) {
		if s.onJSON != nil {
			s.onJSON(route)
		}
		return requestBody(m, stream)
	}
	req := &dispatch.Request{Route: route, Header: h}
	if br, call := typedRequest(m, stream); br != nil {
		call = call.WithTypedAnswer()                                     // answer.go
		req.Typed = &dispatch.Typed{Parsed: br, Call: call, JSON: render} // typed.go
	} else {
		body, err := render()
		if err != nil {
			return nil, apierror.InvalidRequest("", "cannot encode request: "+err.Error()).Connect()
		}
		req.Body = body
	}
	resp, err := s.d.Do(ctx, req)
	if err != nil {
		return nil, wire(err)
	}
	// Name the serving workers in the response metadata, as the REST surface does in its headers.
	if ci, ok := connect.CallInfoForHandlerContext(ctx); ok {
		for _, k := range []string{dispatch.HeaderWorker, dispatch.HeaderPrefillWorker} {
			if v := resp.Header.Get(k); v != "" {
				ci.ResponseHeader().Set(k, v)
			}
		}
	}
	return resp, nil
}

// unary answers a whole request: from the worker's messages when it came so (fromAnswer; nil for a
// request that has no typed answer), else by reading the engine JSON.
func unary[T proto.Message](ctx context.Context, s *Service, route dispatch.Route, req proto.Message, h http.Header, out T,
	fromAnswer func(*workerrpc.Answer) T) (T, error) {
	resp, err := s.do(ctx, route, req, false, h)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	if a := resp.Answer(); a != nil && fromAnswer != nil {
		return fromAnswer(a), nil
	}
	if s.onJSONAnswer != nil {
		s.onJSONAnswer(route)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return out, wire(err)
	}
	if err := unmarshal.Unmarshal(b, out); err != nil {
		return out, connect.NewError(connect.CodeInternal, errors.New("engine returned an unreadable response: "+err.Error()))
	}
	return out, nil
}

// streaming relays a streamed answer: from the worker's messages when it came so (fromChunk), else by
// reading the engine's SSE chunks.
func streaming[T proto.Message](ctx context.Context, s *Service, route dispatch.Route, req proto.Message, h http.Header, send func(T) error, mk func() T,
	fromChunk func(*workerrpc.Stream, *workerrpc.Chunk) T) error {
	resp, err := s.do(ctx, route, req, true, h)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if ch := resp.Chunks(); ch != nil {
		return relayChunks(ch, send, fromChunk)
	}
	if s.onJSONAnswer != nil {
		s.onJSONAnswer(route)
	}
	r := resp.Frames()
	for {
		data, err := r.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return wire(err)
		}
		if bytes.Equal(data, []byte("[DONE]")) {
			return nil
		}
		if body.IsErrorFrame(data) {
			return apierror.FromUpstream(http.StatusBadGateway, data, "engine failed mid-stream", nil).Connect()
		}
		msg := mk()
		if err := unmarshal.Unmarshal(data, msg); err != nil {
			return connect.NewError(connect.CodeInternal, errors.New("engine sent an unreadable chunk: "+err.Error()))
		}
		if err := send(msg); err != nil {
			return err
		}
	}
}

// CreateChatCompletion returns a whole chat completion.
func (s *Service) CreateChatCompletion(ctx context.Context, req *openaiv1.CreateChatCompletionRequest) (*openaiv1.ChatCompletion, error) {
	return unary(ctx, s, dispatch.RouteChat, req, callHeader(ctx), &openaiv1.ChatCompletion{}, chatFromAnswer)
}

// StreamChatCompletion streams chat completion chunks.
func (s *Service) StreamChatCompletion(ctx context.Context, req *openaiv1.CreateChatCompletionRequest, st *connect.ServerStream[openaiv1.ChatCompletionChunk]) error {
	return streaming(ctx, s, dispatch.RouteChat, req, callHeader(ctx), st.Send, func() *openaiv1.ChatCompletionChunk { return &openaiv1.ChatCompletionChunk{} },
		chatChunk)
}

// CreateCompletion returns a whole text completion.
func (s *Service) CreateCompletion(ctx context.Context, req *openaiv1.CreateCompletionRequest) (*openaiv1.Completion, error) {
	return unary(ctx, s, dispatch.RouteCompletions, req, callHeader(ctx), &openaiv1.Completion{}, completionFromAnswer)
}

// StreamCompletion streams text completion chunks.
func (s *Service) StreamCompletion(ctx context.Context, req *openaiv1.CreateCompletionRequest, st *connect.ServerStream[openaiv1.Completion]) error {
	return streaming(ctx, s, dispatch.RouteCompletions, req, callHeader(ctx), st.Send, func() *openaiv1.Completion { return &openaiv1.Completion{} },
		completionChunk)
}

// ListModels lists the models the workers serve.
func (s *Service) ListModels(context.Context, *openaiv1.ListModelsRequest) (*openaiv1.ListModelsResponse, error) {
	out := &openaiv1.ListModelsResponse{Object: "list"}
	now := int32(time.Now().Unix())
	for _, m := range s.d.Models() {
		out.Data = append(out.Data, &openaiv1.Model{Id: m, Object: "model", Created: now, OwnedBy: "sluice"})
	}
	return out, nil
}

// callHeader returns the incoming request headers (routing keys, traceparent, x-request-id).
func callHeader(ctx context.Context) http.Header {
	if ci, ok := connect.CallInfoForHandlerContext(ctx); ok {
		return ci.RequestHeader()
	}
	return http.Header{}
}
