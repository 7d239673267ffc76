package openai

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	openaiv1 "github.com/sluicegw/sluice/gen/sluice/openai/v1"
	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/backend/workerrpc"
)

func ptr[T any](v T) *T { return &v }

func str(s string) *structpb.Value { return structpb.NewStringValue(s) }

func list(vs ...any) *structpb.Value {
	l, err := structpb.NewList(vs)
	if err != nil {
		panic(err)
	}
	return structpb.NewListValue(l)
}

func extra(fields map[string]any) *structpb.Struct {
	s, err := structpb.NewStruct(fields)
	if err != nil {
		panic(err)
	}
	return s
}

func user(content *structpb.Value) []*openaiv1.ChatMessage {
	return []*openaiv1.ChatMessage{{Role: "system", Content: str("be brief")}, {Role: "user", Content: content}}
}

// TestTypedMatchesJSON: for every request the typed path takes, what it hands dispatch is what the
// JSON path reads from the same request rendered as JSON: the routing fields (body.ParseRequest) and
// the worker call's RPCs (workerrpc.BuildCall). The requests it leaves to the JSON path are named.
func TestTypedMatchesJSON(t *testing.T) {
	cases := []struct {
		name   string
		m      proto.Message
		stream bool
		json   bool // left to the JSON path
	}{
		{name: "chat", m: &openaiv1.CreateChatCompletionRequest{Model: "m", Messages: user(str("hi <there> & \"you\"")), MaxTokens: ptr[int32](8), Seed: ptr[int32](7)}},
		{name: "chat stream usage", stream: true, m: &openaiv1.CreateChatCompletionRequest{Model: "m", Messages: user(str("hi")),
			StreamOptions: &openaiv1.StreamOptions{IncludeUsage: true}, Temperature: ptr(0.5), TopP: ptr(0.9), N: ptr[int32](2)}},
		{name: "chat unary ignores stream options", m: &openaiv1.CreateChatCompletionRequest{Model: "m", Messages: user(str("hi")),
			StreamOptions: &openaiv1.StreamOptions{IncludeUsage: true}, Stream: ptr(true)}},
		{name: "chat all scalars", m: &openaiv1.CreateChatCompletionRequest{Model: "m", Messages: user(str("hi")), MaxTokens: ptr[int32](9),
			MaxCompletionTokens: ptr[int32](5), Stop: list("x", "y"), PresencePenalty: ptr(0.1), FrequencyPenalty: ptr(-0.2),
			Logprobs: ptr(true), TopLogprobs: ptr[int32](2), User: "u1",
			ExtraBody: extra(map[string]any{"top_k": 20, "min_tokens": 2, "ignore_eos": true, "min_p": 0.05, "priority": 3, "custom": "v", "nothing": nil})}},
		{name: "chat stop string", m: &openaiv1.CreateChatCompletionRequest{Model: "m", Messages: user(str("hi")), Stop: str("\n")}},
		{name: "chat parts", m: &openaiv1.CreateChatCompletionRequest{Model: "m", Messages: user(list(
			map[string]any{"type": "text", "text": "one"},
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": "http://x/y.png"}},
			map[string]any{"type": "text", "text": "two"}))}},
		{name: "chat null content", m: &openaiv1.CreateChatCompletionRequest{Model: "m", Messages: []*openaiv1.ChatMessage{
			{Role: "user", Content: str("q")}, {Role: "assistant"}, {Role: "user", Content: str("")}}}},
		{name: "completion", m: &openaiv1.CreateCompletionRequest{Model: "m", Prompt: str("Once upon"), MaxTokens: ptr[int32](6),
			Logprobs: ptr[int32](1), Echo: ptr(false), Suffix: "end"}},
		{name: "completion stream", stream: true, m: &openaiv1.CreateCompletionRequest{Model: "m", Prompt: str("Once upon")}},
		{name: "completion batch", m: &openaiv1.CreateCompletionRequest{Model: "m", Prompt: list("a\tb\b", "c<d>\u2028é\x01"), N: ptr[int32](2)}},
		{name: "completion ids", m: &openaiv1.CreateCompletionRequest{Model: "m", Prompt: list(1, 2, 3)}},
		{name: "completion id batch", m: &openaiv1.CreateCompletionRequest{Model: "m", Prompt: list([]any{1, 2}, []any{3})}},

		{name: "tools", json: true, m: &openaiv1.CreateChatCompletionRequest{Model: "m", Messages: user(str("hi")),
			Tools: []*structpb.Struct{extra(map[string]any{"type": "function"})}}},
		{name: "no model", json: true, m: &openaiv1.CreateChatCompletionRequest{Messages: user(str("hi"))}},
		{name: "no messages", json: true, m: &openaiv1.CreateChatCompletionRequest{Model: "m"}},
		{name: "no role", json: true, m: &openaiv1.CreateChatCompletionRequest{Model: "m", Messages: []*openaiv1.ChatMessage{{Content: str("hi")}}}},
		{name: "bad temperature", json: true, m: &openaiv1.CreateChatCompletionRequest{Model: "m", Messages: user(str("hi")), Temperature: ptr(-1.0)}},
		{name: "bad max_tokens", json: true, m: &openaiv1.CreateChatCompletionRequest{Model: "m", Messages: user(str("hi")), MaxTokens: ptr[int32](0)}},
		{name: "n too large", json: true, m: &openaiv1.CreateChatCompletionRequest{Model: "m", Messages: user(str("hi")), N: ptr[int32](1000)}},
		{name: "min above max", json: true, m: &openaiv1.CreateChatCompletionRequest{Model: "m", Messages: user(str("hi")), MaxTokens: ptr[int32](2),
			ExtraBody: extra(map[string]any{"min_tokens": 5})}},
		{name: "extra names a field", json: true, m: &openaiv1.CreateChatCompletionRequest{Model: "m", Messages: user(str("hi")),
			ExtraBody: extra(map[string]any{"max_tokens": 5})}},
		{name: "extra object", json: true, m: &openaiv1.CreateChatCompletionRequest{Model: "m", Messages: user(str("hi")),
			ExtraBody: extra(map[string]any{"chat_template_kwargs": map[string]any{"x": 1}})}},
		{name: "bad top_k", json: true, m: &openaiv1.CreateChatCompletionRequest{Model: "m", Messages: user(str("hi")),
			ExtraBody: extra(map[string]any{"top_k": 1.5})}},
		{name: "content number", json: true, m: &openaiv1.CreateChatCompletionRequest{Model: "m", Messages: user(structpb.NewNumberValue(3))}},
		{name: "stop number", json: true, m: &openaiv1.CreateChatCompletionRequest{Model: "m", Messages: user(str("hi")), Stop: list(1)}},
		{name: "mixed prompt", json: true, m: &openaiv1.CreateCompletionRequest{Model: "m", Prompt: list("a", 1)}},
		{name: "negative id", json: true, m: &openaiv1.CreateCompletionRequest{Model: "m", Prompt: list(-1)}},
		{name: "empty prompt", json: true, m: &openaiv1.CreateCompletionRequest{Model: "m", Prompt: list()}},
		{name: "no prompt", json: true, m: &openaiv1.CreateCompletionRequest{Model: "m"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			br, call := typedRequest(tc.m, tc.stream)
			if tc.json {
				if br != nil || call != nil {
					t.Fatalf("typed path taken for a request it leaves to JSON")
				}
				return
			}
			if br == nil || call == nil {
				t.Fatal("left to the JSON path")
			}
			raw, err := requestBody(tc.m, tc.stream)
			if err != nil {
				t.Fatal(err)
			}
			want, err := body.ParseRequest(br.Route, raw)
			if err != nil {
				t.Fatalf("the JSON path refuses %s: %v", raw, err)
			}
			if d := cmp.Diff(want, br, cmpopts.IgnoreFields(body.Request{}, "Body"), cmpopts.IgnoreUnexported(body.Request{})); d != "" {
				t.Errorf("routing fields (-JSON +typed):\n%s", d)
			}
			wantCall, err := workerrpc.BuildCall(br.Route, raw, "req-1")
			if err != nil {
				t.Fatal(err)
			}
			got := call.WithRequestID("req-1")
			if d := cmp.Diff(wantCall.DecodeRequests(), got.DecodeRequests(), protocmp.Transform()); d != "" {
				t.Errorf("decode RPCs (-JSON +typed) of %s:\n%s", raw, d)
			}
			ws, wu, wb := wantCall.Shape()
			gs, gu, gb := got.Shape()
			if ws != gs || wu != gu || wb != gb {
				t.Errorf("shape (stream, usage, batched) = %v %v %v, JSON path %v %v %v", gs, gu, gb, ws, wu, wb)
			}
		})
	}
}
